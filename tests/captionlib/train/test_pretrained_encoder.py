"""XE training from a published encoder checkpoint (issue 26 item 3): ``encoder_conf:
{pretrained, lr_factor}`` and ``freeze_encoder``, the checkpoint read as the authors wrote it (numpy sampler
state included) and nothing else unpickled, the front end checked against the dump dir's
``feats_config.yaml``, the encoder frozen for N epochs or for good (weights and BatchNorm
statistics), its own learning rate, and a run resumed in the middle equal to an
uninterrupted one."""

import io
import logging
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from torch import nn

from captionlib.models.captioner import Captioner, load_model_file
from captionlib.models.panns import Cnn10Encoder, front_end_tensors
from captionlib.models.pretrained_load import CheckpointMismatchError, read_state_dict
from captionlib.train.options import TrainOptions, XEOptions
from captionlib.train.schedule import lr_factor, make_optimizer, param_groups
from captionlib.train.trainer import Trainer
from captionlib.train.xe import EncoderTraining, split_encoder_conf, train_xe
from captionlib.utils.fileio import UnsafeFileError
from bad_inputs import CodeOnLoad
from dump_dirs import tiny_dump_dir

REPO = Path(__file__).resolve().parents[3]
FEATS_PANNS = yaml.safe_load((REPO / "egs" / "clotho" / "conf" / "feats_panns.yaml").read_text())
TOKENS = "<blank>\n<unk>\na\nand\nbarks\nbird\ndog\nfalls\nrain\nsings\n<sos/eos>\n"


class Sampler:
    """A class of the writer's own (a pickled instance needs its global: refused)."""

    def __init__(self):
        self.pointer = 3


def _dump(root, feats_config=FEATS_PANNS):
    """A tiny dump dir of 64-bin dB features (4 clips, 5 captions) with its feats_config.yaml."""
    return tiny_dump_dir(root, feats_config)


def _checkpoint(path, rename=None, sampler=None):
    """A CNN10 checkpoint in the authors' layout (``main.py``: iteration, model, sampler), with
    BatchNorm statistics unlike a fresh encoder's and the front end of feats_panns.yaml;
    returns the encoder's state dict."""
    torch.manual_seed(1)
    enc = Cnn10Encoder()
    with torch.no_grad():
        for m in enc.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.num_batches_tracked.fill_(660000)
    state = {k: v.clone() for k, v in enc.state_dict().items()}
    model = dict(state, **front_end_tensors(FEATS_PANNS))
    if rename:
        model[rename[1]] = model.pop(rename[0])
    if sampler is None:  # the authors' samplers: numpy index arrays, numpy and python ints
        sampler = {"indexes_per_class": [np.arange(5), np.array([7, 2], dtype=np.int64)],
                   "queue": [np.int64(4), 2], "pointers_of_classes": [0, np.int64(1)], "pointer": np.int64(3)}
    torch.save({"iteration": 660000, "model": model, "sampler": sampler}, path)
    return state


def _opts(tmp_path, data, out, freeze=False, **encoder_conf):
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(TOKENS)
    stats = tmp_path / "feats_stats.npz"
    np.savez(stats, mean=np.full(64, -40.0, np.float32), std=np.full(64, 10.0, np.float32))
    return XEOptions(train_data_dir=str(data), valid_data_dir=str(data), output_dir=str(out), token_list=str(tokens),
                     feats_stats=str(stats), batch_size=3, max_epoch=2, max_len=4, keep_nbest=5, lr=1e-3,
                     optim="adamw", weight_decay=0.01, scheduler="warmup_cosine", warmup_steps=2,
                     encoder="cnn10", encoder_conf=encoder_conf, freeze_encoder=freeze, decoder="gru",
                     decoder_conf={"hidden_size": 8})


def _model(out, epoch):
    return torch.load(Path(out) / f"{epoch}epoch.pth", weights_only=True)["model"]


