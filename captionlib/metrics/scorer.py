"""Caption scoring as the COCO and DCASE evaluations do it (stage "scoring" of the recipe).

References and hypotheses are tokenized by pycocoevalcap's PTB tokenizer, then scored
with BLEU-1..4, METEOR 1.5 (pycocoevalcap's jar, one process reused), ROUGE-L, CIDEr-D
(document frequencies from the references of the scored set, as pycocoevalcap's
``Cider``), SPICE (see :mod:`captionlib.metrics.spice`) and SPIDEr = (CIDEr-D + SPICE) / 2
(Liu et al., ICCV 2017). BLEU, ROUGE-L and CIDEr-D are our implementations, tested to equal
pycocoevalcap's.

Diversity next to precision (seed 001 sec. 5.4, table 4): given N sampled captions per clip
(``text_samples`` of ``caption_decode --num_diversity_samples N``), ``Div-1``, ``Div-2`` and
``mBLEU-4`` of :mod:`captionlib.metrics.diversity` (set-level, averaged over clips; lower
mBLEU-4 = more diverse) and ``CIDEr-D (samples)``, seed 001's precision of the samples:
every sample is PTB-tokenized like the hypotheses and scored as a candidate against its
clip's references with the document frequencies of the scored references (one document
per clip, as ``CIDEr-D``), averaged over the clip's samples, then over clips
(:func:`captionlib.metrics.cider_d.mean_cider_d_of_sets`; with N samples for every clip
this is the mean of N ordinary CIDEr-D scorings, one per sample index). Given the N-best
beam hypotheses (``text_nbest`` of ``caption_decode --nbest N``), the same three diversity
metrics over them: ``Div-1 (beams)``, ``Div-2 (beams)``, ``mBLEU-4 (beams)`` (table 4
"bs"). ``Vocab`` is the number of distinct words in the 1-best hypotheses (always
computed). Diversity uses the captions as the model writes them
(:func:`captionlib.text.cleaner.clean_caption`, split at spaces), not the PTB tokenizer.

Fluency (metric ``fluency``, :mod:`captionlib.metrics.fluency_score`): the fraction of the
hypotheses flagged by the rules (``FER (rules)``) and by a trained detector (``FER (detector)``,
given by ``fluency_model``), and ``CIDEr-D-FL`` / ``SPIDEr-FL``: the per-clip CIDEr-D / SPIDEr
times 0.1 where the caption is flagged (by the detector, else by the rules), averaged, as
SPIDEr-FL (DCASE 2023) is formed. These keys follow :data:`SCORE_KEYS` only when requested.

The result is a flat dict with the keys of :data:`SCORE_KEYS` (and :data:`FLUENCY_KEYS` when
``fluency`` is requested), each a float or ``None``, plus ``skipped: {key: reason}`` for every
``None``: a metric that cannot run (no Java, no CoreNLP jars, no sampled captions, ...) or was
not requested is never given a number.
"""

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from captionlib.io.datadir import iter_lines, read_scp, read_spk2utt, read_text, read_utt2spk
from captionlib.metrics.bleu import corpus_bleu
from captionlib.metrics.cider_d import corpus_cider_d, mean_cider_d_of_sets
from captionlib.metrics.diversity import diversity_metrics
from captionlib.metrics.fluency_score import FLUENCY_KEYS, fluency_scores
from captionlib.metrics.pycoco import java_available, meteor_score, ptb_tokenize
from captionlib.metrics.rouge import corpus_rouge_l
from captionlib.metrics.spice import compute_spice, spice_unavailable_reason
from captionlib.text.cleaner import clean_caption, clean_words
from captionlib.utils.fileio import atomic_write_text, check_writable

