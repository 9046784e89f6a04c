"""SPICE (Anderson et al., ECCV 2016) through pycocoevalcap's ``spice-1.0.jar``, on Java 17.

pycocoevalcap's own ``Spice`` wrapper does not work on current systems, for three reasons
this module deals with:

1. It needs the Stanford CoreNLP 3.6.0 jars (``stanford-corenlp-3.6.0.jar`` and
   ``stanford-corenlp-3.6.0-models.jar``), which it downloads into site-packages at first
   use. Here they are taken from ``spice_lib_dir``, else from the directory named by the
   environment variable ``CAPTIONLIB_SPICE_LIB``, else from pycocoevalcap's ``spice/lib``
   if someone put them there. ``tools/install_spice.sh`` fetches them.
2. Java >= 15 has no JavaScript engine, which CoreNLP 3.6.0 needs: Debian's
   ``librhino-java`` provides one, loaded with
   ``--module-path=/usr/share/java/rhino.jar --add-modules=ALL-MODULE-PATH``
   (path overridable with ``rhino_jar`` or ``CAPTIONLIB_RHINO_JAR``).
3. SPICE's LMDB cache uses reflection that Java >= 16 forbids unless
   ``--add-opens=java.base/X=ALL-UNNAMED`` is given for X in java.lang, java.util,
   java.math, java.util.concurrent, java.net and java.text.

The cache goes to a directory chosen by the caller (the experiment directory), not to
site-packages; the run has a timeout and a heap size option. When something is missing
:func:`spice_unavailable_reason` says what, and the scorer reports SPICE as skipped.
"""

import json
import logging
import os
import re
import subprocess
import tempfile
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from captionlib.metrics.pycoco import pycoco_dir

CORENLP_JARS = ("stanford-corenlp-3.6.0.jar", "stanford-corenlp-3.6.0-models.jar")
ENV_SPICE_LIB = "CAPTIONLIB_SPICE_LIB"
ENV_RHINO_JAR = "CAPTIONLIB_RHINO_JAR"
DEFAULT_RHINO_JAR = "/usr/share/java/rhino.jar"
ADD_OPENS = ("java.lang", "java.util", "java.math", "java.util.concurrent", "java.net", "java.text")
SPICE_JAR = "spice-1.0.jar"


