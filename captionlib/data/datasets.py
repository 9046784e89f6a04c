"""Datasets over a dump directory (``feats.scp`` + ``text`` + ``utt2spk`` + ``spk2utt``).

Two views of one directory (clip = Kaldi speaker, caption = utterance):

* :class:`CaptionDataset` iterates ``text`` (one item per caption): XE training.
* :class:`ClipCaptionsDataset` iterates ``spk2utt`` with every caption's token ids: XE
  training with one encoder pass per clip (``xe_unit: clip``).
* :class:`AudioRefsDataset` iterates ``spk2utt`` (one item per clip, all references):
  RL training, validation and scoring.
"""

import logging
from pathlib import Path
from typing import Dict, List, Sequence, Tuple, Union

import numpy as np
import torch
from torch.utils.data import Dataset

from captionlib.data import UNITS
from captionlib.io.datadir import feats_dim, read_numeric_scp, read_spk2utt, read_text
from captionlib.io.feats import FeatReader
from captionlib.text.cleaner import clean_words
from captionlib.text.tokenizer import Tokenizer


def _read_dir(data_dir: Union[str, Path]):
    data_dir = Path(data_dir)
    for name in ("feats.scp", "text", "spk2utt"):
        if not (data_dir / name).is_file():
            raise FileNotFoundError(f"{data_dir / name}: missing (run the feature dump stage first)")
    dim = feats_dim(data_dir) if (data_dir / "feats_dim").is_file() else None
    feats = FeatReader(str(data_dir / "feats.scp"), dim=dim)
    text = read_text(data_dir / "text")
    spk2utt = read_spk2utt(data_dir / "spk2utt")
    missing = [c for c in spk2utt if c not in feats]
    if missing:
        raise ValueError(f"{data_dir}/spk2utt: {len(missing)} clips have no features, e.g. {missing[0]}")
    return feats, text, spk2utt


def clip_frames(data_dir: Union[str, Path], clips: Sequence[str]) -> List[int]:
    """Frames of each clip from ``<data_dir>/utt2num_frames`` (written by the dump stage),
    e.g. for length-bucketed batches.

    Raises:
        FileNotFoundError: no ``utt2num_frames``.
        ValueError: a clip missing from it (or a malformed line, naming file and line).
    """
    path = Path(data_dir) / "utt2num_frames"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (written by the feature dump stage; needed for batch_type bucket)")
    frames = read_numeric_scp(path, int)
    missing = [c for c in clips if c not in frames]
    if missing:
        raise ValueError(f"{path}: no frame count for {len(missing)} clips, e.g. {missing[0]}")
    return [frames[c] for c in clips]


def references(data_dir: Union[str, Path]) -> Dict[str, List[List[str]]]:
    """All references of each clip, cleaned and split into words: ``{clip_id: [[w, ...], ...]}``."""
    data_dir = Path(data_dir)
    text = read_text(data_dir / "text")
    return {c: [clean_words(text[u]) for u in utts] for c, utts in read_spk2utt(data_dir / "spk2utt").items()}


class CaptionDataset(Dataset):
    """One item per caption: ``(features (frames, n_mels) float32, token ids (length,) int64)``.

    Args:
        data_dir: dump directory with feats.scp, text, spk2utt.
        tokenizer: maps raw captions to ids (cleaned inside).

    Raises:
        FileNotFoundError / ValueError: missing files or clips without features.
    """

    def __init__(self, data_dir: Union[str, Path], tokenizer: Tokenizer):
        self.data_dir = data_dir
        self.feats, text, spk2utt = _read_dir(data_dir)
        self.clips = list(spk2utt)
        self.items: List[Tuple[str, np.ndarray]] = []
        for clip, utts in spk2utt.items():
            for u in utts:
                ids = tokenizer.text2ids(text[u])
                if not ids:
                    logging.warning("%s/text: caption %s is empty after cleaning; skipped", data_dir, u)
                    continue
                self.items.append((clip, np.asarray(ids, dtype=np.int64)))
        logging.info("%s: %d captions of %d clips", data_dir, len(self.items), len(spk2utt))

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Tuple[np.ndarray, np.ndarray]:
        clip, ids = self.items[i]
        return self.feats[clip], ids

    def lengths(self) -> List[int]:
        """Frames of each item's clip (see :func:`clip_frames`)."""
        return clip_frames(self.data_dir, [clip for clip, _ in self.items])