PRECISION_KEYS = ("BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr-D", "SPICE", "SPIDEr")
#: Mean CIDEr-D of the sampled captions (``hyp_samples``), seed 001's precision of the samples.
SAMPLE_CIDER_KEY = "CIDEr-D (samples)"
#: Diversity keys computed from sampled captions (``hyp_samples``).
SAMPLE_DIVERSITY_KEYS = ("Div-1", "Div-2", "mBLEU-4")
#: Diversity keys computed from the N-best beam hypotheses (``hyp_nbest``).
NBEST_DIVERSITY_KEYS = ("Div-1 (beams)", "Div-2 (beams)", "mBLEU-4 (beams)")
#: Number of distinct words of the 1-best hypotheses.
VOCAB_KEY = "Vocab"
SCORE_KEYS = PRECISION_KEYS + (SAMPLE_CIDER_KEY,) + SAMPLE_DIVERSITY_KEYS + NBEST_DIVERSITY_KEYS + (VOCAB_KEY,)
NO_SAMPLES_REASON = (
    "no sampled captions (decode with caption_decode --num_diversity_samples N, "
    "score with caption_score --hyp_samples text_samples)"
)
NO_NBEST_REASON = (
    "no N-best beam hypotheses (decode with caption_decode --nbest N, "
    "score with caption_score --hyp_nbest text_nbest)"
)
METRIC_KEYS: Dict[str, Tuple[str, ...]] = {
    "bleu": ("BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4"),
    "bleu_1": ("BLEU-1",),
    "bleu_2": ("BLEU-2",),
    "bleu_3": ("BLEU-3",),
    "bleu_4": ("BLEU-4",),
    "meteor": ("METEOR",),
    "rouge_l": ("ROUGE-L",),
    "cider_d": ("CIDEr-D",),
    "spice": ("SPICE",),
    "spider": ("SPIDEr",),
    "fluency": FLUENCY_KEYS,
}
DEFAULT_METRICS = "bleu,meteor,rouge_l,cider_d,spice,spider"


def parse_metrics(metrics: Union[str, Sequence[str]]) -> List[str]:
    """Score keys requested by a comma-separated metric list (``bleu,meteor,...``).

    Raises:
        ValueError: for an unknown metric name.
    """
    names = metrics.split(",") if isinstance(metrics, str) else list(metrics)
    keys: List[str] = []
    for name in (x.strip().lower() for x in names):
        if not name:
            continue
        if name not in METRIC_KEYS:
            raise ValueError(f"unknown metric {name!r}; choose from {', '.join(METRIC_KEYS)}")
        keys.extend(k for k in METRIC_KEYS[name] if k not in keys)
    if not keys:
        raise ValueError("no metric requested")
    return keys


def tokenize_for_scoring(
    refs: Mapping[str, Sequence[str]], hyps: Mapping[str, str], java: str = "java",
    tmp_dir: Optional[str] = None, hyp_sets: Optional[Mapping[str, Sequence[str]]] = None,
) -> Tuple[Dict[str, List[str]], Dict[str, str], Optional[str], Optional[Dict[str, List[str]]]]:
    """PTB-tokenize references, hypotheses (and optionally several captions per clip) in one Java call.

    Falls back to :func:`captionlib.text.cleaner.clean_caption` when Java is missing.

    Args:
        refs: ``{clip_id: [raw reference, ...]}``; hyps: ``{clip_id: raw hypothesis}``.
        hyp_sets: ``{clip_id: [raw caption, ...]}`` (e.g. sampled captions) of the same clips.

    Returns:
        ``(refs, hyps, fallback reason or None, hyp_sets or None)`` with space-joined
        token strings.
    """
    clips = list(refs)
    sets = hyp_sets or {}
    sentences = [r for c in clips for r in refs[c]] + [hyps[c] for c in clips]
    sentences += [h for c in clips for h in sets.get(c, ())]
    reason = java_available(java)
    if reason is None:
        toks = ptb_tokenize(sentences, java=java, tmp_dir=tmp_dir)
    else:
        reason = f"{reason}: tokenized with captionlib.text.cleaner instead of the PTB tokenizer"
        logging.warning(reason)
        toks = [clean_caption(s) for s in sentences]
    out_refs: Dict[str, List[str]] = {}
    i = 0
    for c in clips:
        out_refs[c] = toks[i : i + len(refs[c])]
        i += len(refs[c])
    out_hyps = {c: toks[i + j] for j, c in enumerate(clips)}
    i += len(clips)
    out_sets: Dict[str, List[str]] = {}
    for c in clips if hyp_sets is not None else ():
        out_sets[c] = toks[i : i + len(sets[c])]
        i += len(sets[c])
    return out_refs, out_hyps, reason, (out_sets if hyp_sets is not None else None)


