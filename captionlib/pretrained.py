"""Packed models: one zip archive per trained model, and captioning of audio, image and video
files with it.

:func:`pack_model` (stage 10, ``captionbin.caption_pack``) writes everything a model needs
outside the recipe into one zip archive:

========================  ================================================================
member                    content
========================  ================================================================
``manifest.json``         format/version, recipe, git revision, UTC date, the source model
                          file, the environments that trained it (its dir's ``env.yaml``
                          files, :mod:`captionlib.utils.provenance`), the metrics of the
                          decode it was packed from (score.json),
                          the sample rates of the training audio, the torchvision CNN
                          weights file the features need (name, size, SHA-256), and every
                          member's size and SHA-256
``model.pth``             the self-describing model file written by the trainers (state
                          dict, ``model_conf``, ``token_list`` [, ``bpe_proto``]), unchanged
``config.yaml``           the resolved training config of the model dir
``tokens.txt``            the token list (``bpe.model`` too for BPE tokens)
``feats_config.yaml``     the resolved feature config: ``caption_dump_feats --print_config``
                          (``feats_type: logmel`` or ``pretrained``) or ``caption_extract_visual_feats
                          --print_config`` with ``feats_type: cnn`` and the ``media_type``
                          (``image`` or ``video``) of the training data
``cnn.pt2``               ``cnn: exported`` only: the ``torch.export`` backbone file, copied
``encoder.pth``           ``feats_type: pretrained`` only: the frozen audio encoder's checkpoint
                          (the features config's ``pretrained``), copied
``feats_stats.npz``       the global mean/std of the train features (also in the model's buffers)
``cider_df.npz``          the CIDEr-D document frequencies of the train references
                          (``cider_df.pkl``, a pickle, in archives of older versions)
``decode_config.yaml``    the resolved decoding options (beam_size, batch_size, max_len,
                          length_penalty) used at packing time, if given
========================  ================================================================

:class:`PretrainedCaptioner` loads such an archive and captions files with exactly the code of
the recipe's stage 2, then :func:`captionlib.decode.inference.caption_batch` (stage 8), so a clip
of the recipe gets the caption of stage 8:

* ``logmel``: :func:`captionlib.audio.io.load_audio` and :class:`captionlib.audio.features.LogMel`
  (``frontend: kaldi``: :class:`~captionlib.audio.features.KaldiFbank`) with the packed options;
* ``pretrained``: the same, then the frozen encoder of ``encoder.pth``, loaded strictly
  (:mod:`captionlib.models.encoder_feats`: nothing in the file is run);
* ``cnn``: :func:`captionlib.visual.media.load_image_tensor` (``media_type: image``) or
  :func:`captionlib.visual.media.load_video_tensor` (``video``; animated GIFs too) and
  :func:`captionlib.visual.cnn.cnn_features`, on the CPU, with the packed backbone:
  ``random_convnet`` rebuilt from its seed, ``exported`` loaded from ``cnn.pt2`` with
  :func:`captionlib.visual.cnn.load_exported` (a ``torch.export`` program, loaded only once
  :mod:`captionlib.visual.exported` has refused every route by which loading it would unpickle
  unsafely or evaluate code), a torchvision name built with torchvision from a weights file that is NOT packed
  (public, large): it is looked for at the path it was packed from, then in torchvision's
  download cache ``<torch.hub.get_dir()>/checkpoints/<file name>``, or given by the caller,
  and must have the packed SHA-256 (see :func:`find_cnn_weights`).

Example:
    >>> from captionlib.pretrained import PretrainedCaptioner
    >>> PretrainedCaptioner.from_pretrained("exp/xe_x/packed/valid.cider_d.best.zip").caption(["a.wav"])
    ['a dog barks while birds chirp']
"""

import datetime
import hashlib
import io
import json
import logging
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import yaml

from captionlib.audio.io import AUDIO_EXTENSIONS
from captionlib.decode.options import check_decode_options
from captionlib.utils.archive import DEFAULT_MAX_MODEL_BYTES, member_sizes, read_member
from captionlib.utils.fileio import UnsafeFileError, atomic_open, load_checkpoint, safe_unpickle
from captionlib.utils.provenance import code_revision, run_environments

PathLike = Union[str, Path]

PACKED_FORMAT = "captionlib-packed-model"
PACKED_VERSION = 1
MANIFEST = "manifest.json"
MODEL = "model.pth"
TRAIN_CONFIG = "config.yaml"
TOKENS = "tokens.txt"
BPE_MODEL = "bpe.model"
FEATS_CONFIG = "feats_config.yaml"
FEATS_STATS = "feats_stats.npz"
CIDER_DF = "cider_df.npz"
LEGACY_CIDER_DF = "cider_df.pkl"  # the pickle of older versions
DECODE_CONFIG = "decode_config.yaml"
# Decoding options of a packed model, with caption_decode's defaults.
DECODE_DEFAULTS: Dict[str, Any] = {"beam_size": 1, "batch_size": 32, "max_len": 30, "length_penalty": 0.0}
# Options of the audio front end in a feature config (features.make_extractor: LogMel or KaldiFbank).
LOGMEL_KEYS = ("frontend", "n_mels", "n_fft", "win_length_s", "hop_length_s", "fmin", "fmax", "dtype", "log",
               "pad_mode")
