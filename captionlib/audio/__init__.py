"""Audio loading (soundfile + soxr), log-mel and Kaldi fbank features, and SpecAugment.

Public API (imported lazily, so ``captionlib.audio.io`` does not pull in torch)::

    from captionlib.audio import load_audio, audio_info, logmel, LogMel, KaldiFbank, SpecAugment
"""

import importlib

_EXPORTS = {
    "load_audio": "captionlib.audio.io",
    "audio_info": "captionlib.audio.io",
    "logmel": "captionlib.audio.features",
    "LogMel": "captionlib.audio.features",
    "KaldiFbank": "captionlib.audio.features",
    "SpecAugment": "captionlib.audio.specaug",
}

__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