class ClipCaptionsDataset(Dataset):
    """One item per clip: ``(features (frames, n_mels) float32, [token ids (length,) int64, ...])``
    with all its captions (those empty after cleaning are skipped with a warning).

    Raises:
        FileNotFoundError / ValueError: missing files, clips without features, or a clip
            left without any caption.
    """

    def __init__(self, data_dir: Union[str, Path], tokenizer: Tokenizer):
        captions = CaptionDataset(data_dir, tokenizer)
        self.data_dir, self.feats = data_dir, captions.feats
        by_clip: Dict[str, List[np.ndarray]] = {}
        for clip, ids in captions.items:
            by_clip.setdefault(clip, []).append(ids)
        empty = [c for c in captions.clips if c not in by_clip]
        if empty:
            raise ValueError(f"{data_dir}/text: clip {empty[0]} has no caption left after cleaning")
        self.items = list(by_clip.items())

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Tuple[np.ndarray, List[np.ndarray]]:
        clip, ids = self.items[i]
        return self.feats[clip], ids

    def lengths(self) -> List[int]:
        """Frames of each clip (see :func:`clip_frames`)."""
        return clip_frames(self.data_dir, [clip for clip, _ in self.items])


class AudioRefsDataset(Dataset):
    """One item per clip, or per (clip, caption) pair: ``(clip_id, features (frames, n_mels) float32)``.

    ``self.refs`` maps each clip to its cleaned references (lists of words), for rewards
    and validation scores; ``self.clips`` lists each clip once.

    Args:
        data_dir: dump directory (feats.scp, text, spk2utt).
        unit: ``clip`` (one item per clip) or ``caption`` (a clip is an item once per
            caption, as when RL iterates (clip, caption) pairs like the seed 000 authors'
            code: 5x the items of ``clip`` on Clotho; the reward still uses all references).

    Raises:
        ValueError: unknown ``unit``.
    """

    def __init__(self, data_dir: Union[str, Path], unit: str = "clip"):
        if unit not in UNITS:
            raise ValueError(f"unit must be clip or caption, got {unit!r}")
        self.data_dir = data_dir
        self.feats, text, spk2utt = _read_dir(data_dir)
        self.clips = list(spk2utt)
        self.refs = {c: [clean_words(text[u]) for u in utts] for c, utts in spk2utt.items()}
        self.items = self.clips if unit == "clip" else [c for c in self.clips for _ in spk2utt[c]]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Tuple[str, np.ndarray]:
        clip = self.items[i]
        return clip, self.feats[clip]

    def lengths(self) -> List[int]:
        """Frames of each item (see :func:`clip_frames`)."""
        frames = dict(zip(self.clips, clip_frames(self.data_dir, self.clips)))
        return [frames[c] for c in self.items]


def pad_feats(arrays: Sequence[np.ndarray]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Zero-pad (frames, dim) arrays to (batch, max_frames, dim); also returns lengths (batch,)."""
    lens = torch.tensor([a.shape[0] for a in arrays], dtype=torch.long)
    out = torch.zeros(len(arrays), int(lens.max()), arrays[0].shape[1])
    for i, a in enumerate(arrays):
        out[i, : a.shape[0]] = torch.tensor(np.asarray(a, dtype=np.float32))
    return out, lens


def pad_ids(arrays: Sequence[np.ndarray]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Zero-pad token id arrays to (batch, max_length) int64; also returns lengths (batch,)."""
    ys_lens = torch.tensor([len(a) for a in arrays], dtype=torch.long)
    ys = torch.zeros(len(arrays), int(ys_lens.max()), dtype=torch.long)
    for i, a in enumerate(arrays):
        ys[i, : len(a)] = torch.from_numpy(a)
    return ys, ys_lens


def collate_captions(batch):
    """Collate :class:`CaptionDataset` items to ``(feats, feat_lens, ys, ys_lens)``.

    Shapes: feats (batch, frames, n_mels), feat_lens (batch,), ys (batch, length) 0-padded,
    ys_lens (batch,).
    """
    feats, lens = pad_feats([b[0] for b in batch])
    ys, ys_lens = pad_ids([b[1] for b in batch])
    return feats, lens, ys, ys_lens


def collate_clip_captions(batch):
    """Collate :class:`ClipCaptionsDataset` items to ``(feats, feat_lens, ys, ys_lens, caption2clip)``.

    Shapes: feats (clips, frames, n_mels), feat_lens (clips,); ys (captions, length) 0-padded
    with the captions of all clips in order, ys_lens (captions,), caption2clip (captions,)
    the index of each caption's clip in the batch.
    """
    feats, lens = pad_feats([b[0] for b in batch])
    ys, ys_lens = pad_ids([c for b in batch for c in b[1]])
    caption2clip = torch.tensor([i for i, b in enumerate(batch) for _ in b[1]], dtype=torch.long)
    return feats, lens, ys, ys_lens, caption2clip


def collate_clips(batch):
    """Collate :class:`AudioRefsDataset` items to ``(clip_ids, feats, feat_lens)``."""
    feats, lens = pad_feats([b[1] for b in batch])
    return [b[0] for b in batch], feats, lens
