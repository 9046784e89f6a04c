"""Compatibility module: the published names of ``captionlib.pretrained`` (packed models and
captioning any file with them, e.g. ``from captionlib.pretrained import PretrainedCaptioner``).

The code lives in :mod:`captionlib.packed` (one module per part: ``archive``, ``pack``,
``frontends``, ``captioner``, ``output``, ``legacy``); this module only re-exports its public
names, so that code importing them from here keeps working. Import from
:mod:`captionlib.packed` in new code: elsewhere in captionlib "pretrained" means encoder
checkpoints (``encoder_conf.pretrained``, ``feats_type: pretrained``, the ``pretrained.pth`` of
audio-tagging pretraining, :mod:`captionlib.models.pretrained_load`), not packed models.
"""

from captionlib.packed import (
    BPE_MODEL,
    CIDER_DF,
    CNN_MEMBER,
    DECODE_CONFIG,
    DECODE_DEFAULTS,
    ENCODER_MEMBER,
    FEATS_CONFIG,
    FEATS_STATS,
    IMAGE_EXTENSIONS,
    LEGACY_CIDER_DF,
    LOGMEL_KEYS,
    MANIFEST,
    MAX_MANIFEST_BYTES,
    MODEL,
    PACKED_FORMAT,
    PACKED_VERSION,
    POOL_BATCHES,
    TOKENS,
    TRAIN_CONFIG,
    VIDEO_EXTENSIONS,
    VISUAL_DEFAULTS,
    VISUAL_KEYS,
    ZIP_MAGIC,
    AudioFrontEnd,
    CaptionResult,
    PretrainedCaptioner,
    VisualFrontEnd,
    audio_sample_rates,
    convert_legacy_file,
    find_audio_files,
    find_cnn_weights,
    format_results,
    pack_model,
    read_packed,
    write_packed,
)

__all__ = [
    "BPE_MODEL", "CIDER_DF", "CNN_MEMBER", "DECODE_CONFIG", "DECODE_DEFAULTS", "ENCODER_MEMBER", "FEATS_CONFIG",
    "FEATS_STATS", "IMAGE_EXTENSIONS", "LEGACY_CIDER_DF", "LOGMEL_KEYS", "MANIFEST", "MAX_MANIFEST_BYTES", "MODEL",
    "PACKED_FORMAT", "PACKED_VERSION", "POOL_BATCHES", "TOKENS", "TRAIN_CONFIG", "VIDEO_EXTENSIONS", "VISUAL_DEFAULTS",
    "VISUAL_KEYS", "ZIP_MAGIC", "AudioFrontEnd", "CaptionResult", "PretrainedCaptioner", "VisualFrontEnd",
    "audio_sample_rates", "convert_legacy_file", "find_audio_files", "find_cnn_weights", "format_results",
    "pack_model", "read_packed", "write_packed",
]
