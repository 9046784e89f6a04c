"""caption_decode: 1-best text, diversity samples (text_samples) and word-level ensembles."""

import numpy as np
import pytest
import torch

from captionbin.caption_decode import main
from captionlib.io.feats import FeatWriter
from captionlib.metrics.scorer import read_samples
from captionlib.models.captioner import Captioner, model_file_dict

V = 10
TOKENS = ["<blank>", "<unk>"] + [f"w{i}" for i in range(V - 3)] + ["<sos/eos>"]
CONF = {"vocab_size": V, "encoder_conf": {"rnn_units": 8}, "decoder_conf": {"hidden_size": 16}}
CLIPS = ["clip-a", "clip-b", "clip-c"]


def _model_file(path, seed, tokens=TOKENS):
    torch.manual_seed(seed)
    model = Captioner(**CONF)
    torch.save(model_file_dict(model, CONF, tokens), path)
    return str(path)


@pytest.fixture
def setup(tmp_path):
    rng = np.random.default_rng(0)
    with FeatWriter(tmp_path / "feats", "ark") as w:
        for i, c in enumerate(CLIPS):
            w[c] = rng.standard_normal((30 + 5 * i, 64)).astype(np.float32)
    return tmp_path, str(tmp_path / "feats.scp")


def _lines(path):
    return path.read_text(encoding="utf-8").splitlines()


def test_text_samples_has_n_per_clip(setup):
    tmp, scp = setup
    a = _model_file(tmp / "a.pth", 0)
    out = tmp / "dec"
    main(["--model_file", a, "--feats_scp", scp, "--output_dir", str(out), "--max_len", "8",
          "--num_diversity_samples", "5"])
    assert [line.split()[0] for line in _lines(out / "text")] == CLIPS
    ids = [line.split(" ", 1)[0] for line in _lines(out / "text_samples")]
    assert sorted(ids) == sorted(f"{c}#{k}" for c in CLIPS for k in range(1, 6))
    samples = read_samples(out / "text_samples")
    assert set(samples) == set(CLIPS) and all(len(s) == 5 for s in samples.values())
    # random samples of an untrained model differ from each other
    assert any(len(set(s)) > 1 for s in samples.values())

    # samples of a clip do not depend on the batching (per-clip seeds)
    out2 = tmp / "dec2"
    main(["--model_file", a, "--feats_scp", scp, "--output_dir", str(out2), "--max_len", "8",
          "--num_diversity_samples", "5", "--batch_size", "1"])
    assert (out2 / "text_samples").read_text() == (out / "text_samples").read_text()
    assert (out2 / "text").read_text() == (out / "text").read_text()

    # without the option no text_samples is written
    out3 = tmp / "dec3"
    main(["--model_file", a, "--feats_scp", scp, "--output_dir", str(out3), "--max_len", "8"])
    assert not (out3 / "text_samples").exists()


def test_ensemble_decoding(setup, tmp_path):
    tmp, scp = setup
    a, b = _model_file(tmp / "a.pth", 0), _model_file(tmp / "b.pth", 1)
    for beam in ["1", "3"]:
        outs = {}
        for name, files in [("a", [a]), ("aa", [a, a]), ("ab", [a, b])]:
            out = tmp / f"dec_{name}_{beam}"
            args = [x for f in files for x in ("--model_file", f)]
            main(args + ["--feats_scp", scp, "--output_dir", str(out), "--max_len", "8", "--beam_size", beam])
            outs[name] = (out / "text").read_text()
        assert outs["aa"] == outs["a"]  # mean of identical distributions = the distribution
        assert len(outs["ab"].splitlines()) == len(CLIPS)
    # the ensemble option also works from a YAML config (configargparse list)
    cfg = tmp_path / "decode.yaml"
    cfg.write_text(f"model_file: [{a}, {b}]\nmax_len: 8\n")
    main(["--config", str(cfg), "--feats_scp", scp, "--output_dir", str(tmp / "dec_cfg")])
    assert (tmp / "dec_cfg" / "text").read_text() == (tmp / "dec_ab_1" / "text").read_text()


def test_ensemble_with_other_token_list_fails(setup):
    tmp, scp = setup
    other = list(TOKENS)
    other[4] = "other"
    a, c = _model_file(tmp / "a.pth", 0), _model_file(tmp / "c.pth", 0, other)
    with pytest.raises(SystemExit) as e:
        main(["--model_file", a, "--model_file", c, "--feats_scp", scp, "--output_dir", str(tmp / "x")])
    assert e.value.code == 1
    with pytest.raises(SystemExit) as e:
        main(["--feats_scp", scp, "--output_dir", str(tmp / "x")])
    assert e.value.code != 0


