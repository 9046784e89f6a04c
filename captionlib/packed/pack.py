"""Packing a model (stage 10, ``captionbin.caption_pack``): :func:`pack_model` checks the model
file and its inputs (training config, feature config and its CNN or frozen encoder, statistics,
document frequencies, decoding options) and writes them as one archive
(:mod:`captionlib.packed.archive`); :func:`audio_sample_rates` counts the sample rates of the
training audio for its manifest.
"""

import datetime
import hashlib
import io
import logging
import os
import zipfile
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple

import yaml

from captionlib.decode.options import check_decode_options
from captionlib.packed.archive import (
    BPE_MODEL,
    CIDER_DF,
    CNN_MEMBER,
    DECODE_CONFIG,
    DECODE_DEFAULTS,
    ENCODER_MEMBER,
    FEATS_CONFIG,
    FEATS_STATS,
    MODEL,
    PACKED_FORMAT,
    PACKED_VERSION,
    TOKENS,
    TRAIN_CONFIG,
    ZIP_MAGIC,
    PathLike,
    write_packed,
)
from captionlib.packed.frontends import VisualFrontEnd, _frozen_encoder, _sha256_file
from captionlib.utils.provenance import code_revision, run_environments


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
    """Write a packed model (see :mod:`captionlib.packed.archive`), atomically (temporary file + rename).

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
    from captionlib.train.fit import load_feats_stats

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