def test_split_encoder_conf_validates_the_trainer_keys():
    conf, training = split_encoder_conf({"pretrained": "a.pth", "lr_factor": 0.1, "dropout": 0.3}, 2)
    assert conf == {"dropout": 0.3} and training == EncoderTraining("a.pth", 2, 0.1)
    assert [training.frozen(e) for e in (1, 2, 3)] == [True, True, False]
    assert split_encoder_conf({}, True)[1].frozen_epochs == math.inf
    assert split_encoder_conf({}, False)[1] == split_encoder_conf({}, 0)[1] == EncoderTraining()
    assert split_encoder_conf(None) == ({}, EncoderTraining())
    for bad in (-1, 1.5, "yes", None):
        with pytest.raises(ValueError, match=r"freeze_encoder must be .*, got"):
            split_encoder_conf({}, bad)
    with pytest.raises(ValueError, match=r"encoder_conf\.freeze moved to the option freeze_encoder .*: 1'"):
        split_encoder_conf({"freeze": 1})
    for bad in (0, -1, float("nan"), float("inf"), True, "0.1"):
        with pytest.raises(ValueError, match=r"encoder_conf\.lr_factor must be a number > 0"):
            split_encoder_conf({"lr_factor": bad})
    with pytest.raises(ValueError, match=r"encoder_conf\.pretrained must be the path"):
        split_encoder_conf({"pretrained": 3})


def test_the_authors_layout_loads_with_its_numpy_sampler_state_and_nothing_else(tmp_path, caplog):
    state = _checkpoint(tmp_path / "ok.pth")
    with caplog.at_level(logging.INFO):
        loaded = read_state_dict(str(tmp_path / "ok.pth"))
    assert all(torch.equal(loaded[k], v) for k, v in state.items())
    line = [r.getMessage() for r in caplog.records if "not used" in r.getMessage()]
    assert len(line) == 1 and "['iteration', 'sampler']" in line[0]
    assert np.ndarray not in torch.serialization.get_safe_globals()  # allowed while reading only
    # a file as numpy 1 and torch's legacy format wrote it (the 2020 checkpoints): numpy.core names
    buf = io.BytesIO()
    torch.save({"iteration": 1, "model": {"fc1.bias": torch.arange(3.0)},
                "sampler": {"indexes": np.arange(4), "pointer": np.int64(2)}}, buf,
               _use_new_zipfile_serialization=False)
    assert buf.getvalue().count(b"numpy._core.multiarray") == 2
    (tmp_path / "np1.pth").write_bytes(buf.getvalue().replace(b"numpy._core.multiarray", b"numpy.core.multiarray"))
    assert torch.equal(read_state_dict(str(tmp_path / "np1.pth"))["fc1.bias"], torch.arange(3.0))
    # another class, or code run on unpickling, in the sampler state: refused, nothing run
    marker = tmp_path / "ran"
    for name, sampler in (("class", Sampler()), ("code", {"pointer": CodeOnLoad(marker)})):
        _checkpoint(tmp_path / f"{name}.pth", sampler=sampler)
        with pytest.raises(UnsafeFileError, match=f"{name}.pth: refused to load"):
            read_state_dict(str(tmp_path / f"{name}.pth"))
    assert not marker.exists()
    # numpy arrays of objects stay refused too
    _checkpoint(tmp_path / "obj.pth", sampler={"names": np.array([{"a": 1}], dtype=object)})
    with pytest.raises(ValueError, match="obj.pth"):
        read_state_dict(str(tmp_path / "obj.pth"))