@dataclasses.dataclass(frozen=True)
class SpiceOptions:
    """How SPICE runs: the arguments of :func:`captionlib.metrics.spice.compute_spice` besides the captions.

    Attributes:
        lib_dir: directory with the CoreNLP 3.6.0 jars (``None``: ``$CAPTIONLIB_SPICE_LIB``).
        cache_dir: SPICE's parse cache (e.g. under the experiment dir); ``None``: no cache.
        heap: JVM maximum heap (``-Xmx``), e.g. ``"8G"``.
        timeout: seconds before the Java process is killed (``None``: no limit).
        threads: SPICE worker threads (``None``: SPICE's own default, all cores).
        rhino_jar: Rhino jar for Java >= 15 (``None``: ``$CAPTIONLIB_RHINO_JAR`` or
            ``/usr/share/java/rhino.jar``).
    """

    lib_dir: Optional[str] = None
    cache_dir: Optional[str] = None
    heap: str = "8G"
    timeout: Optional[float] = 3600.0
    threads: Optional[int] = None
    rhino_jar: Optional[str] = None


def compute_caption_scores(
    refs: Mapping[str, Sequence[str]],
    hyps: Mapping[str, str],
    metrics: Union[str, Sequence[str]] = DEFAULT_METRICS,
    spice: SpiceOptions = SpiceOptions(),
    java: str = "java",
    tmp_dir: Optional[str] = None,
    hyp_samples: Optional[Mapping[str, Sequence[str]]] = None,
    per_clip: Optional[Dict[str, Dict[str, float]]] = None,
    hyp_nbest: Optional[Mapping[str, Sequence[str]]] = None,
    fluency_model: Optional[str] = None,
) -> Dict[str, Any]:
    """Score hypotheses against references (raw captions; tokenized here).

    Args:
        refs: ``{clip_id: [raw reference caption, ...]}`` (>= 1 per clip).
        hyps: ``{clip_id: raw hypothesis caption}``; exactly the clips of ``refs``.
        metrics: comma-separated subset of ``bleu, bleu_1..bleu_4, meteor, rouge_l,
            cider_d, spice, spider, fluency`` (``spider`` also computes CIDEr-D and SPICE,
            ``fluency`` CIDEr-D).
        spice: how SPICE runs (jars, cache, heap, timeout, threads, Rhino); see :class:`SpiceOptions`.
        java: java executable (PTB tokenizer, METEOR, SPICE).
        tmp_dir: temporary files.
        hyp_samples: ``{clip_id: [raw sampled caption, ...]}`` (e.g. 5 per clip) for
            CIDEr-D (samples), Div-1, Div-2, mBLEU-4; ``None``: those are skipped. See the
            module docstring and :func:`diversity_scores`.
        per_clip: if given, filled with ``{"CIDEr-D": {clip_id: score}, "ROUGE-L": {...}}``
            for those of the two that were computed, and ``CIDEr-D-FL`` / ``SPIDEr-FL`` when
            computed (their corpus scores are the means of these; input of
            :mod:`captionlib.metrics.significance`).
        hyp_nbest: ``{clip_id: [raw beam hypothesis, ...]}`` (the N best, best first) for
            Div-1 (beams), Div-2 (beams), mBLEU-4 (beams); ``None``: those are skipped.
        fluency_model: a :class:`~captionlib.metrics.fluency.FluencyDetector` file for
            ``fluency`` (``None``: the rules alone); ignored, with a warning, without ``fluency``.

    Returns:
        ``{key: float|None for key in SCORE_KEYS (+ FLUENCY_KEYS), "skipped": {key: reason}}``.

    Raises:
        ValueError: if the clip sets differ (hypotheses, references, samples or N-best),
            a clip has no reference or no sample, or nothing to score; an unreadable
            ``fluency_model`` (FileNotFoundError if missing).
    """
    _check_inputs(refs, hyps, hyp_samples, hyp_nbest)
    wanted = parse_metrics(metrics)
    detector = _load_detector(fluency_model, wanted)
    clip_scores: Dict[str, Dict[str, float]] = {} if per_clip is None else per_clip
    spice_clips: Dict[str, float] = {}
    result: Dict[str, Any] = {k: None for k in SCORE_KEYS}
    skipped: Dict[str, str] = {k: "not requested (--metrics)" for k in PRECISION_KEYS if k not in wanted}
    tok_refs, tok_hyps, tok_reason, tok_samples = tokenize_for_scoring(
        refs, hyps, java=java, tmp_dir=tmp_dir, hyp_sets=hyp_samples
    )
    if tok_reason:
        skipped["PTB-tokenizer"] = tok_reason
    w_refs = {c: [r.split() for r in rs] for c, rs in tok_refs.items()}
    w_hyps = {c: h.split() for c, h in tok_hyps.items()}
    result.update(_bleu_scores(w_refs, w_hyps, wanted))
    if "ROUGE-L" in wanted:
        result["ROUGE-L"] = _rouge_l_score(w_refs, w_hyps, per_clip)
    result.update(_cider_d_scores(w_refs, w_hyps, tok_samples, wanted, clip_scores, skipped))
    if "METEOR" in wanted:
        result["METEOR"] = _meteor_score(tok_refs, tok_hyps, java, skipped)
    if "SPICE" in wanted or "SPIDEr" in wanted:
        result["SPICE"] = _spice_score(tok_refs, tok_hyps, spice, java, tmp_dir, skipped, spice_clips)
    if "SPIDEr" in wanted:
        result["SPIDEr"] = _spider_score(result["CIDEr-D"], result["SPICE"], skipped)
    result.update(diversity_scores(hyps, hyp_samples, skipped, hyp_nbest))
    if "CIDEr-D-FL" in wanted:
        result.update(fluency_scores(
            hyps, detector, clip_scores.get("CIDEr-D"), spice_clips if result["SPICE"] is not None else None,
            skipped, per_clip, detector_name=fluency_model or ""))
    result["skipped"] = skipped
    return result


