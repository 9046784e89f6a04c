"""One-line messages of issue "Hardening 3" item 3: each bad input below used to give an error
that named neither the file nor the option (numpy's, SciPy's, Python's ZeroDivisionError), a
refusal listing names that were in fact allowed, or the wrong diagnosis ("not a torch file");
each now fails with one line naming the file or option and the fix."""

import os
import pickle

import numpy as np
import pytest
import torch

from captionlib.train.fit import load_feats_stats
from captionlib.train.xe import load_embedding
from captionlib.utils.fileio import UnsafeFileError, load_checkpoint, safe_unpickle
from bad_inputs import CodeOnLoad, write_code_running_npz


class _System:
    """Pickles as a call of ``os.system``: what a crafted file would hold."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture
def marker(tmp_path):
    path = tmp_path / "marker"
    yield path
    assert not path.exists(), "a crafted file ran code on load"


def _one_line(text):
    assert "\n" not in text.strip(), text
    return text


def test_object_array_feats_stats_and_init_embedding_name_the_file_and_the_option(tmp_path, marker):
    crafted = write_code_running_npz(tmp_path / "feats_stats.npz", marker)
    with pytest.raises(ValueError) as e:
        load_feats_stats(str(crafted))
    msg = _one_line(str(e.value))
    assert msg.startswith(f"{crafted}: --feats_stats (feature statistics) must hold plain numeric arrays"), msg
    assert "object array" in msg and "would unpickle" in msg and "caption_compute_stats" in msg, msg
    strings = tmp_path / "strings.npz"
    np.savez(strings, mean=np.array(["a", "b"]), std=np.ones(2))
    with pytest.raises(ValueError, match=r"strings\.npz: --feats_stats .* array 'mean' has dtype <U1"):
        load_feats_stats(str(strings))
    vectors = np.empty(2, dtype=object)
    vectors[0] = CodeOnLoad(marker)
    emb = tmp_path / "vectors.npy"
    np.save(emb, vectors, allow_pickle=True)
    with pytest.raises(ValueError) as e:
        load_embedding(None, str(emb))  # refused before the model is touched
    msg = _one_line(str(e.value))
    assert msg.startswith(f"{emb}: --init_embedding (word vectors) must hold plain numeric arrays"), msg
    assert "would unpickle" in msg and "np.save(path, vectors.astype(np.float32))" in msg, msg
    np.savez(tmp_path / "vectors.npz", v=np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"vectors\.npz: --init_embedding must be one \.npy array"):
        load_embedding(None, str(tmp_path / "vectors.npz"))


def test_a_refusal_lists_only_the_globals_refused(tmp_path, marker):
    path = tmp_path / "sampler_and_system.pth"
    torch.save({"model": {"w": torch.zeros(2)}, "sampler": {"indexes": np.arange(4), "n": np.int64(3)},
                "x": _System(marker)}, path)
    with pytest.raises(UnsafeFileError) as e:  # numpy arrays and numbers are allowed: only os.system is refused
        load_checkpoint(path, numpy_values=True)
    assert e.value.refused == ["posix.system"] and "numpy" not in str(e.value), str(e.value)
    with pytest.raises(UnsafeFileError) as e:  # without numpy_values, numpy's names are refused too
        load_checkpoint(path)
    assert "posix.system" in e.value.refused and "numpy.ndarray" in e.value.refused
    for protocol in (2, 5):  # plain pickles (the old cider_df.pkl) read by the restricted unpickler
        data = pickle.dumps({"keys": np.arange(3), "n": np.float64(1.0), "a": _System(marker),
                             "b": _System(marker)}, protocol=protocol)
        with pytest.raises(pickle.UnpicklingError) as e:
            safe_unpickle(data)
        assert str(e.value).startswith("refused global posix.system: only numpy arrays and numbers are read"), \
            str(e.value)
        assert "numpy" not in str(e.value).split(":")[0]


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_the_converter_prints_the_refusal_of_a_torch_file_not_not_a_torch_file(tmp_path, marker, capsys):
    from captionbin.caption_convert_model import main

    for name, kwargs in (("p4.pth", {"pickle_protocol": 4}),
                         ("p4_legacy.pth", {"pickle_protocol": 4, "_use_new_zipfile_serialization": False})):
        crafted = tmp_path / name
        torch.save({"epoch": 1, "rng": _System(marker)}, crafted, **kwargs)
        with pytest.raises(UnsafeFileError) as e:
            load_checkpoint(crafted, numpy_values=True)
        assert e.value.refused == ["posix.system"]
        with pytest.raises(SystemExit) as e:
            main(["--trust_pickle", "true", "--input", str(crafted), "--output", str(tmp_path / "new.pth")])
        err = capsys.readouterr().err
        assert e.value.code == 1 and f"{crafted}: holds posix.system" in err and "not a torch file" not in err, err
        assert not (tmp_path / "new.pth").exists()
    # a harmless file of pickle protocol 4, which weights_only cannot read: says why
    torch.save({"w": torch.zeros(1)}, tmp_path / "ok4.pth", pickle_protocol=4)
    with pytest.raises(ValueError, match="save it again with torch.save's default pickle_protocol"):
        load_checkpoint(tmp_path / "ok4.pth")


@pytest.mark.parametrize("conf, message", [
    ("d_model=0", "decoder_conf.d_model must be a positive integer, got 0"),
    ("nhead=0", "decoder_conf.nhead must be a positive integer, got 0"),
    ("{d_model: 30, nhead: 4}", "decoder_conf.d_model (30) must be divisible by nhead (4)"),
    ("dropout=1.5", "decoder_conf.dropout must be a number in [0, 1], got 1.5"),
    ("max_len=0", "decoder_conf.max_len must be a positive integer, got 0"),
])
def test_transformer_decoder_sizes_are_checked_naming_the_option(tmp_path, capsys, conf, message):
    from captionbin.caption_train import main
    from captionlib.models.transformer import TransformerDecoder, TransformerEncoderStack

    with pytest.raises(SystemExit) as e:  # --check_only: before anything is read
        main(["--train_data_dir", "x", "--valid_data_dir", "x", "--token_list", "x", "--output_dir",
              str(tmp_path / "exp"), "--decoder", "transformer", "--decoder_conf", conf, "--check_only", "true"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and "Traceback" not in err, err
    with pytest.raises(ValueError, match=r"^decoder_conf\.d_model must be a positive integer, got 0$"):
        TransformerDecoder(10, d_model=0)  # was ZeroDivisionError: 0.0 cannot be raised to a negative power
    with pytest.raises(ValueError, match=r"^encoder_conf\.transformer\.d_model must be a positive integer, got 0$"):
        TransformerEncoderStack(8, d_model=0)


def test_clotho_sized_sample_rate_is_checked_before_anything_is_written(tmp_path, capsys):
    from captionbin.caption_make_clotho_sized import main
    from captionlib.soundscapes.mixer import mixer_config

    out = tmp_path / "corpus"
    with pytest.raises(SystemExit) as e:
        main(["--event_root", str(tmp_path / "events"), "--captions_dir", str(tmp_path / "captions"),
              "--output_dir", str(out), "--sample_rate", "100"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--sample_rate must be above 6000 Hz, got 100" in err, err
    assert not out.exists()
    # caption_make_soundscapes: the same filter, through --sample_rate or --mixer_conf
    with pytest.raises(ValueError, match=r"--sample_rate must be above 6000 Hz, got 100: the low-pass"):
        mixer_config({}, sample_rate=100)
    with pytest.raises(ValueError, match=r"--sample_rate must be above 20000 Hz, got 16000"):
        mixer_config({"distant_lowpass_hz": [1000, 10000]}, sample_rate=16000)
    mixer_config({}, sample_rate=8000)
