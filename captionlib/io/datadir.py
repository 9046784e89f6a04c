"""Read and write Kaldi-style data-directory files (``wav.scp``, ``text``, ``utt2spk`` ...).

Every file is line oriented: a whitespace-free key, one or more whitespace
characters, then the value. The value is the *rest of the line* after the first
whitespace run (trailing whitespace stripped, as Kaldi does), so it may contain
spaces: Clotho file names such as ``wind in tree  white birch 01.wav`` survive a
round trip. Keys are written sorted in ``LC_ALL=C`` order, i.e. by their UTF-8
bytes, so ``sort -c`` and ``utils/validate_data_dir.sh`` accept the files.

In captionlib a *clip* plays the role of a Kaldi *speaker* and a *caption* the
role of an *utterance* (see ``docs/CONVENTIONS.md`` section 3.4)::

    wav.scp   <clip-id> <abs path>          text     <caption-id> <raw caption>
    utt2spk   <caption-id> <clip-id>        spk2utt  <clip-id> <caption-id> ...
    aud2name  <clip-id> <file name>         reco2dur <clip-id> <seconds>

Limitation: because the value starts after the first whitespace *run*, a value
that itself begins with whitespace cannot be represented (three Clotho file names
start with a space; their ``aud2name`` entry loses it, the absolute path in
``wav.scp`` keeps it).
"""

import csv
import io
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Type, Union

from captionlib.utils.fileio import atomic_open

PathLike = Union[str, "os.PathLike[str]"]

_SPLIT_RE = re.compile(r"(\S+)\s+(.*)")
# C0 and C1 control characters other than tab (a NUL run is what a file cut short by a crash
# often holds; the others come from binary data or a wrong decoding)
_CONTROL_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def control_problem(text: str) -> Optional[str]:
    """Why ``text`` (one line of a text file, a caption) holds a control character, naming the
    first and its 1-based column, or ``None``. Tab is allowed; so is nothing else below U+0020,
    nor U+007F-U+009F: no caption or Kaldi-style file has them, and tools disagree on them (the
    cleaner makes a NUL a word break, the PTB tokenizer keeps it)."""
    m = _CONTROL_RE.search(text)
    if m is None:
        return None
    return f"control character U+{ord(m.group()):04X} at column {m.start() + 1}"


def sort_key_c(key: str) -> bytes:
    """Sort key reproducing ``LC_ALL=C sort`` (byte order of the UTF-8 encoding)."""
    return key.encode("utf-8")