def _load_detector(path: Optional[str], wanted: Sequence[str]) -> Any:
    """The detector of ``path`` when fluency is wanted (``None`` without a path); a warning when
    a path is given without the ``fluency`` metric."""
    if path is None:
        return None
    if "CIDEr-D-FL" not in wanted:
        logging.warning("--fluency_model %s is not used: the metric fluency is not requested (--metrics)", path)
        return None
    # torch (slow to import) only for a detector: caption_score without one stays torch-free
    from captionlib.metrics.fluency import FluencyDetector

    return FluencyDetector.load(path)


def _check_inputs(
    refs: Mapping[str, Sequence[str]],
    hyps: Mapping[str, str],
    hyp_samples: Optional[Mapping[str, Sequence[str]]],
    hyp_nbest: Optional[Mapping[str, Sequence[str]]],
) -> None:
    """Raise ValueError unless every clip has references and all inputs cover the same clips (see
    :func:`compute_caption_scores`)."""
    if set(refs) != set(hyps):
        raise ValueError("references and hypotheses must cover the same clips")
    if not refs:
        raise ValueError("nothing to score")
    for c, rs in refs.items():
        if len(rs) == 0:
            raise ValueError(f"clip {c!r} has no reference")
    _check_same_clips(hyps, hyp_samples, "sampled captions")
    _check_same_clips(hyps, hyp_nbest, "N-best beam hypotheses")


def _bleu_scores(w_refs: Mapping[str, List[List[str]]], w_hyps: Mapping[str, List[str]],
                 wanted: Sequence[str]) -> Dict[str, float]:
    """The BLEU-n of ``wanted`` (corpus BLEU, Papineni et al. 2002) of the PTB-tokenized words."""
    if not any(k.startswith("BLEU") for k in wanted):
        return {}
    bleu, _ = corpus_bleu(w_refs, w_hyps, n=4)
    return {f"BLEU-{n}": float(bleu[n - 1]) for n in range(1, 5) if f"BLEU-{n}" in wanted}


def _rouge_l_score(w_refs: Mapping[str, List[List[str]]], w_hyps: Mapping[str, List[str]],
                   per_clip: Optional[Dict[str, Dict[str, float]]]) -> float:
    """Corpus ROUGE-L (Lin 2004, pycocoevalcap's F-measure, beta 1.2); its clip scores go to ``per_clip``."""
    score, clip_scores = corpus_rouge_l(w_refs, w_hyps)
    if per_clip is not None:
        per_clip["ROUGE-L"] = dict(clip_scores)
    return score


