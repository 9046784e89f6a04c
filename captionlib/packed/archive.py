"""The packed-model archive: one zip archive per trained model, its member names and format
constants, and :func:`write_packed` / :func:`read_packed` (bounded memory, every member checked
against the manifest).

:func:`captionlib.packed.pack.pack_model` (stage 10, ``captionbin.caption_pack``) writes
everything a model needs outside the recipe into one zip archive:

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
"""

import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any, Dict, Mapping, Tuple, Union

import yaml

from captionlib.utils.archive import DEFAULT_MAX_MODEL_BYTES, member_sizes, read_member
from captionlib.utils.fileio import atomic_open

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
DECODE_DEFAULTS: Dict[str, Any] = {"beam_size": 1, "batch_size": 32, "max_len": 30, "length_penalty": 0.0,
                                   "rerank": 0, "rerank_lm_weight": 0.0, "sample_temperature": 1.0,
                                   "sample_top_k": 0, "sample_top_p": 1.0}
CNN_MEMBER = "cnn.pt2"  # the torch.export backbone of a feature config with cnn: exported
ENCODER_MEMBER = "encoder.pth"  # the frozen audio encoder of a feature config with feats_type: pretrained
ZIP_MAGIC = b"PK\x03\x04"  # the first bytes of a zip archive (npz, torch files, packed models)


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
