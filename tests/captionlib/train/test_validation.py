"""One encoder pass per clip: clip_validation against the per-caption computation, and the
eval-mode chunked encoding against one batch."""

import numpy as np
import pytest
import torch

from captionlib.data.datasets import AudioRefsDataset, CaptionDataset, ClipCaptionsDataset, collate_captions
from captionlib.decode.search import greedy_search
from captionlib.io.feats import FeatWriter
from captionlib.metrics.bleu import corpus_bleu
from captionlib.metrics.cider_d import corpus_cider_d
from captionlib.models.captioner import Captioner, xe_targets
from captionlib.text.tokenizer import Tokenizer

TOKENS = ["<blank>", "<unk>", "a", "dog", "barks", "rain", "falls", "<sos/eos>"]
WORDS = ["a dog barks", "rain falls", "a dog", "rain falls a dog barks", "dog"]


def _dump_dir(path, num_clips=11):
    rng = np.random.default_rng(0)
    path.mkdir()
    clips = [f"clip-{i:02d}" for i in range(num_clips)]
    with FeatWriter(path / "feats", "ark") as w:
        for i, c in enumerate(clips):
            w[c] = rng.standard_normal((24 + 7 * ((i * 5) % 11), 64)).astype(np.float32)
        frames = dict(w.num_frames)
    text, spk2utt = [], []
    for i, c in enumerate(clips):
        utts = [f"{c}_{k}" for k in range(1 + i % 3)]
        text += [f"{u} {WORDS[(i + k) % len(WORDS)]}" for k, u in enumerate(utts)]
        spk2utt.append(f"{c} {' '.join(utts)}")
    (path / "text").write_text("\n".join(text) + "\n")
    (path / "spk2utt").write_text("\n".join(spk2utt) + "\n")
    (path / "utt2num_frames").write_text("".join(f"{c} {frames[c]}\n" for c in clips))
    return path


def test_clip_validation_equals_per_caption_loss_and_per_batch_decoding(tmp_path):
    from captionlib.train.validation import clip_validation

    data = _dump_dir(tmp_path / "valid")
    tok = Tokenizer(TOKENS)
    torch.manual_seed(0)
    model = Captioner(len(TOKENS), encoder_conf={"rnn_units": 8}, decoder_conf={"hidden_size": 16}).eval()
    clips = AudioRefsDataset(data)
    got = clip_validation(clips, tok, torch.device("cpu"), 4, 8, dict(ClipCaptionsDataset(data, tok).items))(model)
    # reference: every caption encoded with its own clip, alone; every clip decoded alone
    caps = CaptionDataset(data, tok)
    nll, correct, ntok = 0.0, 0, 0
    with torch.no_grad():
        for item in caps:
            feats, lens, ys, ys_lens = collate_captions([item])
            logits = model(feats, lens, ys)
            targets = xe_targets(ys, ys_lens, model.eos_id)
            nll += float(torch.nn.functional.cross_entropy(logits[0], targets[0], reduction="sum"))
            correct += int((logits.argmax(-1) == targets).sum())
            ntok += targets.numel()
        hyps = {}
        for c in clips.clips:
            f = torch.tensor(np.array(clips.feats[c]))[None]
            ids = greedy_search(model, model.encode(f, torch.tensor([f.size(1)])), 8)[0].tolist()
            hyps[c] = tok.ids2text(ids).split()
    assert abs(got["loss"] - nll / ntok) < 1e-5
    assert got["acc"] == correct / ntok
    assert got["cider_d"] == corpus_cider_d(clips.refs, hyps)[0]
    assert got["bleu_4"] == corpus_bleu(clips.refs, hyps)[0][3]


def test_rl_unit_caption_repeats_each_clip_once_per_caption(tmp_path):
    data = _dump_dir(tmp_path / "train")
    clips, pairs = AudioRefsDataset(data), AudioRefsDataset(data, unit="caption")
    assert pairs.clips == clips.clips and pairs.refs == clips.refs
    assert len(pairs) == sum(len(r) for r in clips.refs.values()) > len(clips)
    assert [pairs[i][0] for i in range(len(pairs))] == [c for c in clips.clips for _ in clips.refs[c]]
    frames = dict(zip(clips.clips, clips.lengths()))
    assert pairs.lengths() == [frames[c] for c in pairs.items]
    with pytest.raises(ValueError, match="unit must be clip or caption"):
        AudioRefsDataset(data, unit="pair")


def test_best_criteria_puts_the_model_selection_metric_first():
    from captionlib.train.validation import best_criteria

    assert best_criteria("bleu_4", ("cider_d", "bleu_4", "loss")) == [
        ("bleu_4", "max"), ("cider_d", "max"), ("loss", "min")]
    assert best_criteria("cider_d", ("cider_d", "bleu_4")) == [("cider_d", "max"), ("bleu_4", "max")]
    with pytest.raises(ValueError, match="best_model_criterion must be one of cider_d, bleu_4, got 'loss'"):
        best_criteria("loss", ("cider_d", "bleu_4"))


def test_eval_encoding_in_chunks_equals_one_batch():
    from captionlib.models import captioner

    torch.manual_seed(0)
    model = Captioner(len(TOKENS)).eval()
    lens = torch.tensor([40, 97, 12, 64, 80, 33, 100, 21, 55, 90, 17])
    feats = torch.randn(len(lens), 100, 64)
    with torch.no_grad():
        chunked = model.encode(feats, lens)
        one = torch.cat([model.encode(feats[i: i + 1, : int(n)], lens[i: i + 1]) for i, n in enumerate(lens)])
        old, captioner.EVAL_CHUNK = captioner.EVAL_CHUNK, {}  # one call, as on a GPU
        try:
            whole = model.encode(feats, lens)
        finally:
            captioner.EVAL_CHUNK = old
    assert torch.allclose(chunked, one, atol=1e-6) and torch.allclose(chunked, whole, atol=1e-6)