# Options of caption_extract_visual_feats in a feature config of feats_type cnn.
VISUAL_KEYS = ("media_type", "cnn", "cnn_weights", "output", "image_size", "num_frames", "batch_size", "seed")
#: keys of such a config added later, with the value that archives made before them mean
VISUAL_DEFAULTS = {"temporal_pool": "none"}
CNN_MEMBER = "cnn.pt2"  # the torch.export backbone of a feature config with cnn: exported
ENCODER_MEMBER = "encoder.pth"  # the frozen audio encoder of a feature config with feats_type: pretrained
# File extensions caption_infer looks for in directories, per media type of the model (a GIF
# animation is a video to a video model, load_video_tensor decodes it; an image model reads its first frame).
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "bmp", "gif", "tif", "tiff", "webp", "ppm", "pgm")
VIDEO_EXTENSIONS = ("mp4", "avi", "mkv", "webm", "mov", "m4v", "mpg", "mpeg", "wmv", "flv", "ogv", "3gp", "gif")
POOL_BATCHES = 8  # batches of features computed (and sorted by length) at a time
ZIP_MAGIC = b"PK\x03\x04"  # the first bytes of a zip archive (npz, torch files, packed models)


def audio_sample_rates(wav_scp: PathLike) -> Dict[int, int]:
    """Count the sample rates of the audio files of a ``wav.scp`` (from their headers).

    Returns:
        ``{sample rate in Hz: number of files}``, sorted by rate.

    Raises:
        ValueError / FileNotFoundError: a malformed ``wav_scp`` or an unreadable file (named).
    """
    from captionlib.audio.io import audio_info
    from captionlib.io.datadir import read_scp

    counts: Dict[int, int] = {}
    for key, path in read_scp(wav_scp).items():
        try:
            rate = audio_info(path).sample_rate
        except (ValueError, FileNotFoundError) as e:
            raise type(e)(f"{wav_scp}: clip {key}: {e}") from None
        counts[rate] = counts.get(rate, 0) + 1
    return dict(sorted(counts.items()))


def pack_model(
    output: PathLike,
    model_file: PathLike,
    train_config: PathLike,
    feats_config: Mapping[str, Any],
    feats_stats: PathLike,
    cider_df: PathLike,
    train_sample_rates: Optional[Mapping[int, int]] = None,
    decode_config: Optional[Mapping[str, Any]] = None,
    metrics: Optional[Mapping[str, Any]] = None,
    recipe: str = "unknown",
    revision: Optional[str] = None,
    trust_pickle: bool = False,
    encoder_sha256: Optional[str] = None,
) -> Path:
    """Write a packed model (see the module docstring), atomically (temporary file + rename).

    Args:
        output: the zip archive to write (e.g. ``<model_dir>/packed/valid.cider_d.best.zip``).
        model_file: a model file written by the trainers.
        train_config: the model dir's resolved ``config.yaml``.
        feats_config: the resolved feature config: ``caption_dump_feats --print_config``
            (``feats_type`` ``logmel``, the default, or ``pretrained``: its ``pretrained``
            checkpoint is packed as ``encoder.pth`` once it loads into its ``encoder`` with
            outputs of the model's input dimension), or ``caption_extract_visual_feats
            --print_config`` with ``feats_type: cnn`` and ``media_type`` (``image``/``video``)
            set; its ``cnn_weights`` (a relative path is taken from the current directory) is
            packed for ``cnn: exported`` and recorded (name, size, SHA-256) for torchvision names.
        feats_stats: ``feats_stats.npz`` (mean/std); cider_df: ``cider_df.npz``.
        train_sample_rates: ``{Hz: files}`` of the training audio (:func:`audio_sample_rates`);
            lets inference resample when the feature config has ``fs: null``.
        decode_config: decoding options (keys of :data:`DECODE_DEFAULTS`; others are dropped),
            checked as caption_infer checks them (``check_decode_options``).
        metrics: the ``score.json`` of the decode the model is packed from.
        recipe: the recipe's name; revision: git revision (default: the running code's,
            :func:`captionlib.utils.provenance.code_revision`).
        trust_pickle: accept an old pickled ``cider_df`` (packed converted to ``.npz``);
            read allowing only numpy arrays and numbers: for files you made yourself.
        encoder_sha256: ``feats_type: pretrained``: the SHA-256 of the checkpoint the training
            features were dumped with (stage 2 writes it); the packed one must have it.

    Returns:
        The path of the archive.

    Raises:
        FileNotFoundError: a missing input file (named), the CNN weights file included.
        ValueError: a model file or document-frequency file that is not one, or needs unsafe
            loading (named); a training config that is not one or is another model's (its
            ``encoder``/``decoder``); a decoding option out of its range; a feature config whose
            dimension differs from the model's input dimension (log-mel ``n_mels``; the CNN's
            channels, except for torchvision names, which are not built at packing time); an
            unknown ``feats_type`` or ``media_type``; an ``env.yaml`` (or ``env.yaml.N``) of the
            model file's dir that is not a YAML mapping.
    """
    for f in (model_file, train_config, feats_stats, cider_df):
        if not Path(f).is_file():
            raise FileNotFoundError(f"{f}: no such file (needed to pack {model_file})")
    members, extra = _pack_members(model_file, train_config, feats_config, feats_stats, cider_df, decode_config,
                                   trust_pickle, encoder_sha256)
    manifest = {
        "format": PACKED_FORMAT,
        "version": PACKED_VERSION,
        "recipe": recipe,
        "git_revision": revision if revision is not None else code_revision()[0],
        "train_environment": run_environments(Path(model_file).parent),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "model_file": str(model_file),
        "metrics": dict(metrics) if metrics is not None else None,
        "train_sample_rates": {str(k): int(v) for k, v in (train_sample_rates or {}).items()},
        **extra,
    }
    output = write_packed(output, manifest, members)
    logging.info("packed %s (%d files, %.1f MB) into %s", model_file, len(members), output.stat().st_size / 1e6, output)
    return output


