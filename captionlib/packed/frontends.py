"""The front ends of a packed model: features of audio, image and video files computed with
exactly the code of the recipe's stage 2, and the files to caption.

* ``logmel``: :func:`captionlib.audio.io.load_audio` and :class:`captionlib.audio.features.LogMel`
  (``frontend: kaldi``: :class:`~captionlib.audio.features.KaldiFbank`) with the packed options
  (:class:`AudioFrontEnd`);
* ``pretrained``: the same, then the frozen encoder of ``encoder.pth``, loaded strictly
  (:mod:`captionlib.models.pretrained_feats`: nothing in the file is run);
* ``cnn``: :func:`captionlib.visual.media.load_image_tensor` (``media_type: image``) or
  :func:`captionlib.visual.media.load_video_tensor` (``video``; animated GIFs too) and
  :func:`captionlib.visual.cnn.cnn_features`, on the CPU, with the packed backbone
  (:class:`VisualFrontEnd`): ``random_convnet`` rebuilt from its seed, ``exported`` loaded from
  ``cnn.pt2`` with :func:`captionlib.visual.cnn.load_exported` (a ``torch.export`` program, loaded
  only once :mod:`captionlib.visual.exported` has refused every route by which loading it would
  unpickle unsafely or evaluate code), a torchvision name built with torchvision from a weights
  file that is NOT packed (public, large): it is looked for at the path it was packed from, then
  in torchvision's download cache ``<torch.hub.get_dir()>/checkpoints/<file name>``, or given by
  the caller, and must have the packed SHA-256 (see :func:`find_cnn_weights`).

:func:`find_audio_files` expands files and directories into the files to caption.
"""

import hashlib
import logging
import os
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np

from captionlib.audio.io import AUDIO_EXTENSIONS
from captionlib.packed.archive import CNN_MEMBER, ENCODER_MEMBER, PathLike

# Options of the audio front end in a feature config (features.make_extractor: LogMel or KaldiFbank).
LOGMEL_KEYS = ("frontend", "n_mels", "n_fft", "win_length_s", "hop_length_s", "fmin", "fmax", "dtype", "log",
               "pad_mode")
# Options of caption_extract_visual_feats in a feature config of feats_type cnn.
VISUAL_KEYS = ("media_type", "cnn", "cnn_weights", "output", "image_size", "num_frames", "batch_size", "seed")
#: keys of such a config added later, with the value that archives made before them mean
VISUAL_DEFAULTS = {"temporal_pool": "none"}
# File extensions caption_infer looks for in directories, per media type of the model (a GIF
# animation is a video to a video model, load_video_tensor decodes it; an image model reads its first frame).
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "bmp", "gif", "tif", "tiff", "webp", "ppm", "pgm")
VIDEO_EXTENSIONS = ("mp4", "avi", "mkv", "webm", "mov", "m4v", "mpg", "mpeg", "wmv", "flv", "ogv", "3gp", "gif")


def find_audio_files(inputs: Iterable[PathLike], extensions: Sequence[str] = tuple("." + e for e in AUDIO_EXTENSIONS)
                     ) -> List[str]:
    """Expand files and directories into a list of input files (audio files by default;
    :attr:`PretrainedCaptioner.extensions` gives a packed model's).

    A directory is walked recursively, into linked directories too (each real directory
    once), for files whose extension (any case) is in ``extensions``, sorted by path;
    anything else is kept as given, in order (a missing or unreadable file is reported when
    it is read).

    Returns:
        The paths, as strings.
    """
    out: List[str] = []
    exts = tuple(e.lower() for e in extensions)
    for item in inputs:
        item = os.fspath(item)
        if not os.path.isdir(item):
            out.append(item)
            continue
        found, seen = [], set()
        for root, dirs, names in os.walk(item, followlinks=True):
            dirs.sort()  # a directory reached by two paths is listed under the first in sorted order
            real = os.path.realpath(root)
            if real in seen:  # a link back up the tree, or a second link to one directory
                dirs[:] = []
                continue
            seen.add(real)
            found += [os.path.join(root, name) for name in names if name.lower().endswith(exts)]
        found.sort()
        if not found:
            logging.warning("%s: no files with the extensions %s in this directory", item, " ".join(exts))
        out += found
    return out