def iter_lines(path: PathLike):
    """Yield ``(line_number, line)`` with the newline removed; decoding errors name the file,
    and so do a UTF-8 byte-order mark (an editor's, which would become part of the first
    id: a clip of its own, silently, as Kaldi's tools would read it) and a control character
    (:func:`control_problem`)."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raise ValueError(f"{path}:1: starts with a UTF-8 byte-order mark, which Kaldi-style files do not "
                                 f"have; remove it: sed -i '1s/^\\xEF\\xBB\\xBF//' {path}")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid UTF-8 ({e})") from None
            line = line.rstrip("\r\n")
            problem = control_problem(line)
            if problem:
                raise ValueError(f"{path}:{lineno}: {problem}; Kaldi-style files hold text only "
                                 "(NUL bytes often mean a file cut short by a crash)")
            yield lineno, line


def read_scp(path: PathLike, allow_empty_value: bool = False) -> Dict[str, str]:
    """Read a two-column Kaldi file (``<key> <value...>``) into an insertion-ordered dict.

    Args:
        path: the file (``wav.scp``, ``feats.scp``, ``aud2name``, ``reco2dur`` ...).
        allow_empty_value: accept a line holding only a key (value ``""``).

    Returns:
        ``{key: value}`` in file order; the value is everything after the first
        whitespace run, with trailing whitespace removed.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: ``"<path>:<line>: ..."`` for an empty line, a line without a
            value, a line starting with whitespace, invalid UTF-8 or a duplicate key.

    Example:
        >>> read_scp("data/validation/wav.scp")["clotho-validation-00001"]
        '/abs/clotho/validation/Whistling.wav'
    """
    out: Dict[str, str] = {}
    first_line: Dict[str, int] = {}
    for lineno, line in iter_lines(path):
        stripped = line.rstrip()
        if not stripped:
            raise ValueError(f"{path}:{lineno}: empty line")
        if stripped[0].isspace():
            raise ValueError(f"{path}:{lineno}: line starts with whitespace: {line!r}")
        m = _SPLIT_RE.fullmatch(stripped)
        if m is None:
            if not allow_empty_value:
                raise ValueError(f"{path}:{lineno}: expected '<key> <value>', got {line!r}")
            key, value = stripped, ""
        else:
            key, value = m.group(1), m.group(2)
        if key in out:
            raise ValueError(
                f"{path}:{lineno}: duplicate key {key!r} (first seen on line {first_line[key]}); ids end at the "
                f"first whitespace and may not contain any (an id with a space splits into key and value)"
            )
        out[key] = value
        first_line[key] = lineno
    return out


def read_text(path: PathLike) -> Dict[str, str]:
    """Read a Kaldi ``text`` file: ``{caption_id: raw caption}``.

    Raises:
        ValueError: as :func:`read_scp`; an empty caption is an error.
    """
    return read_scp(path)


def read_utt2spk(path: PathLike) -> Dict[str, str]:
    """Read ``utt2spk`` (``<caption-id> <clip-id>``).

    Raises:
        ValueError: as :func:`read_scp`, or ``"<path>:<line>: ..."`` if the value is
            not a single token.
    """
    out = read_scp(path)
    for lineno, (key, value) in enumerate(out.items(), start=1):
        if len(value.split()) != 1:
            raise ValueError(f"{path}:{lineno}: expected '<utt> <spk>', got {key} {value!r}")
    return out


def read_spk2utt(path: PathLike) -> Dict[str, List[str]]:
    """Read ``spk2utt`` (``<clip-id> <caption-id-1> ... <caption-id-N>``).

    Returns:
        ``{clip_id: [caption_id, ...]}`` in file order.

    Raises:
        ValueError: as :func:`read_scp`, or if a caption id occurs twice.
    """
    out: Dict[str, List[str]] = {}
    seen: Dict[str, str] = {}
    for lineno, (key, value) in enumerate(read_scp(path).items(), start=1):
        utts = value.split()
        for u in utts:
            if u in seen:
                raise ValueError(f"{path}:{lineno}: utterance {u!r} already listed under {seen[u]!r}")
            seen[u] = key
        out[key] = utts
    return out


def _check_entry(path: PathLike, key: str, value: str) -> None:
    if not key or any(c.isspace() for c in key):
        raise ValueError(f"{path}: key {key!r} is empty or contains whitespace")
    if "\n" in value or "\r" in value:
        raise ValueError(f"{path}: value of {key!r} contains a newline: {value!r}")
    problem = control_problem(key) or control_problem(value)
    if problem:  # read_scp would refuse the file
        raise ValueError(f"{path}: entry {key!r} holds a {problem} of the key or value: {value!r}")


def write_lines_atomic(path: PathLike, lines: Iterable[str]) -> None:
    """Write ``lines`` (each without newline) to ``path`` atomically.

    The text (UTF-8) goes to a temporary file in the same directory, which then replaces
    ``path``, so readers never see a half-written file (:func:`captionlib.utils.fileio.atomic_open`).
    """
    with atomic_open(path) as f:
        for line in lines:
            f.write(line.encode("utf-8"))
            f.write(b"\n")


def write_scp(path: PathLike, mapping: Mapping[str, object]) -> None:
    """Write ``<key> <value>`` lines sorted by key in ``LC_ALL=C`` order, atomically.

    Args:
        path: output file; parent directories are created.
        mapping: ``{key: value}``; a list/tuple value is joined with single spaces
            (``spk2utt``), anything else is converted with ``str``.

    Raises:
        ValueError: if a key is empty or contains whitespace, or a value contains a newline.
    """
    lines = []
    for key in sorted(mapping, key=sort_key_c):
        value = mapping[key]
        if isinstance(value, (list, tuple)):
            value = " ".join(str(v) for v in value)
        else:
            value = str(value)
        _check_entry(path, key, value)
        lines.append(f"{key} {value}" if value != "" else key)
    write_lines_atomic(path, lines)


def utt2spk_to_spk2utt(utt2spk: Mapping[str, str]) -> Dict[str, List[str]]:
    """Invert ``utt2spk`` into ``spk2utt`` with utterances in ``LC_ALL=C`` order."""
    out: Dict[str, List[str]] = {}
    for utt in sorted(utt2spk, key=sort_key_c):
        out.setdefault(utt2spk[utt], []).append(utt)
    return out


def read_numeric_scp(path: PathLike, conv=int) -> Dict[str, Any]:
    """Read ``<key> <number>`` lines (``utt2num_frames``, ``reco2dur``) converted by ``conv``.

    Raises:
        ValueError: a parse error or a value ``conv`` rejects, naming file and line.
    """
    out = {}
    for lineno, (k, v) in enumerate(read_scp(path).items(), start=1):
        try:
            out[k] = conv(v)
        except ValueError:
            raise ValueError(f"{os.fspath(path)}:{lineno}: not a number: {v!r}") from None
    return out


def feats_dim(data_dir: PathLike) -> int:
    """Feature dimension D from the one-line ``<data_dir>/feats_dim`` of a dump directory.

    Raises:
        FileNotFoundError: no feats_dim file.
    """
    path = os.path.join(os.fspath(data_dir), "feats_dim")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: missing (written by the feature dump stage)")
    with open(path, encoding="utf-8") as f:
        return int(f.read().split()[0])


def read_utf8(path: PathLike, error: Type[Exception] = ValueError, what: str = "file") -> str:
    """The text of a UTF-8 file (a BOM is dropped).

    Raises:
        error: a missing file (``<path>: <what> not found``) or invalid UTF-8, naming
            ``<path>:<line>``.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise error(f"{path}: {what} not found") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise error(f"{path}:{line}: not valid UTF-8 ({e.reason})") from None


