import json

import pytest
import torch
import yaml
from torch import nn

from captionlib.models.captioner import Captioner, load_model_file
from captionlib.train import trainer as trainer_module
from captionlib.train.average import average_checkpoints
from captionlib.train.options import TrainOptions
from captionlib.train.trainer import Trainer

CONF = {"vocab_size": 12, "decoder_conf": {"hidden_size": 8}}


def _batches(epoch):
    g = torch.Generator().manual_seed(epoch)
    for _ in range(3):
        yield torch.randn(2, 24, 64, generator=g), torch.tensor([24, 20]), torch.randint(2, 11, (2, 4), generator=g)


class Objective(nn.Module):
    def __init__(self, fail_at=None):
        super().__init__()
        self.calls, self.fail_at = 0, fail_at

    def forward(self, model, batch):
        self.calls += 1
        if self.fail_at is not None and self.calls == self.fail_at:
            raise KeyboardInterrupt("killed")
        feats, lens, ys = batch
        logits = model(feats, lens, ys)
        loss = nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ys.flatten())
        return loss, {"loss": loss.item()}


def _trainer(tmp_path, max_epoch, objective, model=None):
    torch.manual_seed(0)
    model = model or Captioner(**CONF)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    scores = iter([0.1, 0.3, 0.2, 0.25, 0.05])
    opts = TrainOptions(output_dir=str(tmp_path), max_epoch=max_epoch, keep_nbest=2, log_interval=1)
    return Trainer(model, opt, objective, _batches, lambda m: {"cider_d": next(scores)}, opts,
                   CONF, [str(i) for i in range(12)])


