"""Packed models: one zip archive per trained model, and captioning of any audio file with it.

:func:`pack_model` (stage 10, ``captionbin.caption_pack``) writes everything a model needs
outside the recipe into one zip archive:

========================  ================================================================
member                    content
========================  ================================================================
``manifest.json``         format/version, recipe, git revision, UTC date, the source model
                          file, the metrics of the decode it was packed from (score.json),
                          the sample rates of the training audio, and every member's size
                          and SHA-256
``model.pth``             the self-describing model file written by the trainers (state
                          dict, ``model_conf``, ``token_list`` [, ``bpe_proto``]), unchanged
``config.yaml``           the resolved training config of the model dir
``tokens.txt``            the token list (``bpe.model`` too for BPE tokens)
``feats_config.yaml``     the resolved feature config (``caption_dump_feats --print_config``)
``feats_stats.npz``       the global mean/std of the train features (also in the model's buffers)
``cider_df.npz``          the CIDEr-D document frequencies of the train references
                          (``cider_df.pkl``, a pickle, in archives of older versions)
``decode_config.yaml``    the resolved decoding options (beam_size, batch_size, max_len,
                          length_penalty) used at packing time, if given
========================  ================================================================

:class:`PretrainedCaptioner` loads such an archive and captions audio files with exactly the
code of the recipe: :func:`captionlib.audio.io.load_audio` and
:class:`captionlib.audio.features.LogMel` with the packed options (stage 2), then
:func:`captionlib.decode.inference.caption_batch` (stage 8), so a clip of the recipe gets the
caption of stage 8.

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
import pickle
import subprocess
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import yaml

from captionlib.audio.io import AUDIO_EXTENSIONS
from captionlib.decode.options import check_decode_options
from captionlib.utils.fileio import UnsafeFileError, atomic_open, load_checkpoint

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
# Options of captionlib.audio.features.LogMel in a feature config.
LOGMEL_KEYS = ("n_mels", "n_fft", "win_length_s", "hop_length_s", "fmin", "fmax", "dtype", "log", "pad_mode")
POOL_BATCHES = 8  # batches of features computed (and sorted by length) at a time
ZIP_MAGIC = b"PK\x03\x04"  # the first bytes of a zip archive (npz, torch files, packed models)


def git_revision(cwd: Optional[PathLike] = None) -> str:
    """``git rev-parse HEAD`` in ``cwd`` (default: the current directory), or ``"unknown"``."""
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else "unknown"


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
) -> Path:
    """Write a packed model (see the module docstring), atomically (temporary file + rename).

    Args:
        output: the zip archive to write (e.g. ``<model_dir>/packed/valid.cider_d.best.zip``).
        model_file: a model file written by the trainers.
        train_config: the model dir's resolved ``config.yaml``.
        feats_config: the resolved feature config (``caption_dump_feats --print_config``).
        feats_stats: ``feats_stats.npz`` (mean/std); cider_df: ``cider_df.npz``.
        train_sample_rates: ``{Hz: files}`` of the training audio (:func:`audio_sample_rates`);
            lets inference resample when the feature config has ``fs: null``.
        decode_config: decoding options (keys of :data:`DECODE_DEFAULTS`; others are dropped).
        metrics: the ``score.json`` of the decode the model is packed from.
        recipe: the recipe's name; revision: git revision (default: :func:`git_revision`).
        trust_pickle: accept an old pickled ``cider_df`` (packed converted to ``.npz``);
            unpickling runs any code the file holds: only for files you made yourself.

    Returns:
        The path of the archive.

    Raises:
        FileNotFoundError: a missing input file (named).
        ValueError: a model file or document-frequency file that is not one, or needs unsafe
            loading (named), or a log-mel feature config whose ``n_mels`` differs from the
            model's input dimension.
    """
    for f in (model_file, train_config, feats_stats, cider_df):
        if not Path(f).is_file():
            raise FileNotFoundError(f"{f}: no such file (needed to pack {model_file})")
    members = _pack_members(model_file, train_config, feats_config, feats_stats, cider_df, decode_config,
                            trust_pickle)
    manifest = {
        "format": PACKED_FORMAT,
        "version": PACKED_VERSION,
        "recipe": recipe,
        "git_revision": revision if revision is not None else git_revision(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "model_file": str(model_file),
        "metrics": dict(metrics) if metrics is not None else None,
        "train_sample_rates": {str(k): int(v) for k, v in (train_sample_rates or {}).items()},
    }
    output = write_packed(output, manifest, members)
    logging.info("packed %s (%d files, %.1f MB) into %s", model_file, len(members), output.stat().st_size / 1e6, output)
    return output


def _pack_members(model_file: PathLike, train_config: PathLike, feats_config: Mapping[str, Any],
                  feats_stats: PathLike, cider_df: PathLike, decode_config: Optional[Mapping[str, Any]],
                  trust_pickle: bool) -> Dict[str, bytes]:
    """All members of a packed model but the manifest (arguments as :func:`pack_model`), each
    input checked: the model file loads, its input dimension fits a log-mel feature config,
    the document frequencies load.

    Raises:
        ValueError: as :func:`pack_model`.
    """
    from captionlib.models.captioner import load_model_file, model_feats_dim
    from captionlib.text.tokenizer import Tokenizer

    _, obj = load_model_file(str(model_file))
    dim = model_feats_dim(obj["model_conf"])
    if feats_config.get("feats_type", "logmel") == "logmel" and int(feats_config.get("n_mels", dim)) != dim:
        raise ValueError(f"{model_file}: the model takes {dim}-d features, the feature config has "
                         f"n_mels {feats_config.get('n_mels')}")
    members: Dict[str, bytes] = {
        MODEL: Path(model_file).read_bytes(),
        TRAIN_CONFIG: Path(train_config).read_bytes(),
        TOKENS: "".join(t + "\n" for t in obj["token_list"]).encode("utf-8"),
        FEATS_CONFIG: yaml.safe_dump(dict(feats_config), sort_keys=False).encode("utf-8"),
        FEATS_STATS: Path(feats_stats).read_bytes(),
        CIDER_DF: _cider_df_npz(cider_df, trust_pickle),
    }
    if obj.get("bpe_proto") is not None:
        members[BPE_MODEL] = Tokenizer(obj["token_list"], bpe_proto=obj["bpe_proto"]).bpe_proto
    if decode_config is not None:
        dec = {k: decode_config[k] for k in DECODE_DEFAULTS if k in decode_config}
        members[DECODE_CONFIG] = yaml.safe_dump(dec, sort_keys=False).encode("utf-8")
    return members


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


def read_packed(path: PathLike) -> Tuple[dict, Dict[str, bytes]]:
    """Read a packed model's manifest and members (checked against the manifest).

    Returns:
        ``(manifest dict, {member name: bytes})``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: naming ``path``: not a zip archive, not a captionlib packed model, a newer
            format version, or a member missing or corrupt (size/SHA-256 differ).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such packed model")
    try:
        with zipfile.ZipFile(path) as z:
            manifest = json.loads(z.read(MANIFEST))
            members = {name: z.read(name) for name in z.namelist() if name != MANIFEST}
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as e:
        raise ValueError(f"{path}: not a packed captionlib model ({type(e).__name__}: {e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != PACKED_FORMAT:
        raise ValueError(f"{path}: not a packed captionlib model (its {MANIFEST} has no format {PACKED_FORMAT!r})")
    if int(manifest.get("version", 0)) > PACKED_VERSION:
        raise ValueError(f"{path}: packed model format version {manifest['version']} is newer than this "
                         f"captionlib's ({PACKED_VERSION}); update captionlib")
    for entry in manifest.get("files", []):
        data = members.get(entry["name"])
        if data is None or hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise ValueError(f"{path}: member {entry['name']} is missing or corrupt")
    for name in (MODEL, FEATS_CONFIG):
        if name not in members:
            raise ValueError(f"{path}: packed model lacks {name}")
    return manifest, members


def find_audio_files(inputs: Iterable[PathLike], extensions: Sequence[str] = tuple("." + e for e in AUDIO_EXTENSIONS)
                     ) -> List[str]:
    """Expand files and directories into a list of audio files.

    A directory is walked recursively for files whose extension (any case) is in
    ``extensions``, sorted by path; anything else is kept as given, in order (a missing or
    unreadable file is reported when it is read).

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
        found = sorted(
            os.path.join(root, name) for root, _, names in os.walk(item) for name in names if name.lower().endswith(exts)
        )
        if not found:
            logging.warning("%s: no audio files (%s) in this directory", item, " ".join(exts))
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


class PretrainedCaptioner:
    """A packed model ready to caption audio files.

    Build it with :meth:`from_pretrained`. Features are computed as stage 2 computes them
    (:func:`~captionlib.audio.io.load_audio`: mono mixdown, soxr resampling to the feature
    config's ``fs``; :class:`~captionlib.audio.features.LogMel` with the packed options).
    When the feature config has ``fs: null`` and all training audio had one sample rate,
    audio at another rate is resampled to it.

    Attributes:
        model: the Captioner (eval mode, on ``device``); tokenizer: its token list.
        manifest: the archive's manifest; feats_config: the resolved feature config.
        decode_config: decoding options (:data:`DECODE_DEFAULTS` keys), packed or overridden.
        sample_rate: the rate in Hz audio is resampled to, or ``None`` (each file's own).
    """

    def __init__(self, model, tokenizer, feats_config: Mapping[str, Any], manifest: Mapping[str, Any],
                 decode_config: Mapping[str, Any], device, name: str = "packed model"):
        from captionlib.audio.features import LogMel

        if feats_config.get("feats_type", "logmel") != "logmel":
            raise ValueError(f"{name}: feats_type {feats_config.get('feats_type')!r}: only log-mel (audio) "
                             "models caption audio files")
        self.model, self.tokenizer, self.device, self.name = model, tokenizer, device, name
        self.feats_config, self.manifest = dict(feats_config), dict(manifest)
        self.decode_config = {**DECODE_DEFAULTS, **decode_config}
        try:
            check_decode_options(**{k: self.decode_config[k] for k in DECODE_DEFAULTS})
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
        self.extractor = LogMel(**{k: feats_config[k] for k in LOGMEL_KEYS if k in feats_config})
        rates = sorted(int(r) for r in (manifest.get("train_sample_rates") or {}))
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

    @classmethod
    def from_pretrained(cls, path: PathLike, ngpu: int = 0, **decode_options) -> "PretrainedCaptioner":
        """Load a packed model (written by :func:`pack_model`); nothing else is read, and nothing
        in it is run: ``model.pth`` is read with ``torch.load(weights_only=True)``.

        Args:
            path: the zip archive.
            ngpu: 0 = CPU, 1 = the first CUDA device.
            decode_options: overrides of the packed decoding options (``beam_size``,
                ``batch_size``, ``max_len``, ``length_penalty``); ``None`` values are ignored.

        Raises:
            FileNotFoundError: no such file.
            ValueError: naming ``path``: see :func:`read_packed`; an unknown decoding option,
                or a beam size, batch size or maximum length below 1; a model that does not take
                log-mel features; a ``model.pth`` that needs unsafe (code-running) unpickling
                (:class:`~captionlib.utils.fileio.UnsafeFileError`: the archive was made by an older
                captionlib and must be converted, or was crafted).
            RuntimeError: ``ngpu`` > 0 without a CUDA device.
        """
        from captionlib.models.captioner import load_model_file
        from captionlib.text.tokenizer import Tokenizer
        from captionlib.utils.distributed import get_device

        unknown = sorted(set(decode_options) - set(DECODE_DEFAULTS))
        if unknown:
            raise ValueError(f"unknown decoding options {unknown}; expected some of {sorted(DECODE_DEFAULTS)}")
        check_decode_options(**decode_options)  # before anything is read
        manifest, members = read_packed(path)
        device = get_device(ngpu)
        model, obj = load_model_file(os.fspath(path), map_location=str(device), data=members[MODEL], member=MODEL)
        model.to(device)
        decode_config = yaml.safe_load(members[DECODE_CONFIG]) if DECODE_CONFIG in members else {}
        decode_config.update({k: v for k, v in decode_options.items() if v is not None})
        tokenizer = Tokenizer(obj["token_list"], bpe_proto=obj.get("bpe_proto"))
        return cls(model, tokenizer, yaml.safe_load(members[FEATS_CONFIG]), manifest, decode_config, device,
                   name=str(path))

    def features(self, path: PathLike) -> np.ndarray:
        """Log-mel features of one audio file, as stage 2 dumps them.

        Returns:
            float32 ``(frames, n_mels)``.

        Raises:
            FileNotFoundError / ValueError: naming ``path``: missing, unreadable, empty (0 samples)
                or non-finite audio (see :func:`~captionlib.audio.io.load_audio`).
        """
        from captionlib.audio.io import load_audio

        wave, rate = load_audio(path, fs=self.sample_rate)
        try:
            return self.extractor(wave, rate)
        except ValueError as e:
            raise ValueError(f"{os.fspath(path)}: {e}") from None

    def caption_files(self, files: Sequence[PathLike], nbest: int = 0, skip_bad: bool = False,
                      progress: bool = False) -> List[CaptionResult]:
        """Caption audio files, batched by length (``decode_config['batch_size']`` files).

        Args:
            files: audio files (any format :func:`~captionlib.audio.io.load_audio` reads).
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
        """Caption audio files: one caption per file, in order.

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
    columns for k = 1..``nbest``; fields holding a tab or newline are quoted (csv module).
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
    w.writerow(["file", "caption"] + [f"{c}_{k}" for k in range(1, nbest + 1) for c in ("caption", "score")])
    for r in ok:
        w.writerow([r.file, r.caption] + [x for c, s in r.nbest for x in (c, f"{s:.4f}")])
    return buf.getvalue()


def convert_legacy_file(path: PathLike, output: PathLike, trust_pickle: bool = False) -> str:
    """Convert a file written by an older captionlib into the formats that load without
    running code: a model file or checkpoint (``latest.pth``: numpy's RNG state becomes plain
    values, see :func:`captionlib.train.trainer.numpy_rng_state`), a packed model (its
    ``model.pth`` likewise, its ``cider_df.pkl`` becomes ``cider_df.npz``), or a pickled
    CIDEr-D document-frequency file (to ``.npz``). ``output`` is written atomically (it may be
    ``path``).

    The old file is UNPICKLED, which runs any code it holds: only for files you made yourself,
    and only with ``trust_pickle=True`` (``caption_convert_model --trust_pickle true``).

    Returns:
        What was converted: ``"packed model"``, ``"document frequencies"`` or ``"torch file"``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: ``trust_pickle`` not set; or naming ``path``: not one of those files, or one
            holding other types than those this converter knows.
    """
    if not trust_pickle:
        raise ValueError(f"{path}: converting unpickles the old file, which runs any code it holds: pass "
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
    ``None`` when ``data`` is no such pickle. ``data`` is unpickled once (trusted: see
    :func:`convert_legacy_file`).

    Raises:
        ValueError: naming ``name``: a document-frequency pickle of another version.
    """
    from captionlib.metrics.cider_d import _DF_FORMAT, DocumentFrequency

    try:
        obj = pickle.loads(data)
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
    """A torch file (unpickled: trusted) saved again with plain values only: the numpy RNG
    state of an old ``latest.pth`` converted; checked by loading it with ``weights_only``.

    Raises:
        ValueError: naming ``name``: not a torch file, or one still holding other types.
    """
    import torch

    from captionlib.train.trainer import numpy_rng_state

    try:
        obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
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
        raise ValueError(f"{name}: holds {', '.join(e.refused) or 'types'}, which this converter has no safe "
                         "form for: not a captionlib model file, checkpoint or packed model") from None
    return buf.getvalue()
