"""Word-level ensemble of several captioners (seed 000 sec. 3.4, "CRNN-E").

Seed 000 fuses CRNN-B and CRNN-W "on word-level": the audio is fed to every model, and at
each step the next word is decoded from the *mean of the models' word probabilities*
``p(w) = 1/M sum_m p_m(w)``; the chosen word is then fed back to every model. This module
implements that fusion for any number of models behind the step-wise interface of
:mod:`captionlib.decode.search` (``first_step``, ``step``, ``reorder_state``, ``eos_id``), so
greedy search, beam search and sampling work on an ensemble unchanged.

The searches only need ``v.size(0)``, ``v.device`` and row operations on the audio embedding,
so :meth:`Ensemble.encode` returns the models' embeddings *concatenated along the feature
axis*, (batch, sum_m embed_m); :meth:`Ensemble.first_step` splits it back. When a member's
encoding is more than one tensor (an attention decoder's
:class:`~captionlib.models.batch_parts.BatchParts`), the ensemble's encoding is the BatchParts of
the members' encodings instead. The decoder state is the tuple of the models' states.
"""

from typing import Any, List, Sequence, Tuple

import torch
from torch import nn

from captionlib.models.batch_parts import BatchParts
from captionlib.models.captioner import load_model_file


class Ensemble(nn.Module):
    """Log of the mean of M models' word probabilities at every decoding step.

    Args:
        models: captioners (e.g. :class:`~captionlib.models.captioner.Captioner`), each with
            ``encode(feats, lens) -> (B, E_m)``, ``first_step``, ``step``, ``reorder_state``
            and ``eos_id``. They may differ in architecture but must share the vocabulary.
        token_lists: optional token list of each model (as stored in model files); when
            given they must all be equal.
        embed_sizes: embedding size E_m of each model; default ``model.embed_size``
            (or inferred at the first :meth:`encode`).

    Raises:
        ValueError: no model, models with different ``eos_id`` / vocabulary size, or
            different token lists.
    """

    def __init__(
        self,
        models: Sequence[Any],
        token_lists: Sequence[Sequence[str]] = None,
        embed_sizes: Sequence[int] = None,
    ):
        super().__init__()
        if len(models) == 0:
            raise ValueError("an ensemble needs at least one model")
        if token_lists is not None:
            if len(token_lists) != len(models):
                raise ValueError(f"{len(token_lists)} token lists for {len(models)} models")
            for i, tl in enumerate(token_lists[1:], 1):
                if list(tl) != list(token_lists[0]):
                    diff = _first_difference(token_lists[0], tl)
                    raise ValueError(
                        f"model {i} has a different token list from model 0 ({diff}); "
                        "an ensemble averages word probabilities, so all models must share one token list"
                    )
        eos = {int(m.eos_id) for m in models}
        if len(eos) != 1:
            raise ValueError(f"models disagree on eos_id ({sorted(eos)}): they must share the token list")
        self.eos_id = eos.pop()
        vocab = {getattr(m, "vocab_size", self.eos_id + 1) for m in models}
        if len(vocab) != 1:
            raise ValueError(f"models disagree on the vocabulary size ({sorted(vocab)})")
        self.vocab_size = vocab.pop()
        self.models = nn.ModuleList(models) if all(isinstance(m, nn.Module) for m in models) else list(models)
        if embed_sizes is None:
            sizes = [getattr(m, "embed_size", None) for m in models]
            self._embed_sizes = None if any(s is None for s in sizes) else [int(s) for s in sizes]
        else:
            if len(embed_sizes) != len(models):
                raise ValueError(f"{len(embed_sizes)} embedding sizes for {len(models)} models")
            self._embed_sizes = [int(s) for s in embed_sizes]

    @property
    def num_models(self) -> int:
        """M, the number of models."""
        return len(self.models)

    @property
    def embed_sizes(self) -> List[int]:
        """E_m of each model (the split of the concatenated embedding)."""
        if self._embed_sizes is None:
            raise RuntimeError("embedding sizes unknown: call encode() first or pass embed_sizes")
        return self._embed_sizes

    def encode(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> torch.Tensor:
        """Encode with every model.

        Args:
            feats: (batch, frames, n_mels); feat_lens: (batch,).

        Returns:
            (batch, sum_m E_m): the per-model embeddings concatenated along the last axis;
            or, when a member's encoding is a BatchParts, the BatchParts of the M encodings.
        """
        vs = [m.encode(feats, feat_lens) for m in self.models]
        if any(isinstance(v, BatchParts) for v in vs):
            return BatchParts(vs)
        self._embed_sizes = [int(v.size(-1)) for v in vs]
        return torch.cat(vs, dim=-1)

    def split(self, v) -> Tuple[Any, ...]:
        """Split a concatenated embedding (batch, sum E_m), or a BatchParts of encodings, into
        the M per-model ones."""
        if isinstance(v, BatchParts):
            if len(v) != self.num_models:
                raise ValueError(f"{len(v)} encodings for {self.num_models} models")
            return tuple(v)
        if v.size(-1) != sum(self.embed_sizes):
            raise ValueError(
                f"embedding of size {v.size(-1)}, expected {sum(self.embed_sizes)} = sum{self.embed_sizes}"
            )
        return torch.split(v, self.embed_sizes, dim=-1)

    def combine(self, logps: Sequence[torch.Tensor]) -> torch.Tensor:
        """log(1/M sum_m exp(logp_m)), each (batch, vocab), computed stably with logsumexp."""
        if len(logps) == 1:
            return logps[0]
        stacked = torch.stack(list(logps), dim=0)
        return torch.logsumexp(stacked, dim=0) - torch.log(torch.tensor(float(len(logps)), device=stacked.device))

    def first_step(self, v) -> Tuple[torch.Tensor, Tuple[Any, ...]]:
        """Feed each model its embedding; returns (log mean probs (batch, vocab), states)."""
        outs = [m.first_step(x) for m, x in zip(self.models, self.split(v))]
        return self.combine([o[0] for o in outs]), tuple(o[1] for o in outs)

    def step(self, tokens: torch.Tensor, state: Tuple[Any, ...]) -> Tuple[torch.Tensor, Tuple[Any, ...]]:
        """Feed the same tokens (batch,) to every model; returns (log mean probs, states)."""
        outs = [m.step(tokens, s) for m, s in zip(self.models, state)]
        return self.combine([o[0] for o in outs]), tuple(o[1] for o in outs)

    def reorder_state(self, state: Tuple[Any, ...], index: torch.Tensor) -> Tuple[Any, ...]:
        """Reorder every model's state along the batch by ``index`` (beam search)."""
        return tuple(m.reorder_state(s, index) for m, s in zip(self.models, state))


def _first_difference(a: Sequence[str], b: Sequence[str]) -> str:
    if len(a) != len(b):
        return f"{len(a)} vs {len(b)} tokens"
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"token {i}: {x!r} vs {y!r}"
    return "identical"


def load_ensemble(model_files: Sequence[str], map_location: str = "cpu") -> Tuple[Any, dict]:
    """Load one model file, or an :class:`Ensemble` of several.

    Args:
        model_files: self-describing model files (see
            :func:`captionlib.models.captioner.load_model_file`).

    Returns:
        (model or ensemble in eval mode, the first file's dict, whose ``token_list`` and
        ``bpe_proto`` are shared by all).

    Raises:
        ValueError: no file, or files whose token lists (or BPE models) differ, naming them.
    """
    if not model_files:
        raise ValueError("no model file given")
    loaded = [load_model_file(f, map_location=map_location) for f in model_files]
    if len(loaded) == 1:
        return loaded[0]
    first = loaded[0][1]
    for f, (_, obj) in zip(model_files[1:], loaded[1:]):
        if list(obj["token_list"]) != list(first["token_list"]):
            raise ValueError(
                f"{f} and {model_files[0]} have different token lists "
                f"({_first_difference(first['token_list'], obj['token_list'])}): cannot ensemble them"
            )
        if obj.get("bpe_proto") != first.get("bpe_proto"):
            raise ValueError(f"{f} and {model_files[0]} use different BPE models: cannot ensemble them")
    ens = Ensemble([m for m, _ in loaded], token_lists=[o["token_list"] for _, o in loaded])
    ens.eval()
    return ens, first
