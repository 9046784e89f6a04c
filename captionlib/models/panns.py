"""PANNs CNN14 and CNN10 audio encoders (``encoder: cnn14`` / ``encoder: cnn10``), loadable
from the authors' published AudioSet checkpoints.

Reference: Q. Kong, Y. Cao, T. Iqbal, Y. Wang, W. Wang, M. D. Plumbley, "PANNs: Large-Scale
Pretrained Audio Neural Networks for Audio Pattern Recognition", IEEE/ACM TASLP 28, 2020;
code github.com/qiuqiangkong/audioset_tagging_cnn (``pytorch/models.py``: ``Cnn14``, ``Cnn10``,
``ConvBlock``, ``Cnn14_DecisionLevelMax``). The modules and parameter names are the authors',
so their checkpoints ``Cnn14_mAP=0.431.pth`` and ``Cnn10_mAP=0.380.pth`` (Zenodo record
3987831, https://zenodo.org/record/3987831; users download them, nothing is fetched at run
time) load with :func:`load_pretrained`, strictly:

- ``bn0``: BatchNorm over the mel bins of the input;
- ``conv_block1`` .. ``conv_block6`` (CNN14) / ``conv_block4`` (CNN10), each ``conv1`` ->
  ``bn1`` -> ReLU -> ``conv2`` -> ``bn2`` -> ReLU (3x3 convolutions, padding 1, no bias) then
  2x2 average pooling (CNN14's ``conv_block6``: 1x1, i.e. none), then dropout 0.2;
  channels 64, 128, 256, 512, 1024, 2048;
- ``fc1`` (2048 -> 2048 for CNN14, 512 -> 512 for CNN10) with ReLU;
- ``fc_audioset``, the 527-class AudioSet head: kept so that the checkpoints load with no key
  dropped, but not used by the captioner.

The authors' own front end (``spectrogram_extractor``, ``logmel_extractor``: torchlibrosa's
STFT and mel matrix) is not part of the encoder: it is the features config
``egs/clotho/conf/feats_panns.yaml`` (stage 2), and :func:`load_pretrained` checks the
checkpoint's front-end tensors against that config instead of loading them. Nor is the
authors' SpecAugment (the captioner has its own) or mixup.

XE training loads a checkpoint with ``encoder_conf: {pretrained: <path>}`` (and ``freeze_encoder``,
``lr_factor``; see :func:`captionlib.train.xe.split_encoder_conf`), checking the front end
against the ``feats_config.yaml`` that stage 2 writes into the dump dir. The encoder then
takes the raw log-mel in dB, as the authors' does (``bn0`` normalises each mel bin with the
checkpoint's statistics), so the captioner's global normalisation stays the identity.
"""

import logging
from typing import Any, Dict, Mapping, Sequence, Tuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from captionlib.models.encoders import _zero_padding, masked_mean
from captionlib.models.pretrained_load import (
    CheckpointMismatchError,
    check_keys,
    load_strict,
    read_state_dict,
    require_checkpoint,
)
from captionlib.utils.distributed import BatchNorm2d, Dropout

AUDIOSET_CLASSES = 527
STFT_KEYS = ("spectrogram_extractor.stft.conv_real.weight", "spectrogram_extractor.stft.conv_imag.weight")
MEL_KEY = "logmel_extractor.melW"
#: the weights of the AudioSet heads (PANNs' fc_audioset, the audio ConvNeXt's head_audioset): (classes, embed)
HEAD_WEIGHTS = ("fc_audioset.weight", "head_audioset.weight")
#: keys of the authors' front end in their checkpoints: checked by :func:`load_pretrained`, not loaded
FRONT_END_KEYS = STFT_KEYS + (MEL_KEY,)
# options of captionlib.audio.features.LogMel that fix the front-end tensors
_FRONT_END_OPTIONS = ("n_mels", "n_fft", "win_length_s", "hop_length_s", "fmin", "fmax")
MEL_TOLERANCE = 1e-6  # max |difference| of the mel matrices (float32 storage: ~1e-9 here)
STFT_TOLERANCE = 1e-5  # max |difference| of the STFT kernels (values <= 1, float32 storage)
#: where users get the published checkpoints (named when one is missing: nothing is downloaded)
CHECKPOINT_SOURCE = ("Cnn14_mAP=0.431.pth / Cnn10_mAP=0.380.pth of Zenodo record 3987831, "
                     "https://zenodo.org/record/3987831")
