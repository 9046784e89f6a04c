"""Loading a model never runs code (issue 25 item 1): a crafted model file, checkpoint,
``latest.pth``, packed model and document-frequency file, each carrying a pickle that would
create a marker file, is refused on every loading path with a message naming the file, and the
marker is never created."""

import json
import pickle

import numpy as np
import pytest
import torch

from captionlib.metrics.cider_d import DocumentFrequency
from captionlib.models.captioner import Captioner, load_model_file, model_file_dict
from captionlib.utils.fileio import UnsafeFileError, load_checkpoint
from bad_inputs import (
    write_code_running_npz,
    write_code_running_pickle,
    write_code_running_torch_file,
    write_raw_ark,
    write_wav,
)

TOKENS = ["<blank>", "<unk>", "a", "and", "barks", "bird", "dog", "falls", "rain", "sings", "<sos/eos>"]
CONF = {"vocab_size": len(TOKENS), "feats_dim": 16, "encoder": "linear", "encoder_conf": {"output_size": 8},
        "decoder": "gru", "decoder_conf": {"embed_size": 8, "hidden_size": 8}}
SMALL = ["--encoder", "linear", "--encoder_conf", "{output_size: 8}", "--decoder", "gru",
         "--decoder_conf", "{embed_size: 8, hidden_size: 8}", "--batch_size", "4", "--max_epoch", "1",
         "--max_len", "6"]
CONVERT = "caption_convert_model --trust_pickle true"


@pytest.fixture
def marker(tmp_path):
    path = tmp_path / "marker"
    yield path
    assert not path.exists(), "a crafted file ran code on load"


@pytest.fixture
def model_file(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "good.pth"
    torch.save(model_file_dict(Captioner(**CONF), CONF, TOKENS, epoch=1), path)
    return path


@pytest.fixture
def evil_model(tmp_path, marker, model_file):
    """A model file with every key of a real one, whose weights are a code-running pickle."""
    like = {k: v for k, v in torch.load(model_file, weights_only=True).items() if k != "model"}
    return write_code_running_torch_file(tmp_path / "evil.pth", marker, like=like)


@pytest.fixture
def data(tmp_path):
    """A 4-clip dump dir (16-d features, captions, utt2spk/spk2utt) and its token list."""
    root = tmp_path / "dump"
    root.mkdir()
    rng = np.random.default_rng(0)
    scp = write_raw_ark(root / "feats", {f"c{i}": rng.standard_normal((20, 16)) for i in range(4)})
    (root / "feats.scp").write_text(scp.read_text())
    (root / "feats_dim").write_text("16\n")
    caps = {"c0": "a dog barks", "c1": "rain falls", "c2": "a bird sings", "c3": "rain and a dog"}
    (root / "text").write_text("".join(f"{c}-1 {t}\n" for c, t in caps.items()))
    (root / "utt2spk").write_text("".join(f"{c}-1 {c}\n" for c in caps))
    (root / "spk2utt").write_text("".join(f"{c} {c}-1\n" for c in caps))
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("".join(t + "\n" for t in TOKENS))
    return root, tokens


def _refused(excinfo_or_text, name):
    text = excinfo_or_text if isinstance(excinfo_or_text, str) else str(excinfo_or_text.value)
    assert name in text and "refused to load" in text and "pathlib" in text and CONVERT in text, text


def test_the_payloads_do_run_code_when_unpickled(tmp_path, model_file):
    """The crafted files are real attacks: unsafe loading creates the marker."""
    for i, (write, load) in enumerate([
        (write_code_running_torch_file, lambda p: torch.load(p, weights_only=False)),
        (write_code_running_pickle, lambda p: pickle.loads(p.read_bytes())),
        (write_code_running_npz, lambda p: np.load(p, allow_pickle=True)["words"]),
    ]):
        marker = tmp_path / f"ran{i}"
        load(write(tmp_path / f"crafted{i}", marker))
        assert marker.exists()


def test_load_checkpoint_and_load_model_file_refuse_a_crafted_model_file(evil_model, model_file):
    for load in (load_checkpoint, load_model_file):
        with pytest.raises(UnsafeFileError) as e:
            load(str(evil_model))
        _refused(e, str(evil_model))
        assert "pathlib.Path" in e.value.refused
    # what the toolkit writes loads
    load_model_file(str(model_file))


def test_caption_decode_refuses_a_crafted_model_file(tmp_path, evil_model, model_file, capsys):
    from captionbin.caption_decode import main

    with pytest.raises(SystemExit) as e:
        main(["--model_file", str(model_file), "--model_file", str(evil_model), "--feats_scp", "-",
              "--output_dir", str(tmp_path / "out")])
    assert e.value.code == 1
    _refused(capsys.readouterr().err, str(evil_model))


def _exits_refusing(main, args, capsys, name):
    """``main(args)`` ends with exit 1 and the one-line refusal of ``name`` (no traceback)."""
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 1
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if "refused to load" in x)
    _refused(line, name)
    assert "Traceback" not in err


def test_caption_train_refuses_a_crafted_init_param_and_latest_pth(tmp_path, evil_model, data, marker, capsys):
    from captionbin.caption_train import main

    root, tokens = data
    common = ["--train_data_dir", str(root), "--valid_data_dir", str(root), "--token_list", str(tokens), *SMALL]
    _exits_refusing(main, common + ["--output_dir", str(tmp_path / "xe"), "--init_param", str(evil_model)], capsys,
                    str(evil_model))
    # resuming: a crafted latest.pth in the experiment dir
    (tmp_path / "xe2").mkdir()
    latest = write_code_running_torch_file(tmp_path / "xe2" / "latest.pth", marker, key="rng")
    _exits_refusing(main, common + ["--output_dir", str(tmp_path / "xe2")], capsys, str(latest))
    assert not (tmp_path / "xe2" / "1epoch.pth").exists()


