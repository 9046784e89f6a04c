"""caption_convert_model: files in the layouts of older captionlib versions (built here with
torch.save and pickle as those versions wrote them) become files that load without unpickling."""

import pickle
import random
import zipfile

import numpy as np
import pytest
import torch

from captionbin.caption_convert_model import get_parser, main
from captionlib.metrics.cider_d import DocumentFrequency
from captionlib.models.captioner import Captioner, load_model_file, model_file_dict
from captionlib.train.trainer import set_numpy_rng_state
from captionlib.utils.fileio import UnsafeFileError, load_checkpoint

CONF = {"vocab_size": 12, "decoder_conf": {"hidden_size": 8}}
TOKENS = [str(i) for i in range(12)]
REFS = {"c0": [["a", "dog", "barks"], ["a", "dog"]], "c1": [["rain", "falls"]]}


def _old_latest(path):
    """latest.pth as the trainer wrote it before: numpy's RNG state as np.random.get_state()."""
    torch.manual_seed(0)
    model = Captioner(**CONF)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(2, 24, 64), torch.tensor([24, 20]), torch.randint(2, 11, (2, 4))).sum().backward()
    opt.step()
    np.random.seed(3)
    np.random.rand(5)
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 1,
             "history": [{"epoch": 1, "train_loss": 2.5}],
             "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}}
    torch.save(state, path)
    return state


def _old_df(path):
    """cider_df.pkl as caption_compute_cider_df wrote it before."""
    df = DocumentFrequency.from_references(REFS)
    obj = {"format": "captionlib.cider_df", "version": 1, "n": df.n, "num_docs": df.num_docs, "words": df.words,
           "keys": df.keys, "counts": df.counts}
    path.write_bytes(pickle.dumps(obj, protocol=4))
    return df


def test_parser_and_trust_pickle_is_required(tmp_path, capsys):
    assert get_parser() is not None
    with pytest.raises(SystemExit) as e:
        main(["--input", "a", "--output", str(tmp_path / "b")])
    assert e.value.code == 2 and "--trust_pickle true is required" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_old_latest_pth_is_refused_then_converted(tmp_path):
    old = tmp_path / "latest.pth"
    state = _old_latest(old)
    with pytest.raises(UnsafeFileError, match=rf"{old}: refused to load: .*numpy.*caption_convert_model"):
        load_checkpoint(old)
    main(["--trust_pickle", "true", "--input", str(old), "--output", str(old)])  # in place
    new = load_checkpoint(old)
    assert new["epoch"] == 1 and new["history"] == state["history"]
    assert new["rng"]["python"] == state["rng"]["python"]
    assert torch.equal(new["rng"]["torch"], state["rng"]["torch"])
    for k, v in state["model"].items():
        assert torch.equal(new["model"][k], v)
    assert new["optimizer"]["param_groups"] == state["optimizer"]["param_groups"]
    # the converted numpy state continues the same stream as the original
    np.random.set_state(state["rng"]["numpy"])
    want = np.random.rand(4)
    np.random.seed(0)
    set_numpy_rng_state(new["rng"]["numpy"])
    np.testing.assert_array_equal(np.random.rand(4), want)
    assert not list(tmp_path.glob("*.tmp"))


def test_old_model_file_converts_to_the_same_model(tmp_path):
    torch.manual_seed(0)
    model = Captioner(**CONF)
    torch.save(model_file_dict(model, CONF, TOKENS, epoch=3), tmp_path / "old.pth")
    main(["--trust_pickle", "true", "--input", str(tmp_path / "old.pth"), "--output", str(tmp_path / "new.pth")])
    loaded, obj = load_model_file(str(tmp_path / "new.pth"))
    assert obj["epoch"] == 3 and obj["token_list"] == TOKENS
    for k, v in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v)


def test_old_cider_df_pickle_converts_to_npz(tmp_path):
    df = _old_df(tmp_path / "cider_df.pkl")
    with pytest.raises(ValueError, match="cider_df.pkl: not an .npz"):
        DocumentFrequency.load(str(tmp_path / "cider_df.pkl"))
    assert DocumentFrequency.load(str(tmp_path / "cider_df.pkl"), trust_pickle=True).to_dict() == df.to_dict()
    main(["--trust_pickle", "true", "--input", str(tmp_path / "cider_df.pkl"), "--output", str(tmp_path / "df.npz")])
    assert DocumentFrequency.load(str(tmp_path / "df.npz")).to_dict() == df.to_dict()