#: the front end the published checkpoints were trained with: the keys of
#: ``egs/clotho/conf/feats_panns.yaml`` that fix it (tests/captionlib/models/test_panns.py compares them)
PANNS_FRONT_END = {"fs": 32000, "n_fft": 1024, "win_length_s": 0.032, "hop_length_s": 0.01, "n_mels": 64,
                   "fmin": 50, "fmax": 14000}
PANNS_FEATS_HINT = "egs/clotho/conf/feats_panns.yaml for the published PANNs checkpoints"


class FrontEndMismatchError(ValueError):
    """The front end stored in a checkpoint (STFT kernels, mel matrix) differs from the one the
    features config computes: the encoder would see other features than it was trained on."""


class ConvBlock(nn.Module):
    """The authors' ``ConvBlock``: two 3x3 convolutions (padding 1, no bias), each followed by
    BatchNorm and ReLU, then average pooling.

    Frames beyond each clip's length are zeroed before each convolution, so a clip's valid
    outputs are those of the clip alone (whose convolutions see zeros past its end),
    whatever its batch pads it with (in eval mode; BatchNorm's training statistics include
    the padding).
    """

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=False)
        self.bn1 = BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, kernel_size=3, padding=1, bias=False)
        self.bn2 = BatchNorm2d(out_channels)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, pool: Tuple[int, int]) -> torch.Tensor:
        """Args: x (batch, in_channels, frames, freq), lengths (batch,) valid frames, pool the
        (time, freq) kernel. Returns (batch, out_channels, frames // pool[0], freq // pool[1])."""
        x = F.relu(self.bn1(self.conv1(_zero_padding(x, lengths))))
        x = F.relu(self.bn2(self.conv2(_zero_padding(x, lengths))))
        return F.avg_pool2d(x, kernel_size=pool)