def _pack_members(model_file: PathLike, train_config: PathLike, feats_config: Mapping[str, Any],
                  feats_stats: PathLike, cider_df: PathLike, decode_config: Optional[Mapping[str, Any]],
                  trust_pickle: bool, encoder_sha256: Optional[str] = None) -> Tuple[Dict[str, bytes], Dict[str, Any]]:
    """All members of a packed model but the manifest, and the manifest entries of the front
    end (arguments as :func:`pack_model`), each input checked: the model file loads, its input
    dimension fits the feature config, the document frequencies load.

    Raises:
        ValueError, FileNotFoundError: as :func:`pack_model`.
    """
    from captionlib.models.captioner import load_model_file, model_feats_dim
    from captionlib.text.tokenizer import Tokenizer

    _, obj = load_model_file(str(model_file))
    dim = model_feats_dim(obj["model_conf"])
    feats_type = feats_config.get("feats_type", "logmel")
    members: Dict[str, bytes] = {}
    extra: Dict[str, Any] = {}
    if feats_type == "cnn":
        members, extra = _visual_members(feats_config, dim, str(model_file))
    elif feats_type == "pretrained":
        members = _encoder_members(feats_config, dim, str(model_file), encoder_sha256)
    elif feats_type != "logmel":
        raise ValueError(f"{model_file}: feats_type {feats_type!r} cannot be packed: caption_infer computes "
                         "logmel or pretrained (audio) or cnn (image/video) features, not features made elsewhere "
                         "(import)")
    elif int(feats_config.get("n_mels", dim)) != dim:
        raise ValueError(f"{model_file}: the model takes {dim}-d features, the feature config has "
                         f"n_mels {feats_config.get('n_mels')}")
    members = {
        MODEL: Path(model_file).read_bytes(),
        TRAIN_CONFIG: _train_config_bytes(train_config, obj["model_conf"], str(model_file)),
        TOKENS: "".join(t + "\n" for t in obj["token_list"]).encode("utf-8"),
        FEATS_CONFIG: yaml.safe_dump(dict(feats_config), sort_keys=False).encode("utf-8"),
        **members,
        FEATS_STATS: _feats_stats_npz(feats_stats, dim),
        CIDER_DF: _cider_df_npz(cider_df, trust_pickle),
    }
    if obj.get("bpe_proto") is not None:
        members[BPE_MODEL] = Tokenizer(obj["token_list"], bpe_proto=obj["bpe_proto"]).bpe_proto
    if decode_config is not None:
        dec = {k: decode_config[k] for k in DECODE_DEFAULTS if k in decode_config}
        check_decode_options(**dec)  # caption_infer refuses an archive with options it would refuse
        members[DECODE_CONFIG] = yaml.safe_dump(dec, sort_keys=False).encode("utf-8")
    return members, extra


def _train_config_bytes(train_config: PathLike, model_conf: Mapping[str, Any], model_file: str) -> bytes:
    """The bytes of a training ``config.yaml``, checked to be a YAML mapping whose ``encoder``
    and ``decoder`` (an XE config's; an RL config has neither) are the model file's.

    Raises:
        ValueError: naming the file: not YAML, not a mapping, or another model's config.
    """
    import inspect

    from captionlib.models.captioner import Captioner

    data = Path(train_config).read_bytes()
    try:
        config = yaml.safe_load(data)
    except yaml.YAMLError as e:
        raise ValueError(f"{train_config}: not a training config.yaml (YAML): {e}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{train_config}: not a training config.yaml (a YAML mapping of options)")
    defaults = inspect.signature(Captioner).parameters
    for key in ("encoder", "decoder"):
        held = model_conf.get(key, defaults[key].default)
        if key in config and config[key] != held:
            raise ValueError(f"{train_config} trains {key} {config[key]!r}, {model_file} holds {key} {held!r}: "
                             "not the config of this model (--train_config)")
    return data


def _encoder_members(feats_config: Mapping[str, Any], dim: int, model_file: str,
                     sha256: Optional[str] = None) -> Dict[str, bytes]:
    """``{encoder.pth: bytes}`` of a ``feats_type: pretrained`` feature config: its
    ``pretrained`` checkpoint, once it has loaded strictly into its ``encoder`` with the
    config's front end and the encoder's outputs have the model's input dimension ``dim``
    (and, given ``sha256``, it is the file the training features were dumped with).

    Raises:
        FileNotFoundError: no checkpoint file; ValueError: naming ``model_file`` or the
            checkpoint: no encoder/checkpoint in the config, another file than the dump's,
            or the loader's errors.
    """
    encoder, checkpoint = feats_config.get("encoder"), feats_config.get("pretrained")
    if not encoder or not checkpoint:
        raise ValueError(f"{model_file}: the feature config has feats_type pretrained but no encoder and pretrained")
    module = _frozen_encoder(feats_config, checkpoint)  # FileNotFoundError (naming where to get it) first
    data = Path(checkpoint).read_bytes()
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256.strip():
        raise ValueError(f"{checkpoint}: not the encoder checkpoint the training features were dumped with (its "
                         f"SHA-256 differs from stage 2's {sha256.strip()}): restore that file, or redo stage 2 and "
                         "training")
    if module.output_size != dim:
        raise ValueError(f"{model_file}: the model takes {dim}-d features, the feature config's encoder ({encoder}) "
                         f"gives {module.output_size}")
    return {ENCODER_MEMBER: data}