def test_encoder_lr_factor_groups_keep_their_ratio_and_weight_decay_exemptions():
    torch.manual_seed(0)
    model = Captioner(10, feats_dim=16, encoder="linear", encoder_conf={"output_size": 8},
                      decoder_conf={"hidden_size": 8})
    opts = TrainOptions(lr=1e-2, optim="adamw", weight_decay=0.1, scheduler="warmup_cosine", warmup_steps=3)
    plain = param_groups(opts, model)
    groups = param_groups(opts, model, encoder_lr_factor=0.1)
    enc = {id(p) for p in model.encoder.parameters()}
    assert [("lr" in g, g.get("weight_decay")) for g in groups] == [(False, None), (False, 0.0), (True, None),
                                                                   (True, 0.0)]
    assert all(id(p) not in enc for g in groups[:2] for p in g["params"])
    assert {id(p) for g in groups[2:] for p in g["params"]} == enc
    assert sum(len(g["params"]) for g in groups) == sum(len(g["params"]) for g in plain)
    opt = make_optimizer(opts, groups)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(opts, 10))
    for _ in range(6):  # warm-up, then the cosine: the ratio holds at every step
        assert [g["lr"] for g in opt.param_groups] == pytest.approx([opt.param_groups[0]["lr"]] * 2
                                                                    + [0.1 * opt.param_groups[0]["lr"]] * 2)
        opt.step()
        sched.step()
    assert opt.param_groups[2]["initial_lr"] == pytest.approx(1e-3)
    with pytest.raises(ValueError, match="learning-rate factor must be > 0"):
        param_groups(opts, model, encoder_lr_factor=0.0)


def _encoder_equals(model_state, state):
    return all(torch.equal(model_state[f"encoder.{k}"], v) for k, v in state.items())


def test_pretrained_frozen_for_one_epoch_then_trained_and_resumed(tmp_path, monkeypatch, caplog):
    state = _checkpoint(tmp_path / "Cnn10_mAP=0.380.pth")
    data = _dump(tmp_path / "dump")
    conf = {"pretrained": str(tmp_path / "Cnn10_mAP=0.380.pth"), "lr_factor": 0.1}
    whole = _opts(tmp_path, data, tmp_path / "whole", freeze=1, **conf)
    with caplog.at_level(logging.INFO):
        train_xe(whole)
    e1, e2 = _model(whole.output_dir, 1), _model(whole.output_dir, 2)
    # epoch 1: the encoder is the checkpoint's, BatchNorm statistics included; epoch 2 trains it
    assert _encoder_equals(e1, state)
    for key in ("conv_block1.conv1.weight", "fc1.weight", "bn0.running_mean", "conv_block4.bn2.running_var"):
        assert not torch.equal(e2[f"encoder.{key}"], state[key]), key
    dec = [k for k in e1 if k.startswith("decoder.")]
    assert any(not torch.equal(e1[k], e2[k]) for k in dec)
    # the normalisation is the identity (feats_stats is given, and not used)
    assert torch.equal(e2["feats_mean"], torch.zeros(64)) and torch.equal(e2["feats_std"], torch.ones(64))
    assert "feature normalisation: the identity" in caplog.text and "not used" in caplog.text
    assert "epoch 1: encoder frozen" in caplog.text and "epoch 2: encoder unfrozen" in caplog.text
    # the model files need no checkpoint; config.yaml keeps the options as given
    model, obj = load_model_file(str(Path(whole.output_dir) / "2epoch.pth"))
    assert obj["model_conf"]["encoder_conf"] == {} and isinstance(model.encoder, Cnn10Encoder)
    config = yaml.safe_load((Path(whole.output_dir) / "config.yaml").read_text())
    assert config["encoder_conf"] == conf and config["freeze_encoder"] == 1

    # the same run killed after epoch 1 and resumed: the same model at the end
    killed = _opts(tmp_path, data, tmp_path / "killed", freeze=1, **conf)
    train_epoch = Trainer._train_epoch

    def kill_at_epoch_2(self, epoch, *args):
        if epoch == 2:
            raise KeyboardInterrupt("killed")
        return train_epoch(self, epoch, *args)

    monkeypatch.setattr(Trainer, "_train_epoch", kill_at_epoch_2)
    with pytest.raises(KeyboardInterrupt):
        train_xe(killed)
    latest = torch.load(Path(killed.output_dir) / "latest.pth", weights_only=True)
    assert latest["epoch"] == 1 and _encoder_equals({k: v for k, v in latest["model"].items()}, state)
    # the optimizer holds the encoder (0.1 x the lr, weight-decay exemptions kept) but has no
    # state for it after the frozen epoch; every other parameter has been updated
    groups, opt_state = latest["optimizer"]["param_groups"], latest["optimizer"]["state"]
    assert [g["weight_decay"] for g in groups] == [0.01, 0.0, 0.01, 0.0]
    assert [g["initial_lr"] for g in groups] == pytest.approx([1e-3, 1e-3, 1e-4, 1e-4])
    assert groups[2]["lr"] == pytest.approx(0.1 * groups[0]["lr"]) and groups[0]["lr"] > 0
    n_encoder = len(list(Cnn10Encoder().parameters()))
    assert sum(len(g["params"]) for g in groups[2:]) == n_encoder
    assert all(i not in opt_state for g in groups[2:] for i in g["params"])
    assert all(i in opt_state for g in groups[:2] for i in g["params"])
    monkeypatch.setattr(Trainer, "_train_epoch", train_epoch)
    train_xe(killed)
    resumed = _model(killed.output_dir, 2)
    for key, value in e2.items():
        assert torch.equal(value, resumed[key]), key


