"""Packed models: one zip archive per trained model, and captioning of audio, image and video
files with it. One module per part:

* :mod:`captionlib.packed.archive`: the archive format (its members, ``manifest.json``, the
  format constants), :func:`write_packed`, :func:`read_packed` (bounded, checked reading);
* :mod:`captionlib.packed.pack`: :func:`pack_model` (stage 10, ``caption_pack``), which checks a
  model's inputs and packs them, and :func:`audio_sample_rates`;
* :mod:`captionlib.packed.frontends`: :class:`AudioFrontEnd` and :class:`VisualFrontEnd`, the
  features of stage 2 computed from files, :func:`find_cnn_weights`, :func:`find_audio_files`;
* :mod:`captionlib.packed.captioner`: :class:`PretrainedCaptioner`, which loads an archive and
  captions files (``from_pretrained``, ``caption``, ``caption_nbest``, ``caption_files``);
* :mod:`captionlib.packed.output`: :class:`CaptionResult` and :func:`format_results` (TSV, JSON);
* :mod:`captionlib.packed.legacy`: :func:`convert_legacy_file`, the conversion of files of older
  captionlib versions into formats that load without running code.

The public names of these modules are re-exported here (and, for the published API, from
:mod:`captionlib.pretrained`).

Example:
    >>> from captionlib.packed import PretrainedCaptioner
    >>> PretrainedCaptioner.from_pretrained("exp/xe_x/packed/valid.cider_d.best.zip").caption(["a.wav"])
    ['a dog barks while birds chirp']
"""

from captionlib.packed.archive import (
    BPE_MODEL,
    CIDER_DF,
    CNN_MEMBER,
    DECODE_CONFIG,
    DECODE_DEFAULTS,
    ENCODER_MEMBER,
    FEATS_CONFIG,
    FEATS_STATS,
    LEGACY_CIDER_DF,
    MANIFEST,
    MAX_MANIFEST_BYTES,
    MODEL,
    PACKED_FORMAT,
    PACKED_VERSION,
    TOKENS,
    TRAIN_CONFIG,
    ZIP_MAGIC,
    read_packed,
    write_packed,
)
from captionlib.packed.captioner import POOL_BATCHES, PretrainedCaptioner
from captionlib.packed.frontends import (
    IMAGE_EXTENSIONS,
    LOGMEL_KEYS,
    VIDEO_EXTENSIONS,
    VISUAL_DEFAULTS,
    VISUAL_KEYS,
    AudioFrontEnd,
    VisualFrontEnd,
    find_audio_files,
    find_cnn_weights,
)
from captionlib.packed.legacy import convert_legacy_file
from captionlib.packed.output import CaptionResult, format_results
from captionlib.packed.pack import audio_sample_rates, pack_model

__all__ = [
    "BPE_MODEL", "CIDER_DF", "CNN_MEMBER", "DECODE_CONFIG", "DECODE_DEFAULTS", "ENCODER_MEMBER", "FEATS_CONFIG",
    "FEATS_STATS", "LEGACY_CIDER_DF", "MANIFEST", "MAX_MANIFEST_BYTES", "MODEL", "PACKED_FORMAT", "PACKED_VERSION",
    "TOKENS", "TRAIN_CONFIG", "ZIP_MAGIC", "read_packed", "write_packed",
    "AudioFrontEnd", "VisualFrontEnd", "IMAGE_EXTENSIONS", "LOGMEL_KEYS", "VIDEO_EXTENSIONS", "VISUAL_DEFAULTS",
    "VISUAL_KEYS", "find_audio_files", "find_cnn_weights",
    "audio_sample_rates", "pack_model",
    "POOL_BATCHES", "PretrainedCaptioner",
    "CaptionResult", "format_results",
    "convert_legacy_file",
]