def _frozen_encoder(feats_config: Mapping[str, Any], checkpoint: PathLike):
    """The frozen encoder of a ``feats_type: pretrained`` feature config, from ``checkpoint``
    (see :func:`captionlib.models.encoder_feats.frozen_encoder`)."""
    from captionlib.models.encoder_feats import frozen_encoder
    from captionlib.models.panns import AUDIOSET_CLASSES

    return frozen_encoder(feats_config["encoder"], os.fspath(checkpoint), dict(feats_config),
                          feats_config.get("classes_num", AUDIOSET_CLASSES))


def _visual_members(feats_config: Mapping[str, Any], dim: int, model_file: str
                    ) -> Tuple[Dict[str, bytes], Dict[str, Any]]:
    """The CNN of a ``feats_type: cnn`` feature config: ``{cnn.pt2: bytes}`` for ``exported``,
    the manifest entry ``cnn_weights`` (``file``, ``path`` made absolute, ``bytes``,
    ``sha256``) for torchvision names, nothing for ``random_convnet`` (its seed is in the
    config). The backbone is built (but for torchvision names) and its channels checked
    against the model's input dimension ``dim``.

    Raises:
        FileNotFoundError: the ``cnn_weights`` file is missing (named).
        ValueError: naming ``model_file``: a bad ``media_type``/``cnn``, no ``cnn_weights``
            where one is needed, a ``.pt2`` that is no ``torch.export`` program, or a CNN
            whose channels differ from ``dim``.
    """
    from captionlib.visual import TORCHVISION_NAMES

    VisualFrontEnd.check_config(feats_config, model_file)
    cnn, weights = feats_config["cnn"], feats_config["cnn_weights"]
    members: Dict[str, bytes] = {}
    extra: Dict[str, Any] = {}
    if cnn == "exported" or cnn in TORCHVISION_NAMES:
        if not weights:
            raise ValueError(f"{model_file}: the feature config has cnn {cnn} but no cnn_weights")
        if not os.path.isfile(weights):
            raise FileNotFoundError(f"{weights}: no such CNN weights file (cnn_weights of the feature config)")
        if cnn == "exported":
            members[CNN_MEMBER] = Path(weights).read_bytes()
        else:
            extra["cnn_weights"] = {"file": os.path.basename(weights), "path": os.path.abspath(weights),
                                    "bytes": os.path.getsize(weights), "sha256": _sha256_file(weights)}
            return members, extra
    got = VisualFrontEnd(feats_config, exported=members.get(CNN_MEMBER), name=weights or model_file).feats_dim()
    if got != dim:
        raise ValueError(f"{model_file}: the model takes {dim}-d features, the feature config's CNN ({cnn}, "
                         f"output {feats_config.get('output')}) gives {got}")
    return members, extra


def _feats_stats_npz(path: PathLike, dim: int) -> bytes:
    """The bytes of ``feats_stats.npz`` once it has loaded (no pickles) with ``mean`` and
    ``std`` of the model's input dimension ``dim``.

    Raises:
        ValueError: naming ``path``: not such an ``.npz`` (any file was packed before).
    """
    from captionlib.train.common import load_feats_stats

    try:
        stats = load_feats_stats(os.fspath(path))
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise ValueError(f"{path}: not a feats_stats.npz of caption_compute_stats ({e})") from None
    if stats["mean"].shape != (dim,) or stats["std"].shape != (dim,):
        raise ValueError(f"{path}: mean/std of shape {stats['mean'].shape}/{stats['std'].shape}, the model takes "
                         f"{dim}-d features")
    return Path(path).read_bytes()


def _cider_df_npz(path: PathLike, trust_pickle: bool = False) -> bytes:
    """The bytes of a CIDEr-D document-frequency ``.npz`` file, checked by loading it; an old
    pickle (only with ``trust_pickle``) is converted.

    Raises:
        ValueError: naming ``path``: see :meth:`captionlib.metrics.cider_d.DocumentFrequency.load`.
    """
    from captionlib.metrics.cider_d import DocumentFrequency

    df = DocumentFrequency.load(os.fspath(path), trust_pickle=trust_pickle)
    data = Path(path).read_bytes()
    if data[:4] == ZIP_MAGIC:
        return data
    buf = io.BytesIO()
    df.save(buf)
    return buf.getvalue()


