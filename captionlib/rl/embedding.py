"""Audio-caption embedding for the actor-critic's embedding reward (seed 002 sec. 3.3.1).

Shi et al., "Image Captioning based on Deep Reinforcement Learning" (seed 002) reward the
caption ``S`` of an image ``I`` by their similarity in a jointly learnt "semantic embedding
space". As far as the seed's extracted text (its equations are partly garbled) can be read:

* eq. 5, the mapping loss:
  ``L_e = sum_{I^-} sum_S gamma max[0, h_{T-1}(S) . l_e(f_{I^-}) - h_T(S) . l_e(f_I)]``,
  with ``h_T(S)`` the RNN's last hidden state over the caption ("h_T and h_{T-1} are the
  adjacent hidden states"), ``f_I`` the CNN features of the matching image, ``I^-`` the
  non-matching images, ``l_e`` a linear mapping into the embedding space and ``gamma``
  "the penalty coefficient varying from (0, 1)": a hinge ranking loss of each matching
  pair against non-matching images;
* eq. 6, the reward: ``R_T = h(S) . l_e(f_I) / (||h(S)|| ||l_e(f_I)||)``, a cosine;
* eq. 7, the joint loss: ``L_j = alpha (L_e + R_T)``, ``alpha`` in (0, 1) (how the
  actor-critic uses it: :mod:`captionlib.rl.actor_critic`).

This is the construction of Ren et al., "Deep reinforcement learning-based image
captioning with embedding reward" (CVPR 2017), which seed 002 follows without citing it.
Here:

* audio side ``f(x) = l_e(FrameEncoder(x))``: the clip's own small encoder (see
  :class:`FrameEncoder`) then a linear map ``l_e``; it never sees the captioner, so the
  reward is a function of (clip, caption) only;
* caption side ``g(S)`` = GRU state after the caption's last token (eos appended), over
  the embedding's own word vectors (:class:`CaptionEncoder`); the same state in both terms
  of eq. 5 (one code per caption, so that clips are ranked for a fixed caption);
* :func:`ranking_loss` is eq. 5 with ``gamma`` read as the margin, on cosines rather than
  raw dot products (with raw dot products any margin is met by scaling the vectors up,
  and the reward of eq. 6 is the cosine anyway), summed over both directions (non-matching
  clips for each caption, as eq. 5, and non-matching captions for each clip, as Ren et
  al.), and divided by the number of matching pairs;
* reward ``r = cos(f(x), g(S))`` in [-1, 1] (eq. 6).
"""

from typing import Optional

import torch
from torch import nn
from torch.nn import functional as F

from captionlib.models.encoders import masked_mean


class FrameEncoder(nn.Module):
    """Bag-of-frames audio encoder: per frame ``LayerNorm -> Linear -> ReLU -> Linear -> ReLU``,
    then the mean over the valid frames.

    The per-frame LayerNorm over the mel bins stands in for global feature normalisation
    (which lives in the captioner); the encoder has no time context, BatchNorm or dropout,
    so a clip's output does not depend on its batch-mates or on the mode.

    Args:
        n_mels: feature dimension.
        size: hidden and output size.
    """

    def __init__(self, n_mels: int, size: int):
        super().__init__()
        self.output_size = size
        self.net = nn.Sequential(
            nn.LayerNorm(n_mels), nn.Linear(n_mels, size), nn.ReLU(), nn.Linear(size, size), nn.ReLU()
        )

    def forward(self, feats: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        """Args: feats (batch, frames, n_mels), lens (batch,) valid frames (>= 1).
        Returns: (batch, size)."""
        return masked_mean(self.net(feats), lens)


class CaptionEncoder(nn.Module):
    """GRU over word vectors; a caption's code is the state after its last token.

    Args:
        vocab_size: number of tokens (id 0 = padding).
        size: word-vector and GRU size.
    """

    def __init__(self, vocab_size: int, size: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, size, padding_idx=0)
        self.rnn = nn.GRU(size, size, batch_first=True)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Args: tokens (batch, length) ids, 0-padded; lengths (batch,) in 1..length.
        Returns: (batch, size), the GRU output at position ``lengths - 1`` (the GRU is
        causal, so the padding after it does not matter)."""
        out, _ = self.rnn(self.embed(tokens))
        return out[torch.arange(tokens.size(0), device=tokens.device), lengths - 1]


def ranking_loss(
    audio: torch.Tensor, captions: torch.Tensor, margin: float, same: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """Bidirectional hinge ranking loss over a batch of matching pairs (seed 002 eq. 5).

    With ``s_ij = cos(audio_i, captions_j)`` (pair i matches)::

        loss = (1/B) sum_i sum_{j negative for i} [max(0, margin - s_ii + s_ji)     (clip j vs caption i)
                                                  + max(0, margin - s_ii + s_ij)]   (caption j vs clip i)

    Args:
        audio: (B, D) audio vectors; captions: (B, D) caption vectors (any norm).
        margin: the margin (seed 002's gamma).
        same: optional (B, B) bool, True where j is not a negative of i (e.g. the same
            clip); the diagonal never is.

    Returns:
        scalar; 0 when no pair has a negative.
    """
    s = F.normalize(audio, dim=-1) @ F.normalize(captions, dim=-1).T  # (B, B)
    pos = s.diagonal()
    neg = ~torch.eye(s.size(0), dtype=torch.bool, device=s.device)
    if same is not None:
        neg = neg & ~same
    hinge = (margin - pos[:, None] + s.T).clamp(min=0) + (margin - pos[:, None] + s).clamp(min=0)
    return (hinge * neg).sum() / s.size(0)


class AudioCaptionEmbedding(nn.Module):
    """Joint audio-caption embedding space (see the module docstring).

    Args:
        n_mels: feature dimension of the clips.
        vocab_size: the captioner's vocabulary size.
        size: encoder and embedding size.
    """

    def __init__(self, n_mels: int, vocab_size: int, size: int = 256):
        super().__init__()
        self.audio = FrameEncoder(n_mels, size)
        self.audio_map = nn.Linear(size, size)  # l_e
        self.caption = CaptionEncoder(vocab_size, size)

    def embed_audio(self, feats: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        """Unit vectors (batch, size) of clips (feats (batch, frames, n_mels), lens (batch,))."""
        return F.normalize(self.audio_map(self.audio(feats, lens)), dim=-1)

    def embed_captions(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Unit vectors (batch, size) of captions (tokens (batch, length) with eos, 0-padded;
        lengths (batch,) counting eos)."""
        return F.normalize(self.caption(tokens, lengths), dim=-1)