def _cider_d_scores(
    w_refs: Mapping[str, List[List[str]]],
    w_hyps: Mapping[str, List[str]],
    tok_samples: Optional[Mapping[str, List[str]]],
    wanted: Sequence[str],
    per_clip: Optional[Dict[str, Dict[str, float]]],
    skipped: Dict[str, str],
) -> Dict[str, float]:
    """CIDEr-D (Vedantam et al. 2015; also when only SPIDEr or fluency is wanted) and CIDEr-D (samples).

    Args:
        w_refs, w_hyps: PTB-tokenized words of the references and hypotheses.
        tok_samples: PTB-tokenized sampled captions, or ``None``.
        wanted: the requested score keys (:func:`parse_metrics`).
        per_clip: receives the clip scores of CIDEr-D.
        skipped: updated in place: CIDEr-D leaves it when computed; the reason
            CIDEr-D (samples) is not.

    Returns:
        The computed scores among ``CIDEr-D`` and :data:`SAMPLE_CIDER_KEY`.
    """
    out: Dict[str, float] = {}
    if "CIDEr-D" in wanted or "SPIDEr" in wanted or "CIDEr-D-FL" in wanted:
        out["CIDEr-D"], clip_scores = corpus_cider_d(w_refs, w_hyps)
        if per_clip is not None:
            per_clip["CIDEr-D"] = dict(clip_scores)
        skipped.pop("CIDEr-D", None)
    if tok_samples is None:
        skipped[SAMPLE_CIDER_KEY] = NO_SAMPLES_REASON
    elif "CIDEr-D" not in wanted:
        skipped[SAMPLE_CIDER_KEY] = "not requested (--metrics: cider_d)"
    else:
        out[SAMPLE_CIDER_KEY], _ = mean_cider_d_of_sets(
            w_refs, {c: [s.split() for s in ss] for c, ss in tok_samples.items()}
        )
    return out


def _meteor_score(tok_refs: Mapping[str, List[str]], tok_hyps: Mapping[str, str], java: str,
                  skipped: Dict[str, str]) -> Optional[float]:
    """METEOR 1.5 (pycocoevalcap's jar), or ``None`` with the reason in ``skipped`` when Java is missing."""
    reason = java_available(java)
    if reason:
        skipped["METEOR"] = f"METEOR needs Java: {reason}"
        return None
    score, _ = meteor_score(tok_refs, tok_hyps)
    return score


def _spice_score(tok_refs: Mapping[str, List[str]], tok_hyps: Mapping[str, str], spice: SpiceOptions, java: str,
                 tmp_dir: Optional[str], skipped: Dict[str, str],
                 clip_out: Optional[Dict[str, float]] = None) -> Optional[float]:
    """SPICE (Anderson et al. 2016), or ``None`` with the reason in ``skipped``.

    The reason is: the jars or Java missing, SPICE failing (also logged as an error), or no F-score
    for some clip. A computed SPICE leaves ``skipped``, and its clip scores go to ``clip_out``.
    """
    reason = spice_unavailable_reason(spice.lib_dir, spice.rhino_jar, java)
    if reason is None:
        try:
            score, clip_scores = compute_spice(
                tok_refs, tok_hyps, cache_dir=spice.cache_dir, spice_lib_dir=spice.lib_dir,
                rhino_jar=spice.rhino_jar, heap=spice.heap, timeout=spice.timeout, java=java,
                threads=spice.threads, tmp_dir=tmp_dir,
            )
            if score != score:  # NaN
                nan = sum(1 for v in clip_scores.values() if v != v)
                reason = f"SPICE returned no F-score for {nan} clips"
            else:
                skipped.pop("SPICE", None)
                if clip_out is not None:
                    clip_out.update(clip_scores)
                return score
        except RuntimeError as e:
            reason = str(e)
            logging.error("SPICE failed: %s", reason)
    skipped["SPICE"] = reason
    return None


def _spider_score(cider_d: Optional[float], spice: Optional[float], skipped: Dict[str, str]) -> Optional[float]:
    """SPIDEr = (CIDEr-D + SPICE) / 2 (Liu et al., ICCV 2017), or ``None`` with the reason in ``skipped``."""
    if spice is not None and cider_d is not None:
        return (cider_d + spice) / 2.0
    skipped["SPIDEr"] = f"SPIDEr needs SPICE: {skipped.get('SPICE', 'not computed')}"
    return None


def _check_same_clips(hyps: Mapping[str, str], sets: Optional[Mapping[str, Sequence[str]]], what: str) -> None:
    """Raise ValueError unless ``sets`` is ``None`` or covers exactly the clips of ``hyps``."""
    if sets is not None and set(sets) != set(hyps):
        missing = sorted(set(hyps) - set(sets))
        extra = sorted(set(sets) - set(hyps))
        raise ValueError(
            f"{what} must cover the scored clips: {len(missing)} missing (e.g. {missing[:3]}), "
            f"{len(extra)} extra (e.g. {extra[:3]})"
        )


