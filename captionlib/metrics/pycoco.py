"""Bridges to pycocoevalcap, the reference implementation of the COCO caption metrics.

* :func:`ptb_tokenize`: the Stanford PTB tokenizer exactly as
  ``pycocoevalcap.tokenizer.ptbtokenizer.PTBTokenizer`` runs it (same jar, flags and
  punctuation list), but in one Java call for references and hypotheses together and
  with its temporary file outside site-packages (which may be read-only).
* :func:`get_meteor`: one ``pycocoevalcap.meteor.Meteor`` process per Python process,
  reused across calls (starting METEOR's JVM and loading its paraphrase table takes
  seconds); :func:`meteor_score` sends it all the clips of a call in one batch.
* :func:`pycoco_cider_with_df`: pycocoevalcap's ``CiderScorer`` fed fixed document
  frequencies (what an RL reward with train-set statistics computes); used by the tests
  and ``bench/bench_reward.py`` as the reference for :class:`captionlib.metrics.cider_d.CiderD`.
"""

import atexit
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from collections import defaultdict
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import pycocoevalcap.bleu.bleu as _bleu  # pycocoevalcap is a namespace package: a module locates it
from pycocoevalcap.cider.cider_scorer import CiderScorer
from pycocoevalcap.meteor.meteor import Meteor
from pycocoevalcap.tokenizer.ptbtokenizer import PUNCTUATIONS, STANFORD_CORENLP_3_4_1_JAR


def java_available(java: str = "java") -> Optional[str]:
    """Return ``None`` when ``java`` runs, else the reason it does not."""
    if shutil.which(java) is None:
        return f"Java not found ({java!r} is not on PATH)"
    return None


def pycoco_dir(sub: str) -> str:
    """The directory ``sub`` (``tokenizer``, ``spice``, ...) of the installed pycocoevalcap."""
    base = os.path.dirname(os.path.dirname(os.path.abspath(_bleu.__file__)))
    return os.path.join(base, sub)


#: what the PTB tokenizer (-preserveLines) ends a line at, mapped to a space: a caption holding
#: one came back as two lines (pycocoevalcap then reads every later caption out of step)
_LINE_BREAKS = str.maketrans({c: " " for c in "\n\r\u2028\u2029\u0085\v\f"})


def ptb_tokenize(
    sentences: Sequence[str], java: str = "java", tmp_dir: Optional[str] = None
) -> List[str]:
    """PTB-tokenize sentences as the COCO/DCASE evaluations do.

    Lower-cases, splits with Stanford CoreNLP 3.4.1's ``PTBTokenizer -preserveLines``
    and drops pycocoevalcap's punctuation tokens (``PUNCTUATIONS``).

    Args:
        sentences: raw captions (line breaks inside a caption become spaces: ``\\n``, ``\\r``,
            and U+2028, U+2029, U+0085, ``\\v``, ``\\f``, which the tokenizer also ends a line at).
        java: java executable.
        tmp_dir: where to put the temporary input file (default: system temp dir).

    Returns:
        One space-joined tokenized string per input sentence.

    Raises:
        RuntimeError: if Java fails or returns a different number of lines.
    """
    if not sentences:
        return []
    jar = os.path.join(pycoco_dir("tokenizer"), STANFORD_CORENLP_3_4_1_JAR)
    text = "\n".join(s.translate(_LINE_BREAKS) for s in sentences)
    fd, path = tempfile.mkstemp(prefix="ptb_", suffix=".txt", dir=tmp_dir)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
        cmd = [java, "-cp", jar, "edu.stanford.nlp.process.PTBTokenizer", "-preserveLines",
               "-lowerCase", path]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    finally:
        os.remove(path)
    if proc.returncode != 0:
        raise RuntimeError(f"PTB tokenizer failed: {proc.stderr.decode(errors='replace')[-2000:]}")
    lines = proc.stdout.decode("utf-8").split("\n")
    if len(lines) > len(sentences) and all(x == "" for x in lines[len(sentences):]):
        lines = lines[: len(sentences)]
    if len(lines) != len(sentences):
        raise RuntimeError(
            f"PTB tokenizer returned {len(lines)} lines for {len(sentences)} sentences"
        )
    punct = set(PUNCTUATIONS)
    return [" ".join(w for w in line.rstrip().split(" ") if w not in punct) for line in lines]


_METEOR = None
_METEOR_LOCK = threading.Lock()


def get_meteor():
    """The process-wide ``pycocoevalcap.meteor.Meteor`` instance (started on first use)."""
    global _METEOR
    with _METEOR_LOCK:
        if _METEOR is not None and _METEOR.meteor_p.poll() is not None:
            logging.warning("METEOR process died; restarting it")
            _METEOR = None
        if _METEOR is None:
            _METEOR = Meteor()
            atexit.register(close_meteor)
        return _METEOR


def close_meteor() -> None:
    """Stop the shared METEOR process (registered with ``atexit``)."""
    global _METEOR
    with _METEOR_LOCK:
        m, _METEOR = _METEOR, None
    if m is not None:
        try:
            m.meteor_p.stdin.close()
            m.meteor_p.kill()
            m.meteor_p.wait()
        except Exception:  # noqa: BLE001 (best effort at exit)
            pass