def test_resume_after_kill_continues_from_last_epoch(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        _trainer(tmp_path, 3, Objective(fail_at=5)).run()  # killed during epoch 2
    assert json.loads((tmp_path / "history.json").read_text())[-1]["epoch"] == 1
    assert not list(tmp_path.glob("*.tmp"))
    obj = Objective()
    t = _trainer(tmp_path, 3, obj)
    hist = t.run()
    assert [h["epoch"] for h in hist] == [1, 2, 3]
    assert obj.calls == 6  # epochs 2 and 3 only
    # a finished run does nothing
    obj2 = Objective()
    _trainer(tmp_path, 3, obj2).run()
    assert obj2.calls == 0


def test_env_yaml_is_written_by_runs_that_train_and_kept_on_a_resume_elsewhere(tmp_path, monkeypatch):
    with pytest.raises(KeyboardInterrupt):
        _trainer(tmp_path, 3, Objective(fail_at=5)).run()  # killed during epoch 2
    first = yaml.safe_load((tmp_path / "env.yaml").read_text())
    assert first["device"] == "cpu" and first["torch"] == str(torch.__version__)

    def code(revision):
        monkeypatch.setattr(trainer_module, "environment", lambda device: dict(first, git_revision=revision * 40))

    code("d")
    with pytest.raises(KeyboardInterrupt):
        _trainer(tmp_path, 3, Objective(fail_at=1)).run()  # killed before it saved an epoch: trained nothing
    assert yaml.safe_load((tmp_path / "env.yaml").read_text()) == first and not (tmp_path / "env.yaml.1").exists()
    code("f")
    _trainer(tmp_path, 3, Objective()).run()  # epochs 2 and 3 under other code
    assert yaml.safe_load((tmp_path / "env.yaml.1").read_text()) == first
    assert yaml.safe_load((tmp_path / "env.yaml").read_text())["git_revision"] == "f" * 40
    code("e")
    _trainer(tmp_path, 3, Objective()).run()  # finished: trains nothing, so it records nothing
    assert yaml.safe_load((tmp_path / "env.yaml").read_text())["git_revision"] == "f" * 40
    assert not (tmp_path / "env.yaml.2").exists()
    (tmp_path / "latest.pth").unlink()
    _trainer(tmp_path, 3, Objective()).run()  # a fresh run replaces the one before it, env.yaml.1 too
    assert sorted(p.name for p in tmp_path.glob("env.yaml*")) == ["env.yaml"]
    assert yaml.safe_load((tmp_path / "env.yaml").read_text())["git_revision"] == "e" * 40


def test_best_and_nbest_files(tmp_path, caplog, capfd):
    caplog.set_level("INFO")
    hist = _trainer(tmp_path, 4, Objective()).run()  # valid cider_d: 0.1 0.3 0.2 0.25
    summary = f"train_loss: epoch 1 {hist[0]['train_loss']:.4g} -> epoch 4 {hist[-1]['train_loss']:.4g}"
    assert summary in caplog.text  # start/end of training in one line
    best = torch.load(tmp_path / "valid.cider_d.best.pth", weights_only=False)
    assert best["epoch"] == 2
    kept = sorted(p.name for p in tmp_path.glob("*epoch.pth"))
    assert kept == ["2epoch.pth", "4epoch.pth"]  # 2 best (2, 4) + the last (4)
    model, obj = load_model_file(str(tmp_path / "valid.cider_d.best.pth"))
    assert obj["model_conf"] == CONF and not model.training
    avg = average_checkpoints(str(tmp_path), str(tmp_path / "ave.pth"), nbest=2)
    a = torch.load(avg, weights_only=False)
    assert a["averaged_epochs"] == [2, 4]
    e2 = torch.load(tmp_path / "2epoch.pth", weights_only=False)["model"]
    e4 = torch.load(tmp_path / "4epoch.pth", weights_only=False)["model"]
    k = "decoder.output.weight"
    assert torch.allclose(a["model"][k], (e2[k] + e4[k]) / 2)

    # stage 7's binary: by default the metric the epoch files were kept by, and its file name
    from captionbin.caption_average_checkpoints import main as average_main

    (tmp_path / "config.yaml").write_text("best_model_criterion: cider_d\nkeep_nbest: 1\n")
    average_main(["--exp_dir", str(tmp_path), "--nbest", "2"])
    assert torch.load(tmp_path / "valid.cider_d.ave_2best.pth", weights_only=False)["averaged_epochs"] == [2, 4]
    # more epochs asked than kept: the kept ones, with a warning naming the metric they were kept by
    capfd.readouterr()
    average_main(["--exp_dir", str(tmp_path), "--nbest", "3"])  # logs to stderr (the binary's own logging)
    assert torch.load(tmp_path / "valid.cider_d.ave_3best.pth", weights_only=False)["averaged_epochs"] == [2, 4]
    assert "the 3 best epochs by valid cider_d are [2, 4, 3], but only [2, 4] of them have an epoch file " \
           "(kept by valid cider_d, keep_nbest); averaging [2, 4]" in capfd.readouterr().err


@pytest.mark.parametrize("max_epoch", [0, -3])
def test_max_epoch_below_one_is_an_error(tmp_path, max_epoch):
    with pytest.raises(ValueError, match="max_epoch must be >= 1"):
        _trainer(tmp_path, max_epoch, Objective())


def test_truncated_or_foreign_model_file_names_its_path(tmp_path):
    from captionlib.models.captioner import model_file_dict

    good = tmp_path / "model.pth"
    torch.save(model_file_dict(Captioner(**CONF), CONF, [str(i) for i in range(12)]), good)
    data = good.read_bytes()
    bad = tmp_path / "truncated.pth"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="truncated.pth: cannot read"):
        load_model_file(str(bad))
    foreign = tmp_path / "tensor.pth"
    torch.save(torch.zeros(3), foreign)
    with pytest.raises(ValueError, match="tensor.pth: not a captionlib model file"):
        load_model_file(str(foreign))
    with pytest.raises(FileNotFoundError, match="missing.pth"):
        load_model_file(str(tmp_path / "missing.pth"))
    load_model_file(str(good))


def test_a_second_trainer_on_a_live_experiment_dir_stops(tmp_path):
    import os
    import socket
    import subprocess
    import sys

    from captionlib.utils.fileio import exp_dir_lock

    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / ".lock").write_text(f"{live.pid} {socket.gethostname()}\n")
        with pytest.raises(RuntimeError, match=rf"in use by process {live.pid} on .*\.lock"):
            _trainer(tmp_path, 1, Objective()).run()
    finally:
        live.kill()
        live.wait()
    # the holder is gone: its stale lock is taken over, and released after training
    _trainer(tmp_path, 1, Objective()).run()
    assert not (tmp_path / ".lock").exists() and (tmp_path / "1epoch.pth").exists()
    with exp_dir_lock(tmp_path) as lock:
        assert lock.read_text().split()[0] == str(os.getpid())
    assert not lock.exists()