def find_cnn_weights(feats_config: Mapping[str, Any], manifest: Mapping[str, Any],
                     given: Optional[PathLike] = None, name: str = "packed model") -> str:
    """The weights file of a packed model whose feature config names a torchvision CNN.

    Such weights are not packed (public, large, the user's torchvision cache). Looked for, in
    order: ``given`` alone if set; else the absolute path they were packed from (manifest
    ``cnn_weights.path``), the feature config's ``cnn_weights``, and torchvision's download
    cache ``<torch.hub.get_dir()>/checkpoints/<file name>`` (``$TORCH_HOME/hub/checkpoints``).
    The file must have the packed SHA-256, so that the features are stage 2's.

    Returns:
        The path of the file.

    Raises:
        FileNotFoundError: naming ``name``, the file and every place looked at, and where to put it.
        ValueError: only files with another SHA-256 were found (named).
    """
    import torch

    record = manifest.get("cnn_weights") or {}
    file = record.get("file") or os.path.basename(feats_config.get("cnn_weights") or "")
    cache = os.path.join(torch.hub.get_dir(), "checkpoints")
    places = [os.fspath(given)] if given else [record.get("path"), feats_config.get("cnn_weights"),
                                               os.path.join(cache, file) if file else None]
    places = list(dict.fromkeys(p for p in places if p))
    wrong = []
    for path in places:
        if os.path.isfile(path):
            if not record.get("sha256") or _sha256_file(path) == record["sha256"]:
                return path
            wrong.append(path)
    if wrong:
        raise ValueError(f"{name}: {', '.join(wrong)}: not the {feats_config.get('cnn')} weights the model was "
                         f"trained with (their SHA-256 differs from the packed {record['sha256']})")
    raise FileNotFoundError(
        f"{name}: its {feats_config.get('cnn')} CNN weights {file or '(no file name packed)'} are not in the archive "
        f"(torchvision weights are the user's) and are not at {', '.join(places) or 'any known place'}: put the "
        f"file into torchvision's cache {cache} (a torchvision checkpoint downloads from "
        f"https://download.pytorch.org/models/{file}) or give its path (caption_infer --cnn_weights)")