def test_text_nbest(setup):
    """--nbest N: N beam hypotheses per clip, ids <clip-id>#<rank>, #1 = text when beam_size >= N."""
    tmp, scp = setup
    a = _model_file(tmp / "a.pth", 0)
    common = ["--model_file", a, "--feats_scp", scp, "--max_len", "8"]
    main(common + ["--output_dir", str(tmp / "b3"), "--beam_size", "3", "--nbest", "3"])
    nbest = read_samples(tmp / "b3" / "text_nbest")
    assert sorted(line.split(" ", 1)[0] for line in _lines(tmp / "b3" / "text_nbest")) == sorted(
        f"{c}#{k}" for c in CLIPS for k in (1, 2, 3))
    assert all(len(set(ns)) == 3 for ns in nbest.values())  # distinct hypotheses
    text = dict(line.split(" ", 1) if " " in line else (line, "") for line in _lines(tmp / "b3" / "text"))
    assert {c: ns[0] for c, ns in nbest.items()} == text
    # greedy text: the N-best come from a beam of width N, the same as decoding with beam N
    main(common + ["--output_dir", str(tmp / "g"), "--nbest", "3"])
    assert (tmp / "g" / "text_nbest").read_text() == (tmp / "b3" / "text_nbest").read_text()
    assert not (tmp / "b3" / "text_samples").exists()
    # a wider beam than N: its N best
    main(common + ["--output_dir", str(tmp / "b5"), "--beam_size", "5", "--nbest", "2"])
    assert all(len(ns) == 2 for ns in read_samples(tmp / "b5" / "text_nbest").values())
    main(common + ["--output_dir", str(tmp / "none")])
    assert not (tmp / "none" / "text_nbest").exists()
    with pytest.raises(SystemExit) as e:
        main(common + ["--output_dir", str(tmp / "bad"), "--nbest", "-1"])
    assert e.value.code == 2


def test_outputs_that_cannot_be_written_are_refused_before_decoding(setup, capsys):
    """caption_decode used to decode every clip, then fail in a traceback writing text; a missing
    model file was a traceback too."""
    tmp, scp = setup
    a = _model_file(tmp / "a.pth", 0)
    (tmp / "a_file").write_text("x")
    (tmp / "d" / "text").mkdir(parents=True)
    for out, message in [(tmp / "a_file", "a_file is not a directory"), (tmp / "d", "text: is a directory")]:
        with pytest.raises(SystemExit) as e:
            main(["--model_file", a, "--feats_scp", scp, "--output_dir", str(out)])
        err = capsys.readouterr().err
        assert e.value.code == 1 and message in err and "decoded" not in err, err
    with pytest.raises(SystemExit) as e:
        main(["--model_file", str(tmp / "missing.pth"), "--feats_scp", scp, "--output_dir", str(tmp / "o")])
    assert e.value.code == 1 and "missing.pth" in capsys.readouterr().err


def test_top_k_samples(setup):
    """--sample_top_k 1 samples the greedy caption every time; a K of the whole vocabulary
    draws the same samples as no top-k (the same random draws over the same distribution)."""
    tmp, scp = setup
    a = _model_file(tmp / "a.pth", 0)
    common = ["--model_file", a, "--feats_scp", scp, "--max_len", "8", "--num_diversity_samples", "4"]
    main(common + ["--output_dir", str(tmp / "k1"), "--sample_top_k", "1", "--sample_temperature", "2"])
    greedy = dict(line.split(" ", 1) if " " in line else (line, "") for line in _lines(tmp / "k1" / "text"))
    assert {c: set(s) for c, s in read_samples(tmp / "k1" / "text_samples").items()} == {
        c: {cap} for c, cap in greedy.items()}
    main(common + ["--output_dir", str(tmp / "all")])
    for k in (V, 5 * V):  # a K above the vocabulary size keeps every token too
        main(common + ["--output_dir", str(tmp / f"k{k}"), "--sample_top_k", str(k)])
        assert (tmp / f"k{k}" / "text_samples").read_text() == (tmp / "all" / "text_samples").read_text()
    samples = read_samples(tmp / "all" / "text_samples")
    assert any(len(set(s)) > 1 for s in samples.values())  # untrained model: the samples differ