def read_utf8_lines(path: PathLike, error: Type[Exception] = ValueError, what: str = "file") -> List[str]:
    """The lines of a UTF-8 file (:func:`read_utf8`), split at ``\\n`` only, a ``\\r`` before it
    dropped: ``str.splitlines`` also splits at U+2028, U+0085, ``\\v``, ``\\f`` and ``\\x1c``-``\\x1e``,
    which cut a caption short and numbered every later line wrong.

    Raises:
        error: as :func:`read_utf8`.
    """
    lines = read_utf8(path, error, what).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_csv_rows(
    csv_path: PathLike, header: Sequence[str], error: Type[Exception] = ValueError, what: str = "CSV"
) -> List[Tuple[int, List[str]]]:
    """Read a UTF-8 (optionally BOM-prefixed) CSV file, checking its header, with line numbers.

    Quoted cells may hold commas and newlines; a row's number is its first physical line, so
    messages point at the line an editor shows. Blank lines are not rows.

    Args:
        csv_path: the file.
        header: the expected header cells (compared after stripping whitespace).
        error: the exception class raised (e.g. a corpus's own ``ValueError`` subclass).
        what: how the file is named in messages (e.g. ``"caption CSV"``).

    Returns:
        ``(first physical line number, cells)`` of each data row.

    Raises:
        error: a missing file, invalid UTF-8, a CSV syntax error, an empty file or another
            header, naming ``<csv_path>:<line>``.
    """
    path = os.fspath(csv_path)
    text = read_utf8(path, error, what)
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    rows: List[Tuple[int, List[str]]] = []
    found: Optional[List[str]] = None
    prev_end = 0
    try:
        for cells in reader:
            start = prev_end + 1
            prev_end = reader.line_num
            if found is None:
                found = cells
                continue
            if not cells or (len(cells) == 1 and cells[0].strip() == ""):
                continue  # blank line (e.g. trailing newline); not a data row
            rows.append((start, cells))
    except csv.Error as e:
        raise error(f"{path}:{prev_end + 1}: CSV syntax error: {e}") from None
    if found is None or [h.strip() for h in found] != list(header):
        got = "an empty file" if found is None else ",".join(found)
        raise error(f"{path}:1: expected header {','.join(header)}, got {got}")
    return rows


@dataclass
class DataDir:
    """In-memory view of a data directory; files that are absent are ``None``."""

    path: str
    wav_scp: Optional[Dict[str, str]] = None
    text: Optional[Dict[str, str]] = None
    utt2spk: Optional[Dict[str, str]] = None
    spk2utt: Optional[Dict[str, List[str]]] = None
    aud2name: Optional[Dict[str, str]] = None
    reco2dur: Optional[Dict[str, float]] = None
    feats_scp: Optional[Dict[str, str]] = None
    utt2num_frames: Optional[Dict[str, int]] = None
    extra: Dict[str, str] = field(default_factory=dict)


def load_data_dir(path: PathLike) -> DataDir:
    """Load every known file of a data (or dump) directory.

    Args:
        path: directory holding some of ``wav.scp text utt2spk spk2utt aud2name
            reco2dur feats.scp utt2num_frames`` (plus one-line ``feats_dim``/``feats_type``,
            returned in ``extra``).

    Returns:
        :class:`DataDir` with the parsed files.

    Raises:
        NotADirectoryError: if ``path`` is not a directory.
        ValueError: any parse error (naming file and line), or a non-numeric
            duration / frame count.
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise NotADirectoryError(f"not a data directory: {path}")

    def p(name: str) -> Optional[str]:
        f = os.path.join(path, name)
        return f if os.path.isfile(f) else None

    def numeric(name: str, conv):
        f = p(name)
        return None if f is None else read_numeric_scp(f, conv)

    d = DataDir(path=path)
    d.wav_scp = read_scp(p("wav.scp")) if p("wav.scp") else None
    d.text = read_text(p("text")) if p("text") else None
    d.utt2spk = read_utt2spk(p("utt2spk")) if p("utt2spk") else None
    d.spk2utt = read_spk2utt(p("spk2utt")) if p("spk2utt") else None
    d.aud2name = read_scp(p("aud2name")) if p("aud2name") else None
    d.feats_scp = read_scp(p("feats.scp")) if p("feats.scp") else None
    d.reco2dur = numeric("reco2dur", float)
    d.utt2num_frames = numeric("utt2num_frames", int)
    for name in ("feats_dim", "feats_type"):
        f = p(name)
        if f is not None:
            with open(f, encoding="utf-8") as fh:
                d.extra[name] = fh.read().strip()
    return d