def test_caption_rl_train_refuses_a_crafted_init_param_and_cider_df(tmp_path, evil_model, model_file, data, marker,
                                                                   capsys):
    from captionbin.caption_rl_train import main

    root, _ = data
    df = DocumentFrequency.from_references({"c0": [["a", "dog"]]})
    df.save(str(tmp_path / "cider_df.npz"))
    common = ["--train_data_dir", str(root), "--valid_data_dir", str(root), "--output_dir", str(tmp_path / "rl"),
              "--batch_size", "4", "--max_epoch", "1", "--max_len", "6"]
    _exits_refusing(main, common + ["--init_param", str(evil_model), "--cider_df", str(tmp_path / "cider_df.npz")],
                    capsys, str(evil_model))
    for crafted in (write_code_running_pickle(tmp_path / "cider_df.pkl", marker),
                    write_code_running_npz(tmp_path / "crafted.npz", marker)):
        with pytest.raises(ValueError, match=f"{crafted}: not a"):
            main(common + ["--init_param", str(model_file), "--cider_df", str(crafted)])
    assert not (tmp_path / "rl" / "1epoch.pth").exists()


def test_document_frequencies_refuse_pickles_and_object_arrays(tmp_path, marker):
    from captionlib.rl.rewards import Reward

    pkl = write_code_running_pickle(tmp_path / "cider_df.pkl", marker)
    with pytest.raises(ValueError) as e:
        DocumentFrequency.load(str(pkl))
    msg = str(e.value)
    assert str(pkl) in msg and "--trust_pickle true" in msg and f"{CONVERT} --input {pkl}" in msg, msg
    assert f"--output {tmp_path / 'cider_df.npz'}" in msg
    with pytest.raises(ValueError, match="cider_df.pkl: not an .npz"):
        Reward("cider_d:1", {"c0": [["a", "dog"]]}, str(pkl))
    npz = write_code_running_npz(tmp_path / "crafted.npz", marker)
    with pytest.raises(ValueError, match=r"crafted.npz: not a captionlib CIDEr-D .*allow_pickle"):
        DocumentFrequency.load(str(npz), trust_pickle=True)  # an npz is never unpickled


def _packed(tmp_path, model_bytes, extra=None):
    import yaml

    from captionlib.packed import PACKED_FORMAT, PACKED_VERSION, write_packed
    from packed_models import FEATS_CONFIG

    members = {"model.pth": model_bytes, "feats_config.yaml": yaml.safe_dump(FEATS_CONFIG).encode(), **(extra or {})}
    return write_packed(tmp_path / "packed.zip", {"format": PACKED_FORMAT, "version": PACKED_VERSION}, members)


def test_packed_model_with_a_crafted_model_pth_is_refused(tmp_path, evil_model, capsys):
    from captionbin.caption_infer import main
    from captionlib.packed import PretrainedCaptioner

    packed = _packed(tmp_path, evil_model.read_bytes())
    with pytest.raises(UnsafeFileError) as e:
        PretrainedCaptioner.from_pretrained(packed)
    _refused(e, f"{packed} (member model.pth)")
    assert f"--input {packed} " in str(e.value)  # the converter takes the archive
    wav = write_wav(tmp_path / "a.wav")
    with pytest.raises(SystemExit) as e:
        main(["--model", str(packed), str(wav)])
    assert e.value.code == 1
    _refused(capsys.readouterr().err, f"{packed} (member model.pth)")


def test_an_old_packed_model_loads_and_its_pickled_member_is_never_unpickled(tmp_path, model_file, marker):
    from captionlib.packed import PretrainedCaptioner

    crafted = write_code_running_pickle(tmp_path / "df.pkl", marker).read_bytes()
    packed = _packed(tmp_path, model_file.read_bytes(), {"cider_df.pkl": crafted})
    captioner = PretrainedCaptioner.from_pretrained(packed)
    assert captioner.tokenizer.token_list == TOKENS


def test_caption_pack_refuses_a_crafted_model_file_and_cider_df(tmp_path, evil_model, marker, capsys):
    from captionbin.caption_pack import main
    from packed_models import make_recipe, pack_args

    recipe = make_recipe(tmp_path / "recipe")
    with pytest.raises(SystemExit):
        main(pack_args(recipe, tmp_path / "p.zip", "--model_file", str(evil_model),
                       "--train_config", recipe["train_config"]))
    _refused(capsys.readouterr().err, str(evil_model))
    crafted = write_code_running_pickle(tmp_path / "cider_df.pkl", marker)
    with pytest.raises(SystemExit):
        main(pack_args(recipe, tmp_path / "p.zip", "--cider_df", str(crafted)))
    assert f"{crafted}: not an .npz" in capsys.readouterr().err
    assert not (tmp_path / "p.zip").exists()


def test_caption_average_checkpoints_refuses_a_crafted_epoch_file(tmp_path, evil_model, model_file, capsys):
    import shutil

    from captionbin.caption_average_checkpoints import main

    exp = tmp_path / "exp"
    exp.mkdir()
    shutil.copy(model_file, exp / "1epoch.pth")
    shutil.copy(evil_model, exp / "2epoch.pth")
    (exp / "history.json").write_text(json.dumps([{"epoch": 1, "valid_cider_d": 0.1},
                                                  {"epoch": 2, "valid_cider_d": 0.2}]))
    with pytest.raises(SystemExit) as e:
        main(["--exp_dir", str(exp), "--nbest", "2"])
    assert e.value.code == 1
    _refused(capsys.readouterr().err, str(exp / "2epoch.pth"))