def java_major_version(java: str = "java") -> Optional[int]:
    """Major version of ``java`` (8, 11, 17, ...), or ``None`` if it does not run."""
    try:
        proc = subprocess.run([java, "-version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', proc.stdout.decode(errors="replace"))
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def find_corenlp_dir(spice_lib_dir: Optional[str] = None) -> Tuple[Optional[str], str]:
    """Directory holding both CoreNLP 3.6.0 jars, and a description of where it looked.

    Returns:
        ``(directory or None, searched)``.
    """
    candidates: List[str] = []
    if spice_lib_dir:
        candidates.append(spice_lib_dir)
    if os.environ.get(ENV_SPICE_LIB):
        candidates.append(os.environ[ENV_SPICE_LIB])
    candidates.append(os.path.join(pycoco_dir("spice"), "lib"))
    for d in candidates:
        if all(os.path.isfile(os.path.join(d, j)) for j in CORENLP_JARS):
            return d, ", ".join(candidates)
    return None, ", ".join(candidates)


def spice_unavailable_reason(
    spice_lib_dir: Optional[str] = None, rhino_jar: Optional[str] = None, java: str = "java"
) -> Optional[str]:
    """``None`` if SPICE can run, else why not (missing Java, CoreNLP jars or Rhino)."""
    version = java_major_version(java)
    if version is None:
        return f"SPICE needs Java, and {java!r} does not run"
    lib, searched = find_corenlp_dir(spice_lib_dir)
    if lib is None:
        return (
            f"SPICE needs {' and '.join(CORENLP_JARS)} (Stanford CoreNLP 3.6.0); not found in "
            f"{searched}. Run tools/install_spice.sh, then pass --spice_lib_dir or set {ENV_SPICE_LIB}"
        )
    if version >= 15:
        rhino = rhino_jar or os.environ.get(ENV_RHINO_JAR) or DEFAULT_RHINO_JAR
        if not os.path.isfile(rhino):
            return (
                f"SPICE on Java {version} needs a JavaScript engine: {rhino} not found "
                "(apt-get install librhino-java, or set " + ENV_RHINO_JAR + ")"
            )
    return None


def spice_command(
    in_file: str,
    out_file: str,
    cache_dir: Optional[str],
    spice_lib_dir: Optional[str] = None,
    rhino_jar: Optional[str] = None,
    heap: str = "8G",
    java: str = "java",
    threads: Optional[int] = None,
) -> List[str]:
    """The java command line running SPICE on ``in_file`` (JSON), writing ``out_file``.

    Raises:
        RuntimeError: if SPICE cannot run (see :func:`spice_unavailable_reason`).
    """
    reason = spice_unavailable_reason(spice_lib_dir, rhino_jar, java)
    if reason:
        raise RuntimeError(reason)
    version = java_major_version(java) or 8
    lib, _ = find_corenlp_dir(spice_lib_dir)
    spice_dir = pycoco_dir("spice")
    classpath = os.pathsep.join(
        [os.path.join(spice_dir, SPICE_JAR), os.path.join(spice_dir, "lib", "*")]
        + [os.path.join(lib, j) for j in CORENLP_JARS]
    )
    cmd = [java, f"-Xmx{heap}"]
    if version >= 9:
        cmd += [f"--add-opens=java.base/{m}=ALL-UNNAMED" for m in ADD_OPENS]
    if version >= 15:
        rhino = rhino_jar or os.environ.get(ENV_RHINO_JAR) or DEFAULT_RHINO_JAR
        cmd += [f"--module-path={rhino}", "--add-modules=ALL-MODULE-PATH"]
    cmd += ["-cp", classpath, "edu.anu.spice.SpiceScorer", in_file, "-out", out_file, "-subset", "-silent"]
    if cache_dir:
        cmd += ["-cache", cache_dir]
    if threads:
        cmd += ["-threads", str(int(threads))]
    return cmd


def compute_spice(
    refs: Mapping[str, Sequence[str]],
    hyps: Mapping[str, str],
    cache_dir: Optional[str] = None,
    spice_lib_dir: Optional[str] = None,
    rhino_jar: Optional[str] = None,
    heap: str = "8G",
    timeout: Optional[float] = 3600.0,
    java: str = "java",
    threads: Optional[int] = None,
    tmp_dir: Optional[str] = None,
) -> Tuple[float, Dict[str, float]]:
    """SPICE F-score per clip and its mean (pycocoevalcap's ``Spice`` semantics).

    Args:
        refs: ``{clip_id: [tokenized reference, ...]}``.
        hyps: ``{clip_id: tokenized hypothesis}``; same clips.
        cache_dir: SPICE's LMDB parse cache (created); ``None`` disables caching.
        spice_lib_dir: directory with the CoreNLP 3.6.0 jars (see module docstring).
        rhino_jar: Rhino jar for Java >= 15.
        heap: JVM maximum heap (``-Xmx``), e.g. ``"8G"``.
        timeout: seconds before the Java process is killed.
        java: java executable.
        threads: SPICE worker threads (default: SPICE's own, all cores).
        tmp_dir: where the JSON input/output files go.

    Returns:
        ``(mean F-score, {clip_id: F-score})`` (NaN where SPICE returns none).

    Raises:
        RuntimeError: when SPICE cannot run, fails, or times out.
    """
    clips = sorted(refs)
    data = [{"image_id": c, "test": hyps[c], "refs": list(refs[c])} for c in clips]
    if cache_dir:
        os.makedirs(cache_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="spice_", dir=tmp_dir) as work:
        in_file = os.path.join(work, "input.json")
        out_file = os.path.join(work, "output.json")
        with open(in_file, "w", encoding="utf-8") as f:
            json.dump(data, f)
        cmd = spice_command(in_file, out_file, cache_dir, spice_lib_dir, rhino_jar, heap, java, threads)
        logging.info("running SPICE: %s", " ".join(cmd))
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(f"SPICE timed out after {timeout} s") from e
        if proc.returncode != 0 or not os.path.isfile(out_file):
            tail = proc.stdout.decode(errors="replace")[-1500:]
            raise RuntimeError(f"SPICE failed (exit {proc.returncode}): {tail}")
        with open(out_file, encoding="utf-8") as f:
            results = json.load(f)

    def _f(x) -> float:
        try:
            return float(x)
        except (TypeError, ValueError):
            return float("nan")

    per = {str(item["image_id"]): _f(item["scores"]["All"]["f"]) for item in results}
    missing = [c for c in clips if c not in per]
    if missing:
        raise RuntimeError(f"SPICE returned no score for {len(missing)} clips, e.g. {missing[:3]}")
    return float(np.mean([per[c] for c in clips])), {c: per[c] for c in clips}
