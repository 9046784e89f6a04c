"""The results of captioning with a packed model: :class:`CaptionResult` (one file's caption,
n-best list or error) and :func:`format_results` (TSV or JSON, what ``caption_infer`` writes).
"""

import io
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple


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