def _meteor_exchange(proc: subprocess.Popen, lines: Sequence[str], num_answers: int) -> List[str]:
    """Send ``lines`` to the METEOR jar and read ``num_answers`` lines back.

    The lines are written from a thread while this one reads: the jar answers each
    ``SCORE`` line as it reads it, so writing them all before reading would fill both
    pipes and block both sides once the answers exceed the pipe buffer.

    Raises:
        RuntimeError: if the jar stops answering (its process ended).
    """
    data = "".join(line + "\n" for line in lines).encode()

    def write():
        try:
            proc.stdin.write(data)
            proc.stdin.flush()
        except OSError:  # the process died; the reader below sees its end of output
            pass

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    answers = []
    for _ in range(num_answers):
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"METEOR process stopped answering (exit code {proc.poll()})")
        answers.append(line.decode().strip())
    writer.join()
    return answers


def meteor_score(refs: Mapping[str, Sequence[str]], hyps: Mapping[str, str]) -> Tuple[float, Dict[str, float]]:
    """Corpus METEOR 1.5 (pycocoevalcap) of tokenized strings, in one batch.

    Sends exactly the lines of ``pycocoevalcap.meteor.Meteor.compute_score`` to the
    shared jar (:func:`get_meteor`): one ``SCORE ||| ref 1 ||| ... ||| hyp`` line per
    clip, ``|||`` removed from the hypothesis and then ``"  "`` replaced by ``" "`` as
    pycocoevalcap does (a ``|||`` inside a reference splits it, also as there), then one
    ``EVAL ||| stats 1 ||| ...`` line. The ``SCORE`` lines go in one batch instead of one
    round trip per clip; the scores are the same. The corpus score is the jar's score of
    the summed statistics (the last answer to ``EVAL``), not the mean of the clip scores.

    Args:
        refs: ``{clip_id: [tokenized reference, ...]}``.
        hyps: ``{clip_id: tokenized hypothesis}``; same clips.

    Returns:
        ``(corpus score, {clip_id: score})``, scores in [0, 1].

    Raises:
        ValueError: if there is no clip, or a caption holds a line break (``\\n`` or
            ``\\r``: the jar would read it as two lines; pycocoevalcap then reads the
            answers out of step).
        RuntimeError: if the METEOR process stops answering (it is restarted on the next
            call).
    """
    clips = list(refs)
    if not clips:
        raise ValueError("nothing to score")
    lines = []
    for c in clips:
        hyp = hyps[c].replace("|||", "").replace("  ", " ")
        line = " ||| ".join(("SCORE", " ||| ".join(refs[c]), hyp))
        if "\n" in line or "\r" in line:
            raise ValueError(f"clip {c!r}: METEOR's stdio protocol cannot take a line break in a caption")
        lines.append(line)
    meteor = get_meteor()
    with meteor.lock:
        try:
            stats = _meteor_exchange(meteor.meteor_p, lines, len(lines))
            answers = _meteor_exchange(meteor.meteor_p, ["EVAL ||| " + " ||| ".join(stats)], len(lines) + 1)
            scores = [float(a) for a in answers]
        except BaseException:
            meteor.meteor_p.kill()  # out of step with us: get_meteor() starts a new one
            meteor.meteor_p.wait()
            raise
    return scores[-1], dict(zip(clips, scores[:-1]))


def pycoco_cider_with_df(
    pairs: Sequence[Tuple[str, Sequence[str]]],
    document_frequency: Mapping[Tuple[str, ...], float],
    num_docs: int,
    n: int = 4,
    sigma: float = 6.0,
) -> np.ndarray:
    """pycocoevalcap's ``CiderScorer`` with fixed document frequencies.

    ``CiderScorer.compute_score`` would recount the document frequencies from the
    references it was given and set ``ref_len = log(#pairs)``; here the frequencies and
    ``ref_len = log(num_docs)`` of another corpus are used instead, which is what a CIDEr-D
    reward with train-set statistics computes.

    Args:
        pairs: ``(hypothesis string, [reference strings])`` per candidate.
        document_frequency: ``{word tuple: df}`` (e.g. ``DocumentFrequency.to_dict()``);
            a ``defaultdict(float)`` is used as is (pycocoevalcap adds absent n-grams
            to it with value 0, which changes no score), other mappings are copied.
        num_docs: number of documents the frequencies were counted over.

    Returns:
        float64 ``(len(pairs),)`` scores.
    """

    class _FixedDF(CiderScorer):
        # compute_cider() assigns ref_len = log(#pairs); keep log(num_docs) instead.
        ref_len = property(lambda self: np.log(float(num_docs)), lambda self, value: None)

    scorer = _FixedDF(n=n, sigma=sigma)
    for hyp, refs in pairs:
        scorer += (hyp, list(refs))
    if isinstance(document_frequency, defaultdict):
        scorer.document_frequency = document_frequency
    else:
        scorer.document_frequency = defaultdict(float, document_frequency)
    return np.asarray(scorer.compute_cider(), dtype=np.float64)