class PANNsEncoder(nn.Module):
    """A PANNs CNN over log-mel frames: clip vector and frame-level outputs for the captioner.

    From the features (batch, frames, n_mels) (stage 2's log-mel in dB, see the module
    docstring): ``bn0`` over the mel bins, the conv blocks (each followed by dropout), mean
    over frequency, then

    - ``v``, the clip vector: max plus mean over each clip's valid frames, dropout, ``fc1``,
      ReLU, dropout: the authors' clip ``embedding`` (``Cnn14.forward``);
    - the frame outputs: max plus average pooling over 3 frames (stride 1, padding 1, as in
      ``Cnn14_DecisionLevelMax``), dropout, ``fc1``, ReLU, dropout: one vector per
      ``time_subsampling`` input frames, the memory of an attention decoder.

    Padding: a clip's outputs do not depend on the other clips of its batch (in eval mode):
    frames past its length are zeroed before every convolution (:class:`ConvBlock`), left out
    of the clip pooling, and the 3-frame pooling pads each clip as the authors' pooling pads
    a clip alone (-inf for the max, zeros counted in the average).

    Args:
        n_mels: mel bins of the input (64 for the published checkpoints).
        channels: output channels of the conv blocks (``output_size`` is the last).
        pools: (time, freq) average-pooling kernel after each block.
        dropout: dropout after each conv block (authors: 0.2).
        fc_dropout: dropout before and after ``fc1`` (authors: 0.5).
        classes_num: outputs of the unused ``fc_audioset`` head (527 for AudioSet; another
            number to load a tagging checkpoint with other classes).

    Raises:
        ValueError: ``n_mels`` smaller than the frequency pooling (no bin would be left).
    """

    def __init__(self, n_mels: int, channels: Sequence[int], pools: Sequence[Tuple[int, int]],
                 dropout: float = 0.2, fc_dropout: float = 0.5, classes_num: int = AUDIOSET_CLASSES):
        super().__init__()
        freq_pool = int(np.prod([p[1] for p in pools]))
        if n_mels < freq_pool:
            raise ValueError(f"{type(self).__name__} pools frequency by {freq_pool}: needs n_mels >= {freq_pool}, "
                             f"got {n_mels}")
        self.pools = [tuple(p) for p in pools]
        self.time_subsampling = int(np.prod([p[0] for p in pools]))
        self.bn0 = BatchNorm2d(n_mels)
        for i, out_ch in enumerate(channels):
            self.add_module(f"conv_block{i + 1}", ConvBlock(channels[i - 1] if i else 1, out_ch))
        self.output_size = self.cnn_output_size = channels[-1]
        self.fc1 = nn.Linear(channels[-1], channels[-1])
        self.fc_audioset = nn.Linear(channels[-1], classes_num)  # AudioSet head: loaded, not used
        self.dropout = Dropout(dropout)
        self.fc_dropout = Dropout(fc_dropout)
        for m in self.modules():  # the authors' init_layer: Xavier-uniform weights, zero biases
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def output_lengths(self, lengths: torch.Tensor, frames: int) -> torch.Tensor:
        """Valid frames (batch,) of the frame outputs for input ``lengths`` (batch,) of a batch
        padded to ``frames``: ``lengths // time_subsampling`` (each average pooling floors, so
        a clip's trailing frames that fill no pooling window are dropped, as the authors'
        ``avg_pool2d`` drops them) clamped to [1, max(frames // time_subsampling, 1)]."""
        ts = self.time_subsampling
        return (lengths // ts).clamp(min=1, max=max(frames // ts, 1))

    def conv_frames(self, feats: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """``bn0`` and the conv blocks, averaged over frequency.

        Args:
            feats: (batch, frames, n_mels); a batch of fewer than ``time_subsampling`` frames
                is zero-padded to it.
            lengths: (batch,) valid frames per clip.

        Returns:
            (batch, frames // time_subsampling, output_size) and their valid lengths (batch,)
            (:meth:`output_lengths`).
        """
        short = self.time_subsampling - feats.size(1)
        if short > 0:
            feats = F.pad(feats, (0, 0, 0, short))
        x = self.bn0(feats.transpose(1, 2).unsqueeze(-1))  # (B, n_mels, T, 1): bn0 over the mel bins
        x = x.permute(0, 3, 2, 1)  # (B, 1, T, n_mels)
        lens = lengths.clamp(min=1, max=feats.size(1))
        for i, pool in enumerate(self.pools):
            x = self.dropout(getattr(self, f"conv_block{i + 1}")(x, lens, pool))
            lens = (lens // pool[0]).clamp(min=1)
        return x.mean(dim=3).transpose(1, 2), lens

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Encode log-mel features.

        Args:
            feats: (batch, frames, n_mels); lengths: (batch,) valid frames per clip.

        Returns:
            ``v`` (batch, output_size) and the frame outputs (batch, frames //
            time_subsampling, output_size), zero beyond :meth:`output_lengths`.
        """
        return self.forward_with_cnn(feats, lengths)[:2]

    def forward_with_cnn(self, feats: torch.Tensor, lengths: torch.Tensor):
        """:meth:`forward` plus the conv output (after the frequency mean) averaged over each
        clip's valid frames, (batch, output_size): the attribute-branch input of seed 004."""
        x, lens = self.conv_frames(feats, lengths)
        valid = torch.arange(x.size(1), device=x.device)[None, :] < lens[:, None]  # (B, T')
        cnn = masked_mean(x, lens)
        clip = x.masked_fill(~valid[..., None], float("-inf")).amax(dim=1) + cnn
        v = self.fc_dropout(F.relu(self.fc1(self.fc_dropout(clip))))
        xt, vt = x.transpose(1, 2), valid[:, None, :]  # (B, C, T'), (B, 1, T')
        pooled = (F.max_pool1d(xt.masked_fill(~vt, float("-inf")), kernel_size=3, stride=1, padding=1)
                  + F.avg_pool1d(xt * vt.to(xt.dtype), kernel_size=3, stride=1, padding=1))
        pooled = torch.where(vt, pooled, torch.zeros_like(pooled)).transpose(1, 2)
        frames = self.fc_dropout(F.relu(self.fc1(self.fc_dropout(pooled))))
        return v, frames * valid[..., None].to(frames.dtype), cnn


class Cnn14Encoder(PANNsEncoder):
    """PANNs CNN14 (``encoder: cnn14``; checkpoint ``Cnn14_mAP=0.431.pth``): 6 conv blocks of
    64..2048 channels, 2x2 pooling after blocks 1-5 and none after block 6, so
    ``time_subsampling`` is 32 (one frame output per 32 input frames: 0.32 s at the 10 ms hop
    of ``feats_panns.yaml``); ``output_size`` 2048. 80,753,615 parameters (the paper's 80.8M),
    1,079,823 of them in the unused ``fc_audioset``.

    Args: as :class:`PANNsEncoder` (``n_mels`` first, then ``dropout``, ``fc_dropout``,
    ``classes_num``). Raises: ValueError: ``n_mels`` < 32.
    """

    def __init__(self, n_mels: int = 64, dropout: float = 0.2, fc_dropout: float = 0.5,
                 classes_num: int = AUDIOSET_CLASSES):
        super().__init__(n_mels, (64, 128, 256, 512, 1024, 2048), [(2, 2)] * 5 + [(1, 1)],
                         dropout, fc_dropout, classes_num)


class Cnn10Encoder(PANNsEncoder):
    """PANNs CNN10 (``encoder: cnn10``; checkpoint ``Cnn10_mAP=0.380.pth``): 4 conv blocks of
    64..512 channels, each followed by 2x2 pooling, so ``time_subsampling`` is 16 (0.16 s at a
    10 ms hop); ``output_size`` 512. 5,219,279 parameters (the paper's 5.2M), 270,351 of them in
    the unused ``fc_audioset``.

    Args: as :class:`PANNsEncoder`. Raises: ValueError: ``n_mels`` < 16.
    """

    def __init__(self, n_mels: int = 64, dropout: float = 0.2, fc_dropout: float = 0.5,
                 classes_num: int = AUDIOSET_CLASSES):
        super().__init__(n_mels, (64, 128, 256, 512), [(2, 2)] * 4, dropout, fc_dropout, classes_num)


def front_end_tensors(feats_config: Mapping[str, Any]) -> Dict[str, torch.Tensor]:
    """The authors' front-end tensors (torchlibrosa) that a features config corresponds to.

    ``spectrogram_extractor.stft.conv_real.weight`` / ``conv_imag.weight``: (n_fft // 2 + 1,
    1, n_fft), the real and imaginary DFT rows times the periodic Hann window of
    ``win_length_s * fs`` samples centred in ``n_fft``; ``logmel_extractor.melW``:
    (n_fft // 2 + 1, n_mels), ``librosa.filters.mel(sr=fs, n_fft, n_mels, fmin, fmax).T``.
    float32, as the authors store them. Absent keys take :class:`LogMel`'s defaults.

    Args:
        feats_config: the features config (keys of ``caption_dump_feats``); ``fs`` is required.

    Raises:
        FrontEndMismatchError: (a ValueError) ``frontend`` other than ``stft``.
        ValueError: ``fs`` missing or null (a checkpoint's front end is at one sample rate), or
            options :class:`~captionlib.audio.features.LogMel` refuses.
    """
    # the audio front end is imported here only: decoding and RL, which import the encoders,
    # need no audio library (tests/captionlib/test_layering.py)
    import librosa

    from captionlib.audio.features import LogMel

    fs = feats_config.get("fs")
    if fs is None:
        raise ValueError("the features config has no fs: a pretrained front end works at one sample rate")
    if feats_config.get("frontend", "stft") != "stft":
        raise FrontEndMismatchError(f"the features config has frontend {feats_config['frontend']!r}: this encoder's "
                                    "checkpoints hold torchlibrosa's STFT front end (frontend stft, the default)")
    extractor = LogMel(**{k: feats_config[k] for k in _FRONT_END_OPTIONS if k in feats_config}, dtype="float64")
    win, _ = extractor.frame_params(int(fs))
    window = librosa.util.pad_center(librosa.filters.get_window("hann", win, fftbins=True), size=extractor.n_fft)
    dft = np.fft.rfft(np.diag(window), axis=0)  # (n_fft // 2 + 1, n_fft): row k = window * exp(-2 pi i k n / n_fft)
    return {
        STFT_KEYS[0]: torch.from_numpy(dft.real[:, None, :].astype(np.float32)),
        STFT_KEYS[1]: torch.from_numpy(dft.imag[:, None, :].astype(np.float32)),
        MEL_KEY: torch.from_numpy(extractor.mel_filters(int(fs)).T.astype(np.float32)),
    }


def load_pretrained(encoder: PANNsEncoder, path: str, feats_config: Mapping[str, Any]) -> None:
    """Load a PANNs checkpoint (the authors' layout: ``{"model": state_dict, ...}``) strictly.

    Every encoder key (``fc_audioset`` included) must be in the checkpoint with the encoder's
    shape; the authors' front-end keys (:data:`FRONT_END_KEYS`) must be there too, with the
    shapes of the features config's front end, and are not loaded but compared with
    :func:`front_end_tensors` of ``feats_config`` (mel matrix to :data:`MEL_TOLERANCE`, STFT
    kernels to :data:`STFT_TOLERANCE`); one line is logged naming them. Any other key is an
    error. Nothing is loaded unless all checks pass. The checkpoint cannot tell the hop, the
    log or the padding: ``feats_panns.yaml`` sets them as the authors do.

    Args:
        encoder: a :class:`Cnn14Encoder` / :class:`Cnn10Encoder` (parameters are overwritten).
        path: the checkpoint, e.g. ``Cnn14_mAP=0.431.pth`` (https://zenodo.org/record/3987831).
        feats_config: the features config the encoder's input is dumped with (``fs`` required).

    Raises:
        FileNotFoundError: no such file (the message says where to download the published
            ones, :data:`CHECKPOINT_SOURCE`; captionlib downloads nothing).
        CheckpointMismatchError: (a ValueError) missing, unexpected or mis-shaped keys, all
            listed with the file (see :func:`~captionlib.models.pretrained_load.load_strict`).
        FrontEndMismatchError: (a ValueError) the checkpoint's mel matrix or STFT kernels
            differ from the features config's, naming the file.
        ValueError: an unreadable or unsafe file, not a state dict, or no ``fs`` in the config.
    """
    load_with_front_end(encoder, path, feats_config, CHECKPOINT_SOURCE, PANNS_FEATS_HINT, PANNS_FRONT_END)


def _front_end_values(feats_config: Mapping[str, Any]) -> Dict[str, Any]:
    """The front-end options of a features config (``fs`` and :data:`_FRONT_END_OPTIONS`),
    :class:`~captionlib.audio.features.LogMel`'s defaults for those it leaves out."""
    from captionlib.audio.features import LogMel  # as in front_end_tensors: no audio library at import

    extractor = LogMel(**{k: feats_config[k] for k in _FRONT_END_OPTIONS if k in feats_config})
    return {"fs": feats_config.get("fs"), **{k: getattr(extractor, k) for k in _FRONT_END_OPTIONS}}


def _same_front_end(state: Mapping[str, torch.Tensor], reference: Mapping[str, Any]) -> bool:
    """Whether the front-end tensors of ``state`` are those of the features config ``reference``."""
    expected = front_end_tensors(reference)
    for k in FRONT_END_KEYS:
        if tuple(state[k].shape) != tuple(expected[k].shape):
            return False
        if not float((state[k].double() - expected[k].double()).abs().max()) <= (
                MEL_TOLERANCE if k == MEL_KEY else STFT_TOLERANCE):
            return False
    return True


def config_disagreement(path: str, state: Mapping[str, torch.Tensor], feats_config: Mapping[str, Any],
                        reference: Mapping[str, Any], feats_hint: str) -> str:
    """The one-line message saying that the features config, not the checkpoint ``path``,
    is wrong: the front end stored in ``state`` differs from ``feats_config``'s. When that
    front end is the one of ``reference`` (the published checkpoints' config, ``feats_hint``),
    the options that differ from it are listed; otherwise the ``n_fft`` and ``n_mels`` that
    the stored mel matrix's shape gives."""
    ours = _front_end_values(feats_config)
    if all(k in state for k in FRONT_END_KEYS) and _same_front_end(state, reference):
        theirs = _front_end_values(reference)
        fix = f"the checkpoint's front end is the one of {feats_hint}: dump the features with that config"
    else:
        bins, mels = state[MEL_KEY].shape if MEL_KEY in state and state[MEL_KEY].dim() == 2 else (None, None)
        theirs = {**ours, "n_fft": 2 * (bins - 1) if bins else None, "n_mels": mels}
        fix = (f"the checkpoint's {MEL_KEY} is {tuple(state[MEL_KEY].shape) if MEL_KEY in state else 'absent'}: "
               f"dump the features with the front end it was trained with ({feats_hint})")
    diffs = [f"{k} {ours[k]!r} (checkpoint: {theirs[k]!r})" for k in ours if ours[k] != theirs[k]]
    return (f"{path}: the features config and the checkpoint disagree (the checkpoint itself is fine; nothing was "
            f"loaded): the features config has {', '.join(diffs) or 'another front end'}; {fix}")


def _front_end_shapes_only(e: CheckpointMismatchError) -> bool:
    """Whether the mismatch ``e`` is only of the shapes that the features config fixes: the
    front-end keys and ``bn0`` (one statistic per mel bin)."""
    return bool(not e.missing and not e.unexpected and any(k in FRONT_END_KEYS for k, _, _ in e.mis_shaped)
                and all(k in FRONT_END_KEYS or k.startswith("bn0.") for k, _, _ in e.mis_shaped))


def load_with_front_end(encoder: nn.Module, path: str, feats_config: Mapping[str, Any], source: str,
                        feats_hint: str, reference: Mapping[str, Any]) -> None:
    """Strict loading of a checkpoint that holds torchlibrosa's front end (:data:`FRONT_END_KEYS`)
    beside the encoder's keys: :func:`load_pretrained`'s checks and errors for any such
    encoder (PANNs here, the audio ConvNeXt of :mod:`captionlib.models.convnext`).

    Args:
        encoder: the module to fill (its keys and shapes are the reference).
        path: the checkpoint file (``{"model": state_dict, ...}`` or a bare state dict).
        feats_config: the features config of the encoder's input (``fs`` required).
        source: where users download the published checkpoints, named when ``path`` is missing.
        feats_hint: the features config to use instead, named when the front end differs.
        reference: that config's front-end options (e.g. :data:`PANNS_FRONT_END`), to tell
            which options of ``feats_config`` differ.

    Raises:
        FileNotFoundError, CheckpointMismatchError, FrontEndMismatchError, ValueError: as
            :func:`load_pretrained`. When only the shapes the features config fixes differ
            (the front end, ``bn0``'s mel bins), the CheckpointMismatchError says that the
            config and the checkpoint disagree (:func:`config_disagreement`).
    """
    require_checkpoint(path, source)
    state = read_state_dict(path)
    try:
        expected = front_end_tensors(feats_config)
    except FrontEndMismatchError as e:
        raise FrontEndMismatchError(f"{path}: {e}; {feats_hint}") from None
    shapes = {k: tuple(v.shape) for k, v in expected.items()}
    try:
        check_keys(encoder, state, path, shapes)
    except CheckpointMismatchError as e:
        heads = [(k, a) for k, a, _ in e.mis_shaped if k in HEAD_WEIGHTS]
        if heads:  # a tagging head of another number of classes: say which option sizes it
            n = heads[0][1][0]
            raise e.with_hint(f"the checkpoint's tagging head ({heads[0][0]}) has {n} classes: set "
                              f"encoder_conf.classes_num: {n} in an XE config, classes_num: {n} in a feats_type "
                              "pretrained features config (caption_pretrain_tagging: the lines of its classes.txt)"
                              ) from None
        if _front_end_shapes_only(e):
            raise e.reworded(config_disagreement(path, state, feats_config, reference, feats_hint)) from None
        raise
    diff = {k: float((state[k].double() - expected[k].double()).abs().max()) for k in FRONT_END_KEYS}
    bad = {k: d for k, d in diff.items() if not d <= (MEL_TOLERANCE if k == MEL_KEY else STFT_TOLERANCE)}  # NaN too
    if bad:
        if _same_front_end(state, reference):
            raise FrontEndMismatchError(config_disagreement(path, state, feats_config, reference, feats_hint))
        conf = ", ".join(f"{k}: {feats_config[k]}" for k in ("fs",) + _FRONT_END_OPTIONS if k in feats_config)
        raise FrontEndMismatchError(
            f"{path}: the checkpoint's front end differs from the features config ({conf}): max |difference| "
            f"{bad}; dump the features with the front end the checkpoint was trained with ({feats_hint})")
    logging.info("%s: front-end keys %s checked against the features config and not loaded (the front end is "
                 "stage 2's); %d encoder keys loaded", path, list(FRONT_END_KEYS), len(state) - len(FRONT_END_KEYS))
    load_strict(encoder, state, path, shapes)