def diversity_scores(
    hyps: Mapping[str, str],
    hyp_samples: Optional[Mapping[str, Sequence[str]]],
    skipped: Dict[str, str],
    hyp_nbest: Optional[Mapping[str, Sequence[str]]] = None,
) -> Dict[str, Optional[float]]:
    """``Vocab`` of the 1-best ``hyps``; Div-1/Div-2/mBLEU-4 of ``hyp_samples`` and of ``hyp_nbest`` (seed 001).

    Args:
        hyps: ``{clip_id: raw 1-best caption}``.
        hyp_samples: ``{clip_id: [raw sampled caption, ...]}`` for exactly the clips of
            ``hyps``, or ``None`` (then :data:`SAMPLE_DIVERSITY_KEYS` are ``None`` with a reason).
        skipped: updated in place with the reason of every ``None``.
        hyp_nbest: ``{clip_id: [raw beam hypothesis, ...]}`` for :data:`NBEST_DIVERSITY_KEYS`,
            or ``None``.

    Returns:
        ``{"Vocab", *SAMPLE_DIVERSITY_KEYS, *NBEST_DIVERSITY_KEYS}`` -> float or ``None``.

    Raises:
        ValueError: if the sampled or N-best clips differ from the hypothesis clips.
    """
    _check_same_clips(hyps, hyp_samples, "sampled captions")
    _check_same_clips(hyps, hyp_nbest, "N-best beam hypotheses")
    out: Dict[str, Optional[float]] = {
        VOCAB_KEY: float(len({w for h in hyps.values() for w in clean_caption(h).split()}))
    }
    out.update(_set_diversity(hyp_samples, SAMPLE_DIVERSITY_KEYS, NO_SAMPLES_REASON, "sampled captions", skipped))
    out.update(_set_diversity(hyp_nbest, NBEST_DIVERSITY_KEYS, NO_NBEST_REASON, "beam hypotheses", skipped))
    return out


def _set_diversity(
    sets: Optional[Mapping[str, Sequence[str]]], keys: Sequence[str], absent: str, what: str,
    skipped: Dict[str, str],
) -> Dict[str, Optional[float]]:
    """Div-1, Div-2, mBLEU-4 of ``{clip_id: [raw caption, ...]}`` under ``keys`` (in that order)."""
    out: Dict[str, Optional[float]] = {k: None for k in keys}
    if sets is None:
        skipped.update({k: absent for k in keys})
        return out
    words = {c: [clean_caption(s).split() for s in sets[c]] for c in sorted(sets)}
    div = diversity_metrics(words)
    sizes = sorted({len(s) for s in words.values()})
    for key, name in zip(keys, SAMPLE_DIVERSITY_KEYS):
        if div[name] != div[name]:  # NaN
            skipped[key] = f"{name} needs at least 2 {what} per clip (got {sizes})"
        else:
            out[key] = float(div[name])
    return out


# ----------------------------------------------------------------------------- files
def read_references(ref_dir: str) -> Dict[str, List[str]]:
    """``{clip_id: [raw caption, ...]}`` from a data dir's ``text`` and ``utt2spk`` (or ``spk2utt``).

    Raises:
        FileNotFoundError: without ``text`` or without both ``utt2spk`` and ``spk2utt``.
        ValueError: for an empty caption or one without words after cleaning, a duplicate
            caption id (naming file and line, see :mod:`captionlib.io.datadir`), a caption id
            without clip, or a caption id of utt2spk/spk2utt without a line in ``text``.
    """
    text_path = os.path.join(ref_dir, "text")
    if not os.path.isfile(text_path):
        raise FileNotFoundError(f"{text_path}: no such file (reference data dir)")
    captions = read_text(text_path)
    utt2spk_path = os.path.join(ref_dir, "utt2spk")
    spk2utt_path = os.path.join(ref_dir, "spk2utt")
    if os.path.isfile(utt2spk_path):
        utt2clip, map_path = read_utt2spk(utt2spk_path), utt2spk_path
    elif os.path.isfile(spk2utt_path):
        map_path = spk2utt_path
        utt2clip = {u: clip for clip, utts in read_spk2utt(spk2utt_path).items() for u in utts}
    else:
        raise FileNotFoundError(f"{ref_dir}: needs utt2spk or spk2utt to group captions by clip")
    # the two files must list the same captions (as validate_data_dir.sh checks): a caption
    # missing from text would silently score the clip against fewer references
    missing = [u for u in utt2clip if u not in captions]
    if missing:
        raise ValueError(f"{map_path}: {len(missing)} caption ids have no line in {text_path}, e.g. {missing[0]!r} "
                         f"(fix the data dir, e.g. with utils/fix_data_dir.sh)")
    refs: Dict[str, List[str]] = {}
    for utt, caption in captions.items():
        clip = utt2clip.get(utt)
        if clip is None:
            raise ValueError(f"{text_path}: caption id {utt!r} is not in {map_path}")
        if not clean_words(caption):
            raise ValueError(f"{text_path}: caption {utt!r} has no words after cleaning: {caption!r}")
        refs.setdefault(clip, []).append(caption)
    return refs