def write_packed(output: PathLike, manifest: Mapping[str, Any], members: Mapping[str, bytes]) -> Path:
    """Write a packed model atomically: ``manifest`` with a ``files`` entry (each member's
    name, size and SHA-256) added, then the members.

    Returns:
        The path of the archive.
    """
    manifest = dict(manifest, files=[
        {"name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for name, data in members.items()
    ])
    output = Path(output)
    with atomic_open(output) as f, zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr(MANIFEST, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
        for name, data in members.items():
            z.writestr(name, data)
    return output


def _packed_mapping(path: PathLike, members: Mapping[str, bytes], name: str) -> Dict[str, Any]:
    """The YAML mapping of the packed member ``name`` (a config).

    Raises:
        ValueError: naming the archive and member: not YAML (tags such as
            ``!!python/object`` included: safe loading refuses them), or not a mapping.
    """
    try:
        out = yaml.safe_load(members[name])
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: member {name} is not YAML ({e})") from None
    if not isinstance(out, dict):
        raise ValueError(f"{path}: member {name} must be a mapping of options, got {type(out).__name__}")
    return out


#: the largest ``manifest.json`` read (ours are a few kB)
MAX_MANIFEST_BYTES = 1 << 20


def _manifest_files(manifest: Any) -> Dict[str, int]:
    """``{member name: size in bytes}`` of a manifest's ``files`` entries.

    Raises:
        ValueError: a manifest, or an entry, of the wrong shape.
    """
    entries = manifest.get("files", []) if isinstance(manifest, dict) else []
    if not isinstance(entries, list) or not all(
            isinstance(e, dict) and isinstance(e.get("name"), str) and isinstance(e.get("sha256"), str)
            and isinstance(e.get("bytes"), int) for e in entries):
        raise ValueError(f"its {MANIFEST} 'files' is not a list of {{name, bytes, sha256}} entries")
    return {e["name"]: e["bytes"] for e in entries}


def _check_format(path: Path, manifest: Any) -> None:
    """Raise ValueError, naming ``path``, unless ``manifest`` is a captionlib packed model's of a
    format version this captionlib reads."""
    if not isinstance(manifest, dict) or manifest.get("format") != PACKED_FORMAT:
        raise ValueError(f"{path}: not a packed captionlib model (its {MANIFEST} has no format {PACKED_FORMAT!r})")
    try:
        version = int(manifest.get("version", 0))
    except (TypeError, ValueError):
        raise ValueError(f"{path}: its {MANIFEST} has version {manifest.get('version')!r}, not a number") from None
    if version > PACKED_VERSION:
        raise ValueError(f"{path}: packed model format version {manifest['version']} is newer than this "
                         f"captionlib's ({PACKED_VERSION}); update captionlib")


def read_packed(path: PathLike, max_bytes: int = DEFAULT_MAX_MODEL_BYTES) -> Tuple[dict, Dict[str, bytes]]:
    """Read a packed model's manifest and members (checked against the manifest), with
    bounded memory (:mod:`captionlib.utils.archive`).

    Every member's size in the central directory must equal its manifest entry, and their sum
    must be at most ``max_bytes``, before any member is read; each member is then read in
    chunks, refused as soon as its stream passes its stated size, and checked against its
    SHA-256.

    Args:
        path: the archive.
        max_bytes: cap on the summed size of its members, in bytes
            (:data:`~captionlib.utils.archive.DEFAULT_MAX_MODEL_BYTES`, 4 GiB, by default).

    Returns:
        ``(manifest dict, {member name: bytes})``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: naming ``path``: not a zip archive, not a captionlib packed model, a newer
            format version, members over the cap, a member missing or corrupt (size/SHA-256
            differ, a stream longer than stated), or a member the manifest does not list
            (checked before any member is read).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such packed model")

    def wrapped(e: Exception) -> ValueError:
        return ValueError(f"{path}: not a packed captionlib model ({type(e).__name__}: {e})")

    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise wrapped(e) from None
    with z:
        sizes = member_sizes(z, str(path), max_bytes)
        if MANIFEST not in sizes or sizes[MANIFEST] > MAX_MANIFEST_BYTES:
            raise wrapped(ValueError(f"no {MANIFEST} of at most {MAX_MANIFEST_BYTES} bytes"))
        try:
            manifest = json.loads(read_member(z, MANIFEST, sizes[MANIFEST], str(path)))
        except ValueError as e:
            raise wrapped(e) from None
        _check_format(path, manifest)
        try:
            files = _manifest_files(manifest)
            unlisted = sorted(set(sizes) - set(files) - {MANIFEST})
            if unlisted:
                raise ValueError(f"members not in its {MANIFEST}: {', '.join(unlisted)}")
            # sizes before reading: no member makes us read more than its manifest entry says
            wrong = [n for n, size in files.items() if n in sizes and sizes[n] != size]
            if wrong:
                raise ValueError(f"members whose size is not the one in its {MANIFEST}: {', '.join(wrong)}")
        except ValueError as e:
            raise wrapped(e) from None
        missing = [e["name"] for e in manifest["files"] if e["name"] not in sizes]
        if missing:
            raise ValueError(f"{path}: member {missing[0]} is missing or corrupt")
        members = {e["name"]: read_member(z, e["name"], e["bytes"], str(path), e["sha256"])
                   for e in manifest["files"]}
    for name in (MODEL, FEATS_CONFIG):
        if name not in members:
            raise ValueError(f"{path}: packed model lacks {name}")
    return manifest, members


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


@dataclass
class CaptionResult:
    """The caption(s) of one file.

    Attributes:
        file: the path as given.
        caption: the caption (``None`` if the file could not be read).
        nbest: the n best beam hypotheses as ``(caption, score)``, best first (see
            :meth:`PretrainedCaptioner.caption_files`); empty unless asked for.
        error: why the file was skipped (naming it), else ``None``.
    """

    file: str
    caption: Optional[str] = None
    nbest: List[Tuple[str, float]] = field(default_factory=list)
    error: Optional[str] = None


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
    :func:`captionlib.models.encoder_feats.frame_outputs`) its output of the log-mel is the feature.

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
    """The frame-output function (:func:`captionlib.models.encoder_feats.frame_outputs`) of the
    frozen encoder packed as ``encoder.pth`` (``data``), loaded strictly (read without running
    code from it) through a temporary file.

    Raises:
        ValueError: naming ``name``: no ``encoder.pth`` in the archive, or the loader's errors.
    """
    import tempfile

    from captionlib.models.encoder_feats import frame_outputs

    if data is None:
        raise ValueError(f"{name}: feats_type pretrained but no {ENCODER_MEMBER} in the archive")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ENCODER_MEMBER
        path.write_bytes(data)
        try:
            return frame_outputs(_frozen_encoder(feats_config, path))
        except ValueError as e:
            raise ValueError(f"{name}: {ENCODER_MEMBER}: {e}") from None


class PretrainedCaptioner:
    """A packed model ready to caption audio files (``feats_type: logmel`` or ``pretrained``) or image and video
    files (``feats_type: cnn``).

    Build it with :meth:`from_pretrained`. Features are computed as stage 2 computes them, by
    :class:`AudioFrontEnd` or :class:`VisualFrontEnd`.

    Attributes:
        model: the Captioner (eval mode, on ``device``); tokenizer: its token list.
        manifest: the archive's manifest; feats_config: the resolved feature config.
        decode_config: decoding options (:data:`DECODE_DEFAULTS` keys), packed or overridden.
        front_end: the :class:`AudioFrontEnd` or :class:`VisualFrontEnd`.
        media: ``"audio"``, ``"image"`` or ``"video"``: what the model captions.
        extensions: the file extensions looked for in directories (:func:`find_audio_files`).
        sample_rate: the rate in Hz audio is resampled to, or ``None`` (each file's own; and
            for image/video models).
    """

    def __init__(self, model, tokenizer, feats_config: Mapping[str, Any], manifest: Mapping[str, Any],
                 decode_config: Mapping[str, Any], device, name: str = "packed model",
                 members: Optional[Mapping[str, bytes]] = None, cnn_weights: Optional[PathLike] = None):
        """See :meth:`from_pretrained`; ``members``: the archive's (for ``cnn.pt2``),
        ``cnn_weights``: see :func:`find_cnn_weights`."""
        from captionlib.visual import TORCHVISION_NAMES

        self.model, self.tokenizer, self.device, self.name = model, tokenizer, device, name
        self.feats_config, self.manifest = dict(feats_config), dict(manifest)
        self.decode_config = {**DECODE_DEFAULTS, **decode_config}
        try:
            check_decode_options(**{k: self.decode_config[k] for k in DECODE_DEFAULTS})
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
        feats_type = feats_config.get("feats_type", "logmel")
        if feats_type in ("logmel", "pretrained"):
            transform = None
            if feats_type == "pretrained":
                transform = _packed_encoder(feats_config, (members or {}).get(ENCODER_MEMBER), name)
            self.front_end: Any = AudioFrontEnd(feats_config, manifest.get("train_sample_rates") or {}, name,
                                                transform)
        elif feats_type == "cnn":
            weights = None
            if feats_config.get("cnn") in TORCHVISION_NAMES:
                weights = find_cnn_weights(feats_config, manifest, cnn_weights, name)
            self.front_end = VisualFrontEnd(feats_config, (members or {}).get(CNN_MEMBER), weights, name)
        else:
            raise ValueError(f"{name}: feats_type {feats_type!r}: packed models caption audio (logmel, pretrained) "
                             "or image and video files (cnn)")
        self.media, self.extensions = self.front_end.media, self.front_end.extensions
        self.sample_rate: Optional[int] = getattr(self.front_end, "sample_rate", None)

    @classmethod
    def from_pretrained(cls, path: PathLike, ngpu: int = 0, cnn_weights: Optional[PathLike] = None,
                        max_bytes: int = DEFAULT_MAX_MODEL_BYTES, **decode_options) -> "PretrainedCaptioner":
        """Load a packed model (written by :func:`pack_model`); nothing else is read (but the
        weights of a torchvision CNN, see :func:`find_cnn_weights`), and nothing in it is run:
        ``model.pth`` is read with ``torch.load(weights_only=True)``, ``cnn.pt2`` with
        ``torch.export.load`` once :func:`captionlib.visual.exported.check_exported_program`
        has found no route by which that would run code.

        Args:
            path: the zip archive.
            max_bytes: cap on the summed size of its members, in bytes (see :func:`read_packed`).
            ngpu: 0 = CPU, 1 = the first CUDA device (for the captioner; a CNN runs on the CPU).
            cnn_weights: the weights file of a torchvision CNN (default: looked for).
            decode_options: overrides of the packed decoding options (``beam_size``,
                ``batch_size``, ``max_len``, ``length_penalty``); ``None`` values are ignored.

        Raises:
            FileNotFoundError: no such file; the weights of a torchvision CNN not found.
            ValueError: naming ``path``: see :func:`read_packed`; an unknown decoding option,
                or a beam size, batch size or maximum length below 1; an unknown feature type
                or a bad visual feature config (:class:`VisualFrontEnd`); torchvision weights
                with another SHA-256; a ``model.pth`` that needs unsafe (code-running) unpickling
                (:class:`~captionlib.utils.fileio.UnsafeFileError`: the archive was made by an older
                captionlib and must be converted, or was crafted).
            RuntimeError: ``ngpu`` > 0 without a CUDA device; a torchvision CNN without an
                importable torchvision.
        """
        from captionlib.models.captioner import load_model_file
        from captionlib.text.tokenizer import Tokenizer
        from captionlib.utils.distributed import get_device

        unknown = sorted(set(decode_options) - set(DECODE_DEFAULTS))
        if unknown:
            raise ValueError(f"unknown decoding options {unknown}; expected some of {sorted(DECODE_DEFAULTS)}")
        check_decode_options(**decode_options)  # before anything is read
        manifest, members = read_packed(path, max_bytes)
        device = get_device(ngpu)
        model, obj = load_model_file(os.fspath(path), map_location=str(device), data=members[MODEL], member=MODEL)
        model.to(device)
        decode_config = _packed_mapping(path, members, DECODE_CONFIG) if DECODE_CONFIG in members else {}
        decode_config.update({k: v for k, v in decode_options.items() if v is not None})
        tokenizer = Tokenizer(obj["token_list"], bpe_proto=obj.get("bpe_proto"))
        return cls(model, tokenizer, _packed_mapping(path, members, FEATS_CONFIG), manifest, decode_config, device,
                   name=str(path), members=members, cnn_weights=cnn_weights)

    def features(self, path: PathLike) -> np.ndarray:
        """Features of one file, as stage 2 dumps them: float32 ``(frames, dim)`` (see
        :class:`AudioFrontEnd`, :class:`VisualFrontEnd`).

        Raises:
            FileNotFoundError / ValueError: naming ``path``: missing, unreadable, empty or
                non-finite audio, an undecodable image or video.
        """
        return self.front_end(path)

    def caption_files(self, files: Sequence[PathLike], nbest: int = 0, skip_bad: bool = False,
                      progress: bool = False) -> List[CaptionResult]:
        """Caption files, batched by length (``decode_config['batch_size']`` files).

        Args:
            files: audio files (any format :func:`~captionlib.audio.io.load_audio` reads), or
                image or video files for an image or video model (see :class:`VisualFrontEnd`).
            nbest: N > 0 also gives the N best hypotheses of a beam of width
                ``max(beam_size, N)`` with their scores: the sum of the tokens' log-probs (eos
                included), divided by ``length ** length_penalty`` when that is non-zero,
                i.e. what the beam ranks by.
            skip_bad: a file that cannot be read gets a result with ``error`` set (and is
                logged) instead of raising.
            progress: show a tqdm progress bar (files).

        Returns:
            One :class:`CaptionResult` per file, in the order of ``files``.

        Raises:
            FileNotFoundError / ValueError: without ``skip_bad``, the first unreadable file
                (named); ``nbest`` < 0.
        """
        import torch
        from tqdm import tqdm

        from captionlib.data.datasets import pad_feats
        from captionlib.decode.inference import caption_batch

        check_decode_options(nbest=nbest)
        conf = self.decode_config
        results = [CaptionResult(file=os.fspath(f)) for f in files]
        pool = max(1, int(conf["batch_size"])) * POOL_BATCHES
        with tqdm(total=len(results), unit="file", disable=not progress) as bar:
            for start in range(0, len(results), pool):
                feats = {}
                for i in range(start, min(start + pool, len(results))):
                    try:
                        feats[i] = self.features(results[i].file)
                    except (ValueError, FileNotFoundError, OSError) as e:
                        if not skip_bad:
                            raise
                        results[i].error = str(e)
                        logging.error("skipped %s", e)
                        bar.update(1)
                order = sorted(feats, key=lambda i: feats[i].shape[0])
                for b in range(0, len(order), int(conf["batch_size"])):
                    idx = order[b: b + int(conf["batch_size"])]
                    x, lens = pad_feats([feats[i] for i in idx])
                    with torch.no_grad():
                        _, caps, nb = caption_batch(
                            self.model, self.tokenizer, x.to(self.device), lens.to(self.device),
                            int(conf["beam_size"]), int(conf["max_len"]), float(conf["length_penalty"]),
                            nbest, nbest_scores=True,
                        )
                    for k, i in enumerate(idx):
                        results[i].caption = caps[k]
                        results[i].nbest = nb[k] if nbest else []
                    bar.update(len(idx))
        return results

    def caption(self, files: Sequence[PathLike]) -> List[str]:
        """Caption files (audio, images or videos, as the model): one caption per file, in order.

        Raises:
            FileNotFoundError / ValueError: the first file that cannot be read (named).
        """
        return [r.caption for r in self.caption_files(files)]

    def caption_nbest(self, files: Sequence[PathLike], nbest: int) -> List[List[Tuple[str, float]]]:
        """The ``nbest`` best hypotheses per file as ``(caption, score)``, best first (see
        :meth:`caption_files`).

        Raises:
            FileNotFoundError / ValueError: the first file that cannot be read (named);
                ``nbest`` < 1.
        """
        if nbest < 1:
            raise ValueError(f"nbest must be >= 1, got {nbest}")
        return [r.nbest for r in self.caption_files(files, nbest=nbest)]


def format_results(results: Sequence[CaptionResult], fmt: str, nbest: int = 0) -> str:
    """Render captions as TSV or JSON (skipped files are left out).

    TSV: a header line, then ``file<TAB>caption`` per file, plus ``caption_k<TAB>score_k``
    columns for k = 1..``nbest``; fields holding a tab or line break are quoted (csv module).
    JSON: a list of ``{"file", "caption"[, "nbest": [{"caption", "score"}, ...]]}``.

    Raises:
        ValueError: an unknown ``fmt`` (``tsv`` or ``json``).
    """
    ok = [r for r in results if r.error is None]
    if fmt == "json":
        rows = []
        for r in ok:
            row: Dict[str, Any] = {"file": r.file, "caption": r.caption}
            if nbest:
                row["nbest"] = [{"caption": c, "score": s} for c, s in r.nbest]
            rows.append(row)
        return json.dumps(rows, indent=2, ensure_ascii=False) + "\n"
    if fmt != "tsv":
        raise ValueError(f"unknown output format {fmt!r}; expected tsv or json")
    import csv

    buf = io.StringIO()
    w = csv.writer(buf, delimiter="\t", lineterminator="\n")
    # csv quotes a field holding "\n" (the line terminator) but not one holding a lone "\r",
    # which csv.reader then splits the row at: such rows are written with every field quoted
    quoted = csv.writer(buf, delimiter="\t", lineterminator="\n", quoting=csv.QUOTE_ALL)
    w.writerow(["file", "caption"] + [f"{c}_{k}" for k in range(1, nbest + 1) for c in ("caption", "score")])
    for r in ok:
        row = [r.file, r.caption] + [x for c, s in r.nbest for x in (c, f"{s:.4f}")]
        (quoted if any("\r" in x for x in row) else w).writerow(row)
    return buf.getvalue()


def convert_legacy_file(path: PathLike, output: PathLike, trust_pickle: bool = False) -> str:
    """Convert a file written by an older captionlib into the formats that load without
    running code: a model file or checkpoint (``latest.pth``: numpy's RNG state becomes plain
    values, see :func:`captionlib.train.trainer.numpy_rng_state`), a packed model (its
    ``model.pth`` likewise, its ``cider_df.pkl`` becomes ``cider_df.npz``), or a pickled
    CIDEr-D document-frequency file (to ``.npz``). ``output`` is written atomically (it may be
    ``path``).

    The old pickle is read allowing only numpy arrays and numbers (nothing in it is run:
    :func:`~captionlib.utils.fileio.safe_unpickle`, ``weights_only`` with
    :func:`~captionlib.utils.fileio.numpy_safe_globals`), and only with ``trust_pickle=True``
    (``caption_convert_model --trust_pickle true``), an explicit step for files you made yourself.

    Returns:
        What was converted: ``"packed model"``, ``"document frequencies"`` or ``"torch file"``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: ``trust_pickle`` not set; or naming ``path``: not one of those files, or one
            holding other types than those this converter knows.
    """
    if not trust_pickle:
        raise ValueError(f"{path}: converting reads an old pickled file: pass "
                         "trust_pickle=True, only for files you made yourself")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    names = []
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    if MANIFEST in names:
        manifest, members = read_packed(path)
        members[MODEL] = _safe_torch_bytes(members[MODEL], f"{path} (member {MODEL})")
        if LEGACY_CIDER_DF in members:
            name = f"{path} (member {LEGACY_CIDER_DF})"
            members[CIDER_DF] = _legacy_df_npz(members.pop(LEGACY_CIDER_DF), name)
            if members[CIDER_DF] is None:
                raise ValueError(f"{name}: not a captionlib CIDEr-D document-frequency file")
        write_packed(output, manifest, members)
        return "packed model"
    data = path.read_bytes()
    npz = None if data[:4] == ZIP_MAGIC else _legacy_df_npz(data, str(path))
    if "format.npy" in names:  # already an .npz document-frequency file: checked and copied
        data, kind = _cider_df_npz(path), "document frequencies"
    elif npz is not None:
        data, kind = npz, "document frequencies"
    else:
        data, kind = _safe_torch_bytes(data, str(path)), "torch file"
    with atomic_open(output) as f:
        f.write(data)
    return kind


def _legacy_df_npz(data: bytes, name: str) -> Optional[bytes]:
    """The ``.npz`` bytes of the pickled document-frequency file of an older version, or
    ``None`` when ``data`` is no such pickle. ``data`` is read once with
    :func:`~captionlib.utils.fileio.safe_unpickle` (numpy arrays and numbers only, no code run).

    Raises:
        ValueError: naming ``name``: a document-frequency pickle of another version.
    """
    from captionlib.metrics.cider_d import _DF_FORMAT, DocumentFrequency

    try:
        obj = safe_unpickle(data)
    except Exception:  # a torch file of the legacy (non-zip) format, or no pickle at all
        return None
    if not (isinstance(obj, dict) and obj.get("format") == _DF_FORMAT):
        return None
    try:
        df = DocumentFrequency.from_dict(obj)
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{name}: not a captionlib CIDEr-D document-frequency file ({e})") from None
    buf = io.BytesIO()
    df.save(buf)
    return buf.getvalue()


def _safe_torch_bytes(data: bytes, name: str) -> bytes:
    """A torch file saved again with plain values only: the numpy RNG state of an old
    ``latest.pth`` converted. Read with ``weights_only`` letting numpy arrays and numbers
    through (:func:`~captionlib.utils.fileio.numpy_safe_globals`: no code run), checked by
    loading the result with ``weights_only`` alone.

    Raises:
        ValueError: naming ``name``: not a torch file, or one still holding other types.
    """
    import torch

    from captionlib.train.trainer import numpy_rng_state

    def no_safe_form(e: UnsafeFileError) -> ValueError:
        return ValueError(f"{name}: holds {', '.join(e.refused) or 'types'}, which this converter has no safe "
                          "form for: not a captionlib model file, checkpoint or packed model")

    try:
        obj = load_checkpoint(name, data=data, numpy_values=True)
    except UnsafeFileError as e:
        raise no_safe_form(e) from None
    except Exception as e:
        raise ValueError(f"{name}: not a torch file ({type(e).__name__}: {e})") from None
    rng = obj.get("rng") if isinstance(obj, dict) else None
    if isinstance(rng, dict) and isinstance(rng.get("numpy"), tuple):
        rng["numpy"] = numpy_rng_state(rng["numpy"])
    buf = io.BytesIO()
    torch.save(obj, buf)
    try:
        load_checkpoint(name, data=buf.getvalue())
    except UnsafeFileError as e:
        raise no_safe_form(e) from None
    return buf.getvalue()