def test_top_p_samples(setup):
    """--sample_top_p 1 draws the samples of plain sampling; a tiny P the greedy caption."""
    tmp, scp = setup
    a = _model_file(tmp / "a.pth", 0)
    common = ["--model_file", a, "--feats_scp", scp, "--max_len", "8", "--num_diversity_samples", "4"]
    main(common + ["--output_dir", str(tmp / "all")])
    main(common + ["--output_dir", str(tmp / "p1"), "--sample_top_p", "1"])
    assert (tmp / "p1" / "text_samples").read_text() == (tmp / "all" / "text_samples").read_text()
    main(common + ["--output_dir", str(tmp / "tiny"), "--sample_top_p", "1e-6", "--sample_temperature", "2"])
    greedy = dict(line.split(" ", 1) if " " in line else (line, "") for line in _lines(tmp / "tiny" / "text"))
    assert {c: set(s) for c, s in read_samples(tmp / "tiny" / "text_samples").items()} == {
        c: {cap} for c, cap in greedy.items()}


@pytest.mark.parametrize("extra", [[], ["--rerank_lm_weight", "0.5", "--beam_size", "2"],
                                   ["--rerank_fluency_weight", "10"]])
def test_rerank_writes_one_candidate_per_clip(setup, extra):
    """--rerank 4: text holds one of each clip's candidates (its 4 samples, those of
    --num_diversity_samples 4, or the beam/greedy caption), text_unranked the text of --rerank 0."""
    tmp, scp = setup
    a = _model_file(tmp / "a.pth", 0)
    common = ["--model_file", a, "--feats_scp", scp, "--max_len", "8", "--num_diversity_samples", "4", *extra]
    main(common + ["--output_dir", str(tmp / "plain")])
    main(common + ["--output_dir", str(tmp / "rr"), "--rerank", "4"])
    assert not (tmp / "plain" / "text_unranked").exists()
    assert (tmp / "rr" / "text_unranked").read_text() == (tmp / "plain" / "text").read_text()
    assert (tmp / "rr" / "text_samples").read_text() == (tmp / "plain" / "text_samples").read_text()

    def table(path):
        return dict(line.split(" ", 1) if " " in line else (line, "") for line in _lines(path))

    text, unranked = table(tmp / "rr" / "text"), table(tmp / "rr" / "text_unranked")
    samples = read_samples(tmp / "rr" / "text_samples")
    assert list(text) == CLIPS
    assert all(text[c] in {unranked[c], *samples[c]} for c in CLIPS)
    # the candidates do not depend on the batching, nor the choice (document frequencies of every clip)
    main(common + ["--output_dir", str(tmp / "rr1"), "--rerank", "4", "--batch_size", "1"])
    assert (tmp / "rr1" / "text").read_text() == (tmp / "rr" / "text").read_text()


@pytest.mark.parametrize("opt, value, message", [
    ("--beam_size", "0", "--beam_size must be >= 1 (1: greedy search), got 0"),
    ("--beam_size", "-3", "--beam_size must be >= 1 (1: greedy search), got -3"),
    ("--max_len", "0", "--max_len must be >= 2"),
    ("--max_len", "1", "--max_len must be >= 2 (tokens, eos included: 1 leaves room for eos alone, an empty caption)"),
    ("--batch_size", "0", "--batch_size must be >= 1"),
    ("--num_diversity_samples", "-1", "--num_diversity_samples must be >= 0"),
    ("--sample_temperature", "0", "--sample_temperature must be > 0"),
    ("--sample_top_k", "-1", "--sample_top_k must be >= 0 (0: all tokens), got -1"),
    ("--sample_top_p", "0", "--sample_top_p must be in (0, 1] (1: all tokens), got 0"),
    ("--sample_top_p", "1.5", "--sample_top_p must be in (0, 1]"),
    ("--rerank", "-1", "--rerank must be >= 0 (0: no re-ranking), got -1"),
    ("--length_penalty", "nan", "argument --length_penalty: expected a finite number, got 'nan'"),
])
def test_decoding_options_out_of_range_are_refused_before_loading(tmp_path, capsys, opt, value, message):
    """Issue 25: beam 0 decoded greedily, max_len 0 wrote empty captions (rc 0) and batch_size 0
    failed with "range() arg 3 must not be zero"; now a usage error naming the option, before
    the model (here a missing file) or the features are read."""
    out = tmp_path / "dec"
    with pytest.raises(SystemExit) as e:
        main(["--model_file", str(tmp_path / "missing.pth"), "--feats_scp", str(tmp_path / "missing.scp"),
              "--output_dir", str(out), opt, value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "missing" not in err, err
    assert not out.exists()