def read_hypotheses(path: str) -> Dict[str, str]:
    """``{clip_id: caption}`` from a decode ``text`` file (``<clip-id> <caption>``; may be empty).

    Raises:
        ValueError: for a duplicate clip id or a malformed line, naming the file and line.
    """
    return read_scp(path, allow_empty_value=True)


#: Separator of a sample id ``<clip-id>#<k>`` in ``text_samples`` and ``text_nbest``.
SAMPLE_SEP = "#"


def sample_id(clip: str, k: int) -> str:
    """Id of the k-th (1-based) sample of ``clip`` in ``text_samples``: ``<clip>#<k>``."""
    return f"{clip}{SAMPLE_SEP}{k}"


def read_samples(path: Union[str, Path]) -> Dict[str, List[str]]:
    """Read a ``text_samples`` (or ``text_nbest``) file into ``{clip_id: [caption, ...]}`` (ordered by k).

    Every clip must have the same ids ``#1`` .. ``#N`` (``caption_decode`` writes N per clip):
    diversity over 1 caption of one clip and 5 of another would be no score of either.

    Raises:
        ValueError: for a malformed line, a duplicate id, an id without ``#<k>``, a UTF-8
            byte-order mark or a control character, naming the file and line; for a clip
            whose ids are not ``#1`` .. ``#N`` with the N of the file's first clip, naming the
            file, the clip and its ids.
    """
    grouped: Dict[str, Dict[int, str]] = {}
    for lineno, line in iter_lines(path):  # a BOM or a control character is an error naming the line, as in text
        if not line.strip():
            continue
        key, caption = (line.split(maxsplit=1) + [""])[:2]  # the id ends at the first whitespace (a tab too)
        clip, sep, k = key.rpartition(SAMPLE_SEP)
        if not sep or not clip or not k.isdigit():
            raise ValueError(f"{path}:{lineno}: expected '<clip-id>{SAMPLE_SEP}<k> <caption>', got {line!r}")
        per = grouped.setdefault(clip, {})
        if int(k) in per:
            raise ValueError(f"{path}:{lineno}: duplicate sample id {key!r}")
        per[int(k)] = caption.strip()
    if grouped:
        first = next(iter(grouped))
        want = list(range(1, len(grouped[first]) + 1))
        for clip, per in grouped.items():
            if sorted(per) != want:
                ids = ", ".join(f"{SAMPLE_SEP}{k}" for k in sorted(per))
                raise ValueError(f"{path}: clip {clip} has the ids {ids}, expected {SAMPLE_SEP}1 .. "
                                 f"{SAMPLE_SEP}{len(want)} as clip {first} (the same number of captions for "
                                 "every clip)")
    return {c: [per[k] for k in sorted(per)] for c, per in grouped.items()}


def format_result(result: Mapping[str, Any], header: str = "") -> str:
    """Human-readable ``result.txt``: one ``<metric> <value>`` line per score key."""
    lines = [f"# {header}"] if header else []
    skipped = result.get("skipped", {})
    for k in SCORE_KEYS + tuple(k for k in FLUENCY_KEYS if k in result):
        v = result.get(k)
        if v is None:
            lines.append(f"{k:<8s} skipped: {skipped.get(k, '')}")
        elif k == VOCAB_KEY:
            lines.append(f"{k:<8s} {int(v)}")
        else:
            lines.append(f"{k:<8s} {v:.4f}")
    for k, reason in skipped.items():
        if k not in SCORE_KEYS and k not in result:
            lines.append(f"# note ({k}): {reason}")
    return "\n".join(lines) + "\n"