def test_frozen_for_good_and_with_an_adam_group(tmp_path):
    state = _checkpoint(tmp_path / "ckpt.pth")
    opts = _opts(tmp_path, _dump(tmp_path / "dump"), tmp_path / "exp", pretrained=str(tmp_path / "ckpt.pth"),
                 freeze=True)
    opts.optim, opts.weight_decay, opts.scheduler, opts.feats_stats = "adam", 0.0, "none", None
    train_xe(opts)
    assert _encoder_equals(_model(opts.output_dir, 1), state) and _encoder_equals(_model(opts.output_dir, 2), state)
    latest = torch.load(Path(opts.output_dir) / "latest.pth", weights_only=True)
    assert len(latest["optimizer"]["param_groups"]) == 1  # lr_factor 1: one group, the encoder in it


def _fails(opts, error, *words):
    with pytest.raises(error) as e:
        train_xe(opts)
    assert all(w in str(e.value) for w in words), str(e.value)
    assert not (Path(opts.output_dir) / "latest.pth").exists()


def test_bad_checkpoints_and_dump_dirs_fail_naming_what_is_wrong(tmp_path):
    data = _dump(tmp_path / "dump")
    _checkpoint(tmp_path / "renamed.pth", rename=("conv_block2.bn1.running_mean", "conv_block2.bn1.running_avg"))
    _fails(_opts(tmp_path, data, tmp_path / "a", pretrained=str(tmp_path / "renamed.pth")), CheckpointMismatchError,
           "renamed.pth", "conv_block2.bn1.running_mean", "conv_block2.bn1.running_avg")
    _fails(_opts(tmp_path, data, tmp_path / "b", pretrained=str(tmp_path / "Cnn14_mAP=0.431.pth")), FileNotFoundError,
           "Cnn14_mAP=0.431.pth", "downloads nothing", "https://zenodo.org/record/3987831")
    _checkpoint(tmp_path / "ok.pth")
    _fails(_opts(tmp_path, _dump(tmp_path / "old_dump", feats_config=None), tmp_path / "c",
                 pretrained=str(tmp_path / "ok.pth")), FileNotFoundError,
           str(tmp_path / "old_dump" / "feats_config.yaml"), "re-run stage 2")
    other = _dump(tmp_path / "dump_16k", feats_config={**FEATS_PANNS, "fs": 16000, "fmax": 8000})
    _fails(_opts(tmp_path, other, tmp_path / "d", pretrained=str(tmp_path / "ok.pth")), ValueError,
           "the features config and the checkpoint disagree", "fs 16000 (checkpoint: 32000)", "feats_panns.yaml")
    linear = _opts(tmp_path, data, tmp_path / "e", pretrained=str(tmp_path / "ok.pth"))
    linear.encoder = "linear"
    _fails(linear, ValueError, "encoder 'linear' has no checkpoint loader", "cnn10, cnn14")
    both = _opts(tmp_path, data, tmp_path / "f", pretrained=str(tmp_path / "ok.pth"))
    both.init_param = str(tmp_path / "ok.pth")
    _fails(both, ValueError, "init_param")
    _fails(_opts(tmp_path, data, tmp_path / "g", freeze=-1), ValueError, "freeze_encoder must be")