def _sha256_file(path: PathLike) -> str:
    """The SHA-256 hex digest of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class AudioFrontEnd:
    """Log-mel features of audio files as stage 2 computes them.

    :func:`~captionlib.audio.io.load_audio` (mono mixdown, soxr resampling to the feature config's
    ``fs``) and :class:`~captionlib.audio.features.LogMel` (with ``frontend: kaldi``,
    :class:`~captionlib.audio.features.KaldiFbank`) with the packed options. When the
    feature config has ``fs: null`` and all training audio had one sample rate, audio at another
    rate is resampled to it.

    With ``transform`` (``feats_type: pretrained``: a frozen encoder's frame outputs, see
    :func:`captionlib.models.pretrained_feats.frame_outputs`) its output of the log-mel is the feature.

    Attributes:
        extractor: the LogMel or KaldiFbank; sample_rate: the rate in Hz audio is resampled to, or ``None``
            (each file's own); media: ``"audio"``; extensions: :data:`AUDIO_EXTENSIONS`.
    """

    media = "audio"
    extensions = AUDIO_EXTENSIONS

    def __init__(self, feats_config: Mapping[str, Any], train_sample_rates: Mapping[str, int],
                 name: str = "packed model", transform: Optional[Callable[[np.ndarray], np.ndarray]] = None):
        from captionlib.audio.features import make_extractor

        self.transform = transform
        self.extractor = make_extractor(**{k: feats_config[k] for k in LOGMEL_KEYS if k in feats_config})
        #: stage 2's ``strict``: a file shorter than its header says is an error, not a warning
        self.strict = bool(feats_config.get("strict", False))
        rates = sorted(int(r) for r in train_sample_rates)
        self.sample_rate: Optional[int] = feats_config.get("fs")
        if self.sample_rate is not None:
            logging.info("%s: audio is resampled to %d Hz (feature config fs)", name, self.sample_rate)
        elif len(rates) == 1:
            self.sample_rate = rates[0]
            logging.info("%s: feature config fs: null and all training audio was at %d Hz: audio at other "
                         "rates is resampled to %d Hz", name, rates[0], rates[0])
        else:
            logging.info("%s: features at each file's own sample rate (fs: null; training audio at %s Hz)",
                         name, ", ".join(map(str, rates)) or "unknown")

    def __call__(self, path: PathLike) -> np.ndarray:
        """Float32 ``(frames, n_mels)`` of one audio file.

        Raises:
            FileNotFoundError / ValueError: naming ``path``: missing, unreadable, empty (0 samples)
                or non-finite audio, or (packed ``strict: true``) shorter than its header says
                (see :func:`~captionlib.audio.io.load_audio`).
        """
        from captionlib.audio.io import load_audio

        wave, rate = load_audio(path, fs=self.sample_rate, strict=self.strict)
        try:
            feats = self.extractor(wave, rate)
            return feats if self.transform is None else self.transform(feats)
        except ValueError as e:
            raise ValueError(f"{os.fspath(path)}: {e}") from None


class VisualFrontEnd:
    """CNN features of image or video files as stage 2 (``caption_extract_visual_feats``)
    computes them, on the CPU.

    ``media_type: image``: :func:`~captionlib.visual.media.load_image_tensor` (Pillow; a GIF gives
    its first frame), then ``(1, C)`` (``pooled``) or ``(H'W', C)`` (``grid``). ``video``:
    :func:`~captionlib.visual.media.load_video_tensor` (PyAV: any container FFmpeg reads; animated
    GIFs through Pillow; ``num_frames`` frames sampled uniformly in time), ``batch_size`` frames
    per forward as stage 2, then ``(T, C)``. Each image runs through the CNN alone, so its
    features do not depend on the other files; stage 2 runs ``batch_size`` images per forward,
    which can change a CNN's float results in the last bits (e.g. 5e-7), not more.

    Args:
        feats_config: the resolved ``feats_type: cnn`` feature config (:data:`VISUAL_KEYS`).
        exported: the bytes of the ``.pt2`` backbone (``cnn: exported``).
        weights: the state-dict file of a torchvision backbone (:func:`find_cnn_weights`).
        name: the packed model, for messages.

    Attributes:
        backbone: the CNN, (B, 3, S, S) -> (B, C, H', W'); image_size: S in pixels (the
            feature config's, else the backbone's own, as stage 2); media: ``"image"`` or
            ``"video"``; extensions: :data:`IMAGE_EXTENSIONS` or :data:`VIDEO_EXTENSIONS`.

    Raises:
        ValueError: naming ``name``: a feature config lacking a key, with an unknown
            ``media_type``/``cnn``/``output`` or ``grid`` for video; no backbone file where one
            is needed; a ``.pt2`` that is no ``torch.export`` program.
        FileNotFoundError, RuntimeError: of :func:`captionlib.visual.cnn.build_backbone`
            (a missing weights file; torchvision cannot be imported).
    """

    def __init__(self, feats_config: Mapping[str, Any], exported: Optional[bytes] = None,
                 weights: Optional[PathLike] = None, name: str = "packed model"):
        from captionlib.visual import TORCHVISION_NAMES, default_image_size
        from captionlib.visual.cnn import build_backbone, load_exported_bytes

        conf = self.check_config(feats_config, name)
        self.name, self.media, self.cnn, self.output = name, conf["media_type"], conf["cnn"], conf["output"]
        self.num_frames, self.batch_size = int(conf["num_frames"]), int(conf["batch_size"])
        self.temporal_pool = conf["temporal_pool"]
        self.extensions = IMAGE_EXTENSIONS if self.media == "image" else VIDEO_EXTENSIONS
        exported_size = None
        if self.cnn == "exported":
            if exported is None:
                raise ValueError(f"{name}: cnn exported, but no {CNN_MEMBER} (the backbone) is packed")
            self.backbone, meta = load_exported_bytes(exported, f"{name} (member {CNN_MEMBER})")
            exported_size = meta.get("image_size")
        elif self.cnn in TORCHVISION_NAMES:
            if weights is None:
                raise ValueError(f"{name}: cnn {self.cnn} needs its weights file (see find_cnn_weights)")
            self.backbone = build_backbone(self.cnn, weights)
        else:
            self.backbone = build_backbone(self.cnn, seed=int(conf["seed"]))
        self.image_size = int(conf["image_size"] or default_image_size(self.cnn, exported_size))

    @staticmethod
    def check_config(feats_config: Mapping[str, Any], name: str = "packed model") -> Dict[str, Any]:
        """The :data:`VISUAL_KEYS` (and :data:`VISUAL_DEFAULTS`) of a ``feats_type: cnn`` feature
        config, checked as stage 2 checks them.

        Raises:
            ValueError: naming ``name``: a missing key, an unknown ``media_type``, ``cnn`` or
                ``output``, or ``grid`` for video.
        """
        from captionlib.visual import CNN_NAMES, MEDIA_TYPES, OUTPUTS, TEMPORAL_POOLS

        missing = [k for k in VISUAL_KEYS if k not in feats_config]
        if missing:
            raise ValueError(f"{name}: the feature config lacks {missing} (a resolved caption_extract_visual_feats "
                             "config with media_type is expected)")
        conf = {k: feats_config[k] for k in VISUAL_KEYS}
        conf.update({k: feats_config.get(k, default) for k, default in VISUAL_DEFAULTS.items()})
        for key, choices in (("media_type", MEDIA_TYPES), ("cnn", CNN_NAMES), ("output", OUTPUTS),
                             ("temporal_pool", TEMPORAL_POOLS)):
            if conf[key] not in choices:
                raise ValueError(f"{name}: feature config: {key} must be one of {choices}, got {conf[key]!r}")
        if conf["media_type"] == "video" and conf["output"] != "pooled":
            raise ValueError(f"{name}: feature config: video features are pooled per frame, got output "
                             f"{conf['output']}")
        return conf

    def __call__(self, path: PathLike) -> np.ndarray:
        """Float32 features of one file: ``(1, C)`` / ``(H'W', C)`` (image), ``(T, C)`` (video; ``(1,
        C)`` with ``temporal_pool: mean``).

        Raises:
            FileNotFoundError / ValueError: naming ``path``: missing or undecodable, or (image
                models) a video file.
        """
        from captionlib.visual.cnn import cnn_features, video_features
        from captionlib.visual.media import load_image_tensor, load_video_tensor

        path = os.fspath(path)
        if self.media == "image":
            ext = os.path.splitext(path)[1].lower().lstrip(".")
            if ext in VIDEO_EXTENSIONS and ext not in IMAGE_EXTENSIONS:
                raise ValueError(f"{path}: a video, but {self.name} was trained on images (media_type image): "
                                 "it captions image files")
            feats = cnn_features(self.backbone, load_image_tensor(path, self.image_size)[None], self.output)[0]
            return feats.reshape(-1, feats.shape[-1]).numpy()
        frames = load_video_tensor(path, self.num_frames, self.image_size)
        return video_features(self.backbone, frames, self.batch_size, self.temporal_pool).numpy()

    def feats_dim(self) -> int:
        """C, the feature dimension: the backbone's channels (one forward of a black image)."""
        import torch

        from captionlib.visual.cnn import cnn_features

        return int(cnn_features(self.backbone, torch.zeros(1, 3, self.image_size, self.image_size)).shape[-1])


def _packed_encoder(feats_config: Mapping[str, Any], data: Optional[bytes], name: str):
    """The frame-output function (:func:`captionlib.models.pretrained_feats.frame_outputs`) of the
    frozen encoder packed as ``encoder.pth`` (``data``), loaded strictly (read without running
    code from it) through a temporary file.

    Raises:
        ValueError: naming ``name``: no ``encoder.pth`` in the archive, or the loader's errors.
    """
    import tempfile

    from captionlib.models.pretrained_feats import frame_outputs

    if data is None:
        raise ValueError(f"{name}: feats_type pretrained but no {ENCODER_MEMBER} in the archive")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ENCODER_MEMBER
        path.write_bytes(data)
        try:
            return frame_outputs(_frozen_encoder(feats_config, path))
        except ValueError as e:
            raise ValueError(f"{name}: {ENCODER_MEMBER}: {e}") from None


def _frozen_encoder(feats_config: Mapping[str, Any], checkpoint: PathLike):
    """The frozen encoder of a ``feats_type: pretrained`` feature config, from ``checkpoint``
    (see :func:`captionlib.models.pretrained_feats.frozen_encoder`)."""
    from captionlib.models.panns import AUDIOSET_CLASSES
    from captionlib.models.pretrained_feats import frozen_encoder

    return frozen_encoder(feats_config["encoder"], os.fspath(checkpoint), dict(feats_config),
                          feats_config.get("classes_num", AUDIOSET_CLASSES))