def _amp_trainer(tmp_path, amp, device="cpu", max_epoch=2):
    torch.manual_seed(0)
    model = Captioner(**CONF).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def batches(epoch):
        return [tuple(t.to(device) for t in b) for b in _batches(epoch)]

    opts = TrainOptions(output_dir=str(tmp_path), max_epoch=max_epoch, amp=amp)
    return Trainer(model, opt, Objective(), batches, lambda m: {"cider_d": 0.1}, opts,
                   CONF, [str(i) for i in range(12)], device=torch.device(device))


def test_amp_is_off_on_cpu_with_a_warning(tmp_path, caplog):
    with pytest.raises(ValueError, match="amp must be one of none, bf16, fp16"):
        _amp_trainer(tmp_path, "fp8")
    caplog.set_level("WARNING")
    hist = _amp_trainer(tmp_path / "bf16", "bf16").run()
    assert "amp bf16 is for CUDA devices; training on cpu in float32" in caplog.text
    assert [h["train_loss"] for h in hist] == [h["train_loss"] for h in _amp_trainer(tmp_path / "none", "none").run()]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="mixed precision needs a CUDA device (none visible)")
@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_amp_trains_and_resumes_on_cuda(tmp_path, amp):
    hist = _amp_trainer(tmp_path, amp, "cuda", max_epoch=1).run()
    assert torch.isfinite(torch.tensor(hist[0]["train_loss"]))
    state = torch.load(tmp_path / "latest.pth", weights_only=False)
    assert ("grad_scaler" in state) == (amp == "fp16")
    hist = _amp_trainer(tmp_path, amp, "cuda", max_epoch=2).run()  # resumes epoch 2 (scaler state included)
    assert [h["epoch"] for h in hist] == [1, 2] and hist[1]["train_loss"] < hist[0]["train_loss"] * 1.5


def test_a_full_disk_names_the_file_and_the_history_keeps_only_saved_epochs(tmp_path, monkeypatch):
    """Issue 25: the write that fails names its file; history.json never lists an epoch
    whose checkpoint was not saved; the re-run resumes after the last saved epoch."""
    import errno
    import os

    from captionlib.utils import fileio

    _trainer(tmp_path, 1, Objective()).run()
    real_fsync = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fileio.os, "fsync", full)
    with pytest.raises(OSError, match=r"writing .*2epoch\.pth: No space left on device"):
        _trainer(tmp_path, 3, Objective()).run()
    assert [h["epoch"] for h in json.loads((tmp_path / "history.json").read_text())] == [1]
    assert not list(tmp_path.glob("*.tmp"))
    monkeypatch.setattr(fileio.os, "fsync", real_fsync)
    obj = Objective()
    assert [h["epoch"] for h in _trainer(tmp_path, 3, obj).run()] == [1, 2, 3] and obj.calls == 6


def test_resuming_from_other_inputs_is_refused_naming_them(tmp_path, caplog):
    """Issue 25: a run whose token list or training text changed since its latest.pth does
    not resume (or keep) the old model silently."""
    def trainer(inputs, max_epoch=1):
        t = _trainer(tmp_path, max_epoch, Objective())
        t.inputs = inputs
        return t

    trainer({"token_list": "a1", "train_text": "b1"}).run()
    with pytest.raises(RuntimeError, match=r"latest.pth was trained from other inputs than this run's: "
                                           r"token_list, train_text changed since.*remove"):
        trainer({"token_list": "a2", "train_text": "b2"}, max_epoch=2).run()
    # the same inputs resume; a checkpoint from before this check resumes with a warning
    assert [h["epoch"] for h in trainer({"token_list": "a1", "train_text": "b1"}, 2).run()] == [1, 2]
    state = torch.load(tmp_path / "latest.pth", weights_only=True)
    del state["inputs"]
    torch.save(state, tmp_path / "latest.pth")
    with caplog.at_level("WARNING"):
        trainer({"token_list": "a3"}, 2).run()
    assert "records no inputs" in caplog.text


def test_a_history_behind_latest_pth_is_mended_on_resume(tmp_path):
    """Killed after latest.pth and before history.json: the re-run rewrites history.json."""
    _trainer(tmp_path, 2, Objective()).run()
    full = json.loads((tmp_path / "history.json").read_text())
    (tmp_path / "history.json").write_text(json.dumps(full[:1]))
    obj = Objective()
    _trainer(tmp_path, 2, obj).run()
    assert obj.calls == 0 and json.loads((tmp_path / "history.json").read_text()) == full
