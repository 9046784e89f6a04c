"""egs/mini_clotho with --feats_type import (issue 26 item 5): frame-level embeddings of "another
audio model", one (frames, D) .npy per audio file in a tree mirroring the Clotho audio tree,
through stages 1-10 of caption.sh: the import of stage 2 (ids from wav.scp, no clip2id),
statistics, XE training, decoding and scoring on the imported features; stage 10 skips (packed
models are for log-mel features)."""

import json
import shutil

import librosa
import numpy as np
import soundfile as sf
from test_recipes import GENERATED, ROOT, _results_rows, _run

from recipe_logs import failure_report

DIM = 24  # not a log-mel size: nothing may assume n_mels (the CRNN's 64) or a frame rate


def _embed(wav):
    """A stand-in for BEATs: a fixed random projection of 20 ms log-mel frames, (frames, DIM)."""
    y, fs = sf.read(wav, dtype="float32", always_2d=True)
    mel = librosa.feature.melspectrogram(y=y.mean(1), sr=fs, n_fft=2048, hop_length=fs // 50, n_mels=64)
    proj = np.random.default_rng(0).standard_normal((64, DIM)).astype(np.float32) / 8
    return librosa.power_to_db(mel).T @ proj


def _write_embeddings(audio_root, out):
    """<out>/<split>/<name>.npy for every <audio_root>/<split>/<name>.wav, as the README's snippet does."""
    arrays = {}
    for wav in sorted(audio_root.glob("*/*.wav")):
        npy = out / wav.relative_to(audio_root).with_suffix(".npy")
        npy.parent.mkdir(parents=True, exist_ok=True)
        arrays[str(wav)] = _embed(wav)
        np.save(npy, arrays[str(wav)])
    return arrays


XE_CONFIG = """# tiny XE config for embeddings: GRU over projected frames, GRU decoder, 1 epoch
encoder: rnn
encoder_conf: {proj_size: 16, hidden_size: 32, cell: gru, dropout: 0.0}
decoder: gru
decoder_conf: {hidden_size: 32}
batch_size: 8
max_epoch: 1
lr: 0.003
log_interval: 1
max_len: 12
"""


def test_mini_clotho_with_imported_audio_embeddings(tmp_path):
    ignore = shutil.ignore_patterns(*GENERATED, "RESULTS.md", "__pycache__")
    for sub in ["egs/TEMPLATE", "egs/clotho/local", "egs/mini_clotho", "utils"]:
        shutil.copytree(ROOT / sub, tmp_path / sub, symlinks=True, ignore=ignore)
    d = tmp_path / "egs" / "mini_clotho"
    emb = tmp_path / "beats_clotho"
    arrays = _write_embeddings(d / "clotho_fixture", emb)
    assert len(arrays) == 4 and all(a.shape[1] == DIM and a.shape[0] > 50 for a in arrays.values())
    (tmp_path / "feats_beats.yaml").write_text(
        f"layout: frames_npy\nsource: {emb}\naudio_root: clotho_fixture\nfeats_dim: {DIM}\n")  # relative: to the recipe
    (tmp_path / "train_xe_emb.yaml").write_text(XE_CONFIG)
    opts = ["--feats_type", "import", "--feats_config", str(tmp_path / "feats_beats.yaml"),
            "--xe_config", str(tmp_path / "train_xe_emb.yaml"), "--word2vec", "false", "--rl_algo", "",
            "--ensemble_models", "", "--num_diversity_samples", "0", "--metrics", "bleu,cider_d"]
    r = _run(["./run.sh", "--stage", "1", "--stop_stage", "10", *opts], cwd=d, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, failure_report(r, d)

    # stage 2: every clip's embeddings, found through wav.scp (the data dirs have no clip2id)
    from captionlib.io.feats import FeatReader

    dump = d / "dump" / "import_beats"  # feature tag: import + the config name less "feats_"
    for dset in ["train_development_validation", "validation", "evaluation"]:  # the sets with features
        assert not (d / "data" / dset / "clip2id").exists() and (d / "data" / dset / "wav.scp").exists()
        wavs = dict(line.split(" ", 1) for line in (d / "data" / dset / "wav.scp").read_text().splitlines())
        reader = FeatReader(str(dump / dset / "feats.scp"))
        assert sorted(reader.keys()) == sorted(wavs), dset
        for clip, wav in wavs.items():
            np.testing.assert_allclose(reader[clip], arrays[wav], rtol=1e-6)
        assert (dump / dset / "feats_dim").read_text() == f"{DIM}\n"
        assert (dump / dset / "feats_type").read_text() == "beats_clotho\n"

    # stage 4: statistics of the imported features; stage 5: a model of input size DIM
    stats = np.load(d / "exp" / "stats_import_beats" / "feats_stats.npz")
    train = np.concatenate([arrays[w.split(" ", 1)[1]] for w in
                            (d / "data" / "train_development_validation" / "wav.scp").read_text().splitlines()])
    np.testing.assert_allclose(stats["mean"], train.mean(0), rtol=1e-4, atol=1e-4)
    xe = d / "exp" / "xe_train_xe_emb_import_beats_word"
    assert (xe / "valid.cider_d.best.pth").is_file()
    from captionlib.utils.fileio import load_checkpoint

    ckpt = load_checkpoint(xe / "valid.cider_d.best.pth")
    assert ckpt["model_conf"]["feats_dim"] == DIM, ckpt["model_conf"]

    # stages 8-9: a caption per test clip, scored; RESULTS.md has the rows; stage 10 skips
    for dset in ["validation", "evaluation"]:
        ddir = next(xe.glob(f"decode_*/{dset}"))
        hyp = [line.split()[0] for line in (ddir / "text").read_text().splitlines()]
        assert hyp == [line.split()[0] for line in (dump / dset / "feats.scp").read_text().splitlines()]
        score = json.loads((ddir / "score.json").read_text())
        assert np.isfinite(score["CIDEr-D"]) and np.isfinite(score["BLEU-4"]), score
    rows = _results_rows((d / "RESULTS.md").read_text())
    assert {(xe.name, "validation"), (xe.name, "evaluation")} <= set(rows), rows
    assert "Stage 10: skipped: packed models are for caption_infer on audio files" in out

    # a missing embedding file stops stage 2, naming the clip and the file
    (emb / "evaluation" / "bird-twitter-car.npy").unlink()
    r = _run(["./run.sh", "--stage", "2", "--stop_stage", "2", "--dumpdir", "dump_missing", *opts], cwd=d, timeout=300)
    assert r.returncode != 0, (r.stdout + r.stderr)[-4000:]
    logs = (d / "dump_missing" / "import_beats" / "evaluation" / "log").glob("dump_feats.*.log")
    log = "".join(p.read_text() for p in logs)
    assert f"clip clotho-evaluation-00001 (id evaluation/bird-twitter-car): no feature file " \
           f"{emb / 'evaluation' / 'bird-twitter-car.npy'}" in log, log[-4000:]