class _Payload:
    """Pickles as a call of ``os.system``: what a crafted file would hold."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os
        return os.system, (f"touch {self.marker}",)


@pytest.mark.filterwarnings("ignore:Detected pickle protocol 4")  # torch.load of the crafted (non-torch) file
def test_a_crafted_pickle_runs_nothing_even_with_trust_pickle(tmp_path, capsys):
    marker = tmp_path / "ran"
    bad = tmp_path / "cider_df.pkl"
    bad.write_bytes(pickle.dumps({"format": "x", "keys": _Payload(marker)}, protocol=4))
    with pytest.raises(ValueError, match="refused global posix.system"):
        DocumentFrequency.load(str(bad), trust_pickle=True)
    with pytest.raises(SystemExit):  # the converter: neither a document-frequency pickle nor a torch file
        main(["--trust_pickle", "true", "--input", str(bad), "--output", str(tmp_path / "o.npz")])
    ckpt = tmp_path / "latest.pth"
    torch.save({"epoch": 1, "rng": _Payload(marker)}, ckpt)
    with pytest.raises(SystemExit):
        main(["--trust_pickle", "true", "--input", str(ckpt), "--output", str(tmp_path / "new.pth")])
    assert "holds posix.system" in capsys.readouterr().err
    assert not marker.exists()


def test_old_packed_model_converts(tmp_path):
    import yaml

    from captionlib.packed import PACKED_FORMAT, PretrainedCaptioner, read_packed, write_packed
    from packed_models import FEATS_CONFIG

    torch.manual_seed(0)
    model_bytes = tmp_path / "m.pth"
    torch.save(model_file_dict(Captioner(**CONF), CONF, TOKENS, epoch=1), model_bytes)
    df = _old_df(tmp_path / "cider_df.pkl")
    old = write_packed(tmp_path / "old.zip", {"format": PACKED_FORMAT, "version": 1, "recipe": "r"}, {
        "model.pth": model_bytes.read_bytes(), "feats_config.yaml": yaml.safe_dump(FEATS_CONFIG).encode(),
        "cider_df.pkl": (tmp_path / "cider_df.pkl").read_bytes()})
    main(["--trust_pickle", "true", "--input", str(old), "--output", str(tmp_path / "new.zip")])
    manifest, members = read_packed(tmp_path / "new.zip")  # sizes and SHA-256 match
    assert manifest["recipe"] == "r" and "cider_df.pkl" not in members
    with zipfile.ZipFile(tmp_path / "new.zip") as z:
        z.extract("cider_df.npz", tmp_path / "x")
    assert DocumentFrequency.load(str(tmp_path / "x" / "cider_df.npz")).to_dict() == df.to_dict()
    assert PretrainedCaptioner.from_pretrained(tmp_path / "new.zip").tokenizer.token_list == TOKENS


def test_a_file_with_types_of_no_safe_form_is_refused(tmp_path, capsys):
    import datetime

    torch.save({"model": {}, "when": datetime.date(2020, 1, 1)}, tmp_path / "odd.pth")
    with pytest.raises(SystemExit) as e:
        main(["--trust_pickle", "true", "--input", str(tmp_path / "odd.pth"), "--output", str(tmp_path / "o.pth")])
    assert e.value.code == 1
    assert "odd.pth: holds datetime.date, which this converter has no safe form for" in capsys.readouterr().err
    assert not (tmp_path / "o.pth").exists()


def test_the_library_converter_also_needs_trust_pickle(tmp_path):
    """convert_legacy_file unpickles: a library caller must ask for it too, before any read."""
    from captionlib.packed import convert_legacy_file

    with pytest.raises(ValueError, match="trust_pickle=True, only for files you made yourself"):
        convert_legacy_file(tmp_path / "nope.pkl", tmp_path / "out.npz")
    assert not (tmp_path / "out.npz").exists()
