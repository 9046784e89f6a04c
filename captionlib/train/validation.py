"""Validation of the XE and RL trainers: greedy captions of the validation clips scored by
CIDEr-D and BLEU-4, and the epoch-ranking criteria."""

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch

from captionlib.data.datasets import AudioRefsDataset, pad_feats, pad_ids
from captionlib.decode.search import greedy_search
from captionlib.metrics.bleu import corpus_bleu
from captionlib.metrics.cider_d import corpus_cider_d
from captionlib.models.captioner import xe_targets
from captionlib.text.tokenizer import Tokenizer
from captionlib.train import SELECTION_MODES


def best_criteria(best_model_criterion: str, metrics: Sequence[str]) -> List[Tuple[str, str]]:
    """The trainer's ``best_criteria``: ``best_model_criterion`` first, then the other ``metrics``.

    Every metric gets a ``valid.<metric>.best.pth`` file; the first one also decides which
    ``keep_nbest`` epoch files are kept (ESPnet2's ``best_model_criterion``). Seed 000
    selects its XE models by validation BLEU-4 and its SCST models by CIDEr.

    Args:
        best_model_criterion: one of ``metrics`` (keys of :data:`SELECTION_MODES`).
        metrics: the validation metrics of this training (e.g. XE: cider_d, bleu_4, loss).

    Raises:
        ValueError: ``best_model_criterion`` not among ``metrics``.
    """
    if best_model_criterion not in metrics:
        raise ValueError(f"best_model_criterion must be one of {', '.join(metrics)}, got {best_model_criterion!r}")
    order = [best_model_criterion] + [m for m in metrics if m != best_model_criterion]
    return [(m, SELECTION_MODES[m]) for m in order]


def clip_validation(
    dataset: AudioRefsDataset,
    tokenizer: Tokenizer,
    device: torch.device,
    batch_size: int,
    max_len: int,
    captions: Optional[Mapping[str, Sequence[np.ndarray]]] = None,
) -> Callable[[Any], Dict[str, float]]:
    """Validation with one encoder pass per clip: corpus CIDEr-D (document frequencies of
    the valid references) and corpus BLEU-4 of greedy captions, and with ``captions`` the
    teacher-forced cross-entropy and token accuracy of every caption, from the same encodings.

    Clips are batched in order of length (little padding); in eval mode the result does not
    depend on the batching. Uses the cleaned references, like the reward; the
    paper-comparable scores come from ``caption_score`` (PTB tokenizer) at the scoring stage.

    Args:
        dataset: the validation clips and references.
        captions: ``{clip_id: [token ids (length,), ...]}`` (e.g. ``ClipCaptionsDataset.items``)
            for ``loss`` (nats per token, eos included) and ``acc``.

    Returns:
        ``validate(model) -> {"cider_d", "bleu_4", "vocab_size"[, "loss", "acc"]}``.
    """
    try:
        frames = dataset.lengths()
    except FileNotFoundError:  # a dump dir without utt2num_frames: keep the file order
        frames = [0] * len(dataset)
    order = sorted(range(len(dataset)), key=lambda i: frames[i])

    @torch.no_grad()
    def validate(model: Any) -> Dict[str, float]:
        hyps: Dict[str, List[str]] = {}
        nll, correct, ntok = 0.0, 0, 0
        for start in range(0, len(order), batch_size):
            clips = [dataset.clips[i] for i in order[start: start + batch_size]]
            feats, lens = pad_feats([dataset.feats[c] for c in clips])
            v = model.encode(feats.to(device), lens.to(device))
            for clip, ids in zip(clips, greedy_search(model, v, max_len).tolist()):
                hyps[clip] = tokenizer.ids2text(ids).split()
            if captions is None:
                continue
            ys, ys_lens = pad_ids([c for clip in clips for c in captions[clip]])
            caption2clip = torch.tensor([i for i, clip in enumerate(clips) for _ in captions[clip]], device=device)
            ys, ys_lens = ys.to(device), ys_lens.to(device)
            logits = model.decoder.forward_teacher(v[caption2clip], ys)
            targets = xe_targets(ys, ys_lens, model.eos_id)
            nll += float(torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), targets.flatten(), ignore_index=0, reduction="sum"))
            mask = targets != 0
            correct += int(((logits.argmax(-1) == targets) & mask).sum())
            ntok += int(mask.sum())
        score, _ = corpus_cider_d(dataset.refs, hyps)
        bleu, _ = corpus_bleu(dataset.refs, hyps)
        out = {"cider_d": score, "bleu_4": bleu[3], "vocab_size": float(len({w for h in hyps.values() for w in h}))}
        if captions is not None:
            out.update(loss=nll / max(ntok, 1), acc=correct / max(ntok, 1))
        return out

    return validate