def score_caption_files(
    ref_dir: str,
    hyp: str,
    output: str,
    metrics: Union[str, Sequence[str]] = DEFAULT_METRICS,
    spice: SpiceOptions = SpiceOptions(),
    hyp_samples: Optional[str] = None,
    hyp_nbest: Optional[str] = None,
    java: str = "java",
    tmp_dir: Optional[str] = None,
    fluency_model: Optional[str] = None,
) -> Dict[str, Any]:
    """Score a decode ``text`` file; write ``score.json``, ``result.txt`` and ``per_clip.json``.

    Args:
        ref_dir: data dir with ``text`` and ``utt2spk`` (or ``spk2utt``).
        hyp: ``<clip-id> <caption>`` file.
        output: path of ``score.json``; ``result.txt`` and ``per_clip.json`` are written
            beside it. ``per_clip.json`` is ``{"CIDEr-D": {clip_id: score}, "ROUGE-L":
            {...}}`` for the metrics of the two that were computed (``{}`` if none), and
            ``CIDEr-D-FL`` / ``SPIDEr-FL`` when computed; each corpus score is the mean of its
            per-clip scores. It feeds the paired bootstrap
            of :mod:`captionlib.metrics.significance`.
        metrics: see :func:`compute_caption_scores`.
        spice: how SPICE runs (:class:`SpiceOptions`); its ``cache_dir`` defaults to
            ``<dir of output>/spice_cache``.
        hyp_samples: ``text_samples`` of ``caption_decode --num_diversity_samples`` (ids
            ``<clip-id>#<k>``) for CIDEr-D (samples), Div-1, Div-2, mBLEU-4; ``None``: skipped.
        hyp_nbest: ``text_nbest`` of ``caption_decode --nbest`` (ids ``<clip-id>#<rank>``) for
            Div-1 (beams), Div-2 (beams), mBLEU-4 (beams); ``None``: skipped.
        java, tmp_dir, fluency_model: see :func:`compute_caption_scores`.

    Returns:
        The score dict written to ``score.json``.

    Raises:
        ValueError: if a hypothesis clip has no references or a reference clip has no
            hypothesis (naming both files), if the samples or N-best do not cover the same
            clips (naming the file), or for malformed files; an ``output`` that cannot be
            written (checked first, before METEOR and SPICE run).
    """
    check_writable(output)
    refs = read_references(ref_dir)
    hyps = read_hypotheses(hyp)
    text_path = os.path.join(ref_dir, "text")
    extra = sorted(set(hyps) - set(refs))
    if extra:
        raise ValueError(
            f"{len(extra)} clips of {hyp} have no reference in {text_path}, e.g. {extra[:5]}"
        )
    missing = sorted(set(refs) - set(hyps))
    if missing:
        raise ValueError(
            f"{len(missing)} clips of {text_path} are missing from {hyp}, e.g. {missing[:5]}"
        )
    samples, nbest = (None if p is None else _read_sets_of(p, hyps, hyp) for p in (hyp_samples, hyp_nbest))
    out_dir = os.path.dirname(os.path.abspath(output))
    os.makedirs(out_dir, exist_ok=True)
    if spice.cache_dir is None:
        spice = dataclasses.replace(spice, cache_dir=os.path.join(out_dir, "spice_cache"))
    per_clip: Dict[str, Dict[str, float]] = {}
    result = compute_caption_scores(
        refs, hyps, metrics=metrics, spice=spice, java=java, tmp_dir=tmp_dir, hyp_samples=samples,
        per_clip=per_clip, hyp_nbest=nbest, fluency_model=fluency_model,
    )
    atomic_write_text(output, json.dumps(result, indent=2) + "\n")
    atomic_write_text(os.path.join(out_dir, "per_clip.json"), json.dumps(per_clip, indent=1, sort_keys=True) + "\n")
    header = f"{hyp} vs {ref_dir} ({len(hyps)} clips)"
    atomic_write_text(os.path.join(out_dir, "result.txt"), format_result(result, header))
    for line in format_result(result, header).splitlines():
        logging.info(line)
    return result


def _read_sets_of(path: str, hyps: Mapping[str, str], hyp: str) -> Dict[str, List[str]]:
    """:func:`read_samples` of ``path``, checked to cover the clips of ``hyps`` (read from ``hyp``)."""
    sets = read_samples(path)
    if set(sets) != set(hyps):
        bad = sorted(set(sets) ^ set(hyps))
        raise ValueError(f"{path} and {hyp} cover different clips ({len(bad)} differ, e.g. {bad[:5]})")
    return sets
