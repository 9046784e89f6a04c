"""Collect the ``score.json`` files of an experiment tree into a ``RESULTS.md`` table.

The table has one row per (model dir, decode tag, test set), found as
``<exp_dir>/**/decode_<tag>/<set>/score.json`` (the layout written by stages 8-9 of
``caption.sh``; word-level ensembles live in ``<exp_dir>/ensemble_<tag>/``). Columns: the
precision metrics (BLEU-1..4, METEOR, ROUGE-L, CIDEr-D, SPICE, SPIDEr), then seed 001
table 4: the mean CIDEr-D of the sampled captions, Div-1, Div-2, mBLEU-4 of the samples
("rs") and of the N-best beam hypotheses ("bs"), then Vocab, ``seeds`` and ``paper``.
The ``paper`` of an RL model comes from its objective class, with the reward it was trained
with, read from its ``config.yaml`` (``rl_algo``, ``rl_conf``, ``reward``; :func:`model_paper`).

Runs of several training seeds (``_seed<N>`` in the dir names, see :func:`seed_group`)
are merged into one row per (seed group, decode tag, test set) showing ``mean ± std`` over
the seeds (sample std, ddof = 1). Below the table, every RL model nested in an XE dir is
compared with that XE model by a paired bootstrap on per-clip CIDEr-D
(:mod:`captionlib.metrics.significance`, Koehn 2004), when both have a ``per_clip.json``.

Below the table it lists the environments that trained the models (code revision, torch,
Python, device), from each model dir's ``env.yaml`` (:mod:`captionlib.utils.provenance`).
Its content depends only on the experiment files, so re-running it gives the same bytes: no
date or host is written, and the bootstrap has a fixed seed.
"""

import json
import logging
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from captionlib.metrics.fluency_score import FLUENCY_KEYS
from captionlib.metrics.significance import BootstrapResult, has_per_clip, paired_bootstrap_files
from captionlib.rl import objective_paper
from captionlib.utils.fileio import read_yaml_mapping
from captionlib.utils.provenance import describe, run_environments

#: Metric keys of ``score.json`` shown in the table, in column order.
METRIC_KEYS = (
    "BLEU-1",
    "BLEU-2",
    "BLEU-3",
    "BLEU-4",
    "METEOR",
    "ROUGE-L",
    "CIDEr-D",
    "SPICE",
    "SPIDEr",
    "CIDEr-D (samples)",
    "Div-1",
    "Div-2",
    "mBLEU-4",
    "Div-1 (beams)",
    "Div-2 (beams)",
    "mBLEU-4 (beams)",
    "Vocab",
)
#: The fluency columns (:data:`captionlib.metrics.fluency_score.FLUENCY_KEYS`) are shown after
#: :data:`METRIC_KEYS` where some row has them.
FLUENCY_NOTE = (
    "Fluency (`--metrics ...,fluency`, docs/fluency.md): `FER (rules)` / `FER (detector)`: the fraction "
    "of 1-best captions the rule checks / the fluency error detector flag; `CIDEr-D-FL`, `SPIDEr-FL`: a "
    "flagged caption's score times 0.1, averaged (the detector's flags where it ran, else the rules').")
#: Reason shown for a key a ``score.json`` does not have at all.
ABSENT_REASON = "not in score.json (scored before this metric existed; re-run the scoring stage)"
#: Keys shown as integers.
INTEGER_KEYS = ("Vocab",)

#: Source of each kind of model that is not an RL objective, by the name prefix of its dir
#: (the ``paper`` column; an RL model's comes from its objective class, :func:`captionlib.rl.objective_paper`).
PAPERS = {
    "xe": "Xu et al. 2020 (seed 000), XE",
    "ensemble": "Xu et al. 2020 (word-level ensemble)",
    "corpus_prior": "most frequent training caption",
}
#: Source of an XE model, by the ``(encoder, decoder)`` of its ``config.yaml`` (``"*"``: any);
#: the first match wins, and a config without the keys is seed 000's ``crnn`` + ``gru``.
XE_PAPERS = (
    (("crnn", "gru"), PAPERS["xe"]),
    (("*", "att_lstm"), "Anderson et al. 2018 (Top-Down attention), XE"),
    (("*", "transformer"), "Vaswani et al. 2017 (Transformer decoder; CoNeTTE / DCASE 2024 baseline), XE"),
    (("linear", "*"), "Vinyals et al. 2015 (Show-and-Tell), XE"),
    (("rnn", "*"), "Venugopalan et al. 2015 (S2VT-style, seed 004), XE"),
)
#: Metric, resamples and seed of the significance section.
SIGNIFICANCE_METRIC = "CIDEr-D"
NUM_RESAMPLES = 10000
BOOTSTRAP_SEED = 0
#: a bootstrap over fewer clips is printed with a warning
MIN_BOOTSTRAP_CLIPS = 30
ALPHA = 0.05
#: Appended to the row name of a run without a seed token named as a merged seed group.
NO_SEED = " (no seed)"
#: A ``_seed<N>`` token of a dir name: ``_seed`` + digits, not followed by a letter or digit.
_SEED_TOKEN = re.compile(r"_seed([0-9]+)(?![0-9A-Za-z])")


def seed_group(model_path: str) -> Tuple[str, Optional[int]]:
    """Split a model dir into its seed group and seed, by its ``_seed<N>`` name tokens.

    Every ``_seed<N>`` token (followed by ``_``, another non-alphanumeric character or the
    end of the name) is removed from each ``/``-separated component.

    Examples:
        >>> seed_group("xe_small_logmel_word_seed0/scst_train_scst_small_seed0")
        ('xe_small_logmel_word/scst_train_scst_small', 0)
        >>> seed_group("ensemble_seed2")
        ('ensemble', 2)
        >>> seed_group("corpus_prior")
        ('corpus_prior', None)

    Returns:
        ``(group name, seed)``; the seed is ``None`` when the path has no seed token.

    Raises:
        ValueError: naming the path, if its components carry different seeds.
    """
    seeds = set()
    parts = []
    for part in model_path.split("/"):
        seeds.update(int(x) for x in _SEED_TOKEN.findall(part))
        parts.append(_SEED_TOKEN.sub("", part))
    if len(seeds) > 1:
        raise ValueError(f"{model_path}: its dir names carry different seeds {sorted(seeds)}; use one seed per run")
    return "/".join(parts), (seeds.pop() if seeds else None)


def model_kind(model_path: str, config: Optional[Mapping[str, Any]] = None) -> Optional[str]:
    """Kind of model of a dir: the ``rl_algo`` of an RL model, as its ``config.yaml`` (``config``)
    names it, else a key of :data:`PAPERS` by the prefix of the dir's last path component.

    Returns:
        e.g. ``"scst"`` (config ``rl_algo: scst``), ``"xe"`` (``xe_a``), ``"ensemble"``
        (``ensemble_seed2``), ``"corpus_prior"``, or ``None`` for any other dir.
    """
    if config and config.get("rl_algo"):
        return str(config["rl_algo"])
    last = model_path.rstrip("/").rsplit("/", 1)[-1]
    for kind in PAPERS:
        if last == kind or last.startswith(kind + "_"):
            return kind
    return None


def is_rl_model(config: Optional[Mapping[str, Any]]) -> bool:
    """Whether a model dir's ``config.yaml`` (``config``) is an RL run's: it names an ``rl_algo``."""
    return bool(config and config.get("rl_algo"))


def model_paper(model_path: str, config: Optional[Mapping[str, Any]] = None) -> str:
    """The ``paper`` cell of a model dir.

    Args:
        model_path: model dir relative to the exp dir.
        config: the model dir's ``config.yaml`` (``None`` if it has none).

    Returns:
        For an RL model (:func:`is_rl_model`), its objective class's description with its reward
        (:func:`captionlib.rl.objective_paper`, e.g. ``"Liu et al. 2017 (MC-PG), reward CIDEr-D"``).
        An XE model: :data:`XE_PAPERS` by its encoder and decoder (``"XE (<encoder> + <decoder>)"``
        for a pair not listed). Other models: :data:`PAPERS` (empty for an unknown kind).
    """
    if is_rl_model(config):
        return objective_paper(config)
    kind = model_kind(model_path) or ""
    config = config or {}
    if kind == "xe":
        model = (config.get("encoder", "crnn"), config.get("decoder", "gru"))
        for pattern, paper in XE_PAPERS:
            if all(p in ("*", m) for p, m in zip(pattern, model)):
                return paper
        return f"XE ({model[0]} + {model[1]})"
    return PAPERS.get(kind, "")


def read_model_config(model_dir: Union[str, Path]) -> Optional[Dict[str, Any]]:
    """The ``config.yaml`` of a model dir as a dict, ``None`` when there is none.

    Raises:
        ValueError: naming the file, if it is not a YAML mapping.
    """
    return read_yaml_mapping(Path(model_dir) / "config.yaml", "config")


@dataclass
class ScoreRow:
    """The scores of one decode directory.

    Attributes:
        model: model dir relative to the exp dir (e.g. ``xe_train_xe_logmel_word/scst_train_scst``).
        decode_tag: the decode dir name without its ``decode_`` prefix.
        test_set: name of the scored set.
        scores: metric -> value (``None`` when skipped or absent).
        skipped: metric -> reason, as written by ``caption_score``.
        score_json: the file read (``per_clip.json`` is looked for beside it).
        paper: the ``paper`` cell (:func:`model_paper` with the model dir's ``config.yaml``).
        rl: whether the model dir is an RL run's (:func:`is_rl_model` of its ``config.yaml``).
        environments: the model dir's ``env.yaml`` files, first to last
            (:func:`captionlib.utils.provenance.run_environments`; ``[]``: a trained model
            dir without one), ``None`` for a dir without ``config.yaml`` (not trained:
            ensembles, the corpus prior).
    """

    model: str
    decode_tag: str
    test_set: str
    scores: Dict[str, Optional[float]] = field(default_factory=dict)
    skipped: Dict[str, str] = field(default_factory=dict)
    score_json: Optional[Path] = None
    paper: str = ""
    environments: Optional[List[Dict[str, Any]]] = None
    rl: bool = False


@dataclass
class TableRow:
    """One row of the table: the score rows of one (seed group, decode tag, test set).

    Attributes:
        model: first cell: the model dir for a single run, the seed group for >= 2 seeds.
        decode_tag, test_set: as in :class:`ScoreRow`.
        runs: the score rows merged here, by seed (one for a single run).
    """

    model: str
    decode_tag: str
    test_set: str
    runs: List[ScoreRow]


@dataclass
class SignificanceRow:
    """Paired bootstraps of one RL seed group against its XE models on one decode/test set.

    Attributes:
        model: the RL model (seed group, or dir for an unseeded run).
        baseline: the XE model it was fine-tuned from (same form).
        decode_tag, test_set: as in :class:`ScoreRow`.
        seeds: seed of each comparison (``None``: unseeded run).
        results: one :class:`captionlib.metrics.significance.BootstrapResult` per seed
            (a = XE, b = RL).
        bootstrap_seed: seed of the bootstrap resampling.
        left_out: the runs of the group that could not be compared, each as
            ``"seed N: <file> has no <metric>"`` (a ``per_clip.json`` missing, or scored without
            the metric), so that a table of 2 seeds out of 3 says which one is missing.
    """

    model: str
    baseline: str
    decode_tag: str
    test_set: str
    seeds: List[Optional[int]]
    results: List[BootstrapResult]
    bootstrap_seed: int = BOOTSTRAP_SEED
    left_out: List[str] = field(default_factory=list)


def _lacking_per_clip(files: Sequence[Path], metric: str, run_seed: Optional[int]) -> Optional[str]:
    """``"seed N: <file> has no <metric>"`` for the first of ``files`` without per-clip scores of
    ``metric`` (see :attr:`SignificanceRow.left_out`), else ``None``."""
    for f in files:
        if not has_per_clip(f, metric):
            label = "no seed" if run_seed is None else f"seed {run_seed}"
            return f"{label}: {f} has no {metric}" + ("" if f.is_file() else " (no such file)")
    return None


def load_score_row(score_json: Union[str, Path], exp_dir: Union[str, Path]) -> ScoreRow:
    """Read one ``<model>/decode_<tag>/<set>/score.json`` below ``exp_dir``.

    Raises:
        ValueError: naming the file, if it is not a JSON object of numbers (not infinite) and
            nulls, or if the model dir's ``config.yaml`` or ``env.yaml`` is not a YAML mapping.
    """
    score_json = Path(score_json)
    set_dir = score_json.parent
    decode_dir = set_dir.parent
    model_dir = decode_dir.parent
    try:
        with open(score_json, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{score_json}: cannot read score file: {e}") from e
    if not isinstance(obj, dict):
        raise ValueError(f"{score_json}: expected a JSON object, got {type(obj).__name__}")
    scores: Dict[str, Optional[float]] = {}
    for key in METRIC_KEYS + FLUENCY_KEYS:
        value = obj.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or math.isinf(value)):  # inf: a traceback in the mean and std
            raise ValueError(f"{score_json}: {key} must be a number (NaN allowed, not infinity) or null, "
                             f"got {value!r}")
        scores[key] = None if value is None else float(value)
    skipped = obj.get("skipped") or {}
    if not isinstance(skipped, dict):
        raise ValueError(f"{score_json}: 'skipped' must be an object, got {skipped!r}")
    skipped = {str(k): str(v) for k, v in skipped.items()}
    for key in METRIC_KEYS:
        if key not in obj and key not in skipped:
            skipped[key] = ABSENT_REASON
    model = model_dir.relative_to(Path(exp_dir)).as_posix()
    decode_tag = decode_dir.name[len("decode_") :]
    config = read_model_config(model_dir)
    return ScoreRow(
        model=model,
        decode_tag=decode_tag,
        test_set=set_dir.name,
        scores=scores,
        skipped=skipped,
        score_json=score_json,
        paper=model_paper(model, config),
        environments=None if config is None else run_environments(model_dir),
        rl=is_rl_model(config),
    )


def collect_scores(exp_dir: Union[str, Path]) -> List[ScoreRow]:
    """Find every ``**/decode_*/*/score.json`` below ``exp_dir``, sorted by (model, tag, set)."""
    exp_dir = Path(exp_dir)
    rows = [
        load_score_row(p, exp_dir)
        for p in exp_dir.glob("**/decode_*/*/score.json")
        if p.is_file()
    ]
    rows.sort(key=lambda r: (r.model, r.decode_tag, r.test_set))
    return rows


def group_seeds(rows: Sequence[ScoreRow]) -> List[TableRow]:
    """Merge the score rows of the seeds of one (seed group, decode tag, test set).

    Rows without a seed token are never merged; such a run named as a merged seed group (a
    run without ``--seeds`` beside runs with them) is named ``<dir> (no seed)``. Sorted by
    (first cell, tag, set); the runs of a row by seed.

    Raises:
        ValueError: from :func:`seed_group`; two runs of one row with the same seed
            (``_seed1`` and ``_seed01``), naming both.
    """
    groups: Dict[tuple, List[ScoreRow]] = {}
    for r in rows:
        group, seed = seed_group(r.model)
        name = r.model if seed is None else group
        groups.setdefault((name, seed is None, r.decode_tag, r.test_set), []).append(r)
    out = []
    for (name, _, tag, test_set), runs in groups.items():
        runs = sorted(runs, key=lambda r: (seed_group(r.model)[1] or 0, r.model))
        for a, b in zip(runs, runs[1:]):
            if seed_group(a.model)[1] is not None and seed_group(a.model)[1] == seed_group(b.model)[1]:
                raise ValueError(f"{a.model} and {b.model} are two runs of seed {seed_group(a.model)[1]}: "
                                 "one row would count them as two seeds; rename or remove one")
        model = runs[0].model if len(runs) == 1 else name
        out.append(TableRow(model=model, decode_tag=tag, test_set=test_set, runs=runs))
    merged = {t.model for t in out if len(t.runs) > 1}
    for t in out:  # xe_a beside xe_a_seed0 + xe_a_seed1: two rows "xe_a" otherwise
        if t.model in merged and len(t.runs) == 1:
            t.model += NO_SEED
    out.sort(key=lambda t: (t.model, t.decode_tag, t.test_set))
    return out


def _cell(value: Optional[float], key: str = "") -> str:
    if value is None:
        return "skipped"
    if math.isnan(value):
        return "nan"
    if key in INTEGER_KEYS:
        return str(int(round(value)))
    return f"{value:.3f}"


def _mean_std_cell(values: Sequence[Optional[float]], key: str = "") -> str:
    """One value as :func:`_cell`; >= 2 as ``mean ± std`` (sample std), unless one is skipped/nan."""
    if len(values) == 1:
        return _cell(values[0], key)
    if any(v is None for v in values):
        return "skipped"
    if any(math.isnan(v) for v in values):
        return "nan"
    mean, std = statistics.fmean(values), statistics.stdev(values)
    digits = 1 if key in INTEGER_KEYS else 3
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def decode_config_of(decode_tag: str) -> str:
    """The decode config part of a decode tag: ``decode_greedy_model_valid.bleu_4.best`` ->
    ``decode_greedy`` (caption.sh names decode dirs ``decode_<config><args>_model_<model file>``)."""
    return decode_tag.rsplit("_model_", 1)[0]


def collect_significance(
    rows: Sequence[ScoreRow],
    metric: str = SIGNIFICANCE_METRIC,
    num_resamples: int = NUM_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> List[SignificanceRow]:
    """Paired bootstrap of every RL model against the XE model whose dir it is nested in.

    For each RL row (a model dir whose ``config.yaml`` names an ``rl_algo``, its first path
    component an XE dir ``xe_*``; staged RL dirs nest
    deeper, e.g. ``xe_a/reinforce_plus_b/multitask_c``, and are compared with that XE model)
    and the XE row of the same test set and decode tag (or, when the XE dir was decoded with
    another model file, e.g. seed 000's ``valid.bleu_4.best.pth``, its only row of the same
    decode config: :func:`decode_config_of`), when both have a ``per_clip.json`` holding
    ``metric`` beside their ``score.json``:
    :func:`captionlib.metrics.significance.paired_bootstrap_files` with XE = a and RL = b
    (one-sided p of "RL better than XE"). A group none of whose runs has per-clip scores (older
    runs) is left out; a run without them in a group with others is named in its ``left_out``.

    Returns:
        One :class:`SignificanceRow` per (RL seed group, decode tag, test set), sorted.

    Raises:
        ValueError: naming the files, if a ``per_clip.json`` is unreadable or the XE and
            RL files cover different clips.
    """
    by_key = {(r.model, r.decode_tag, r.test_set): r for r in rows}
    by_config: Dict[tuple, List[ScoreRow]] = {}
    for r in rows:
        by_config.setdefault((r.model, decode_config_of(r.decode_tag), r.test_set), []).append(r)
    groups: Dict[tuple, SignificanceRow] = {}
    for r in rows:
        if "/" not in r.model or not r.rl:
            continue
        parent = r.model.split("/", 1)[0]
        base = by_key.get((parent, r.decode_tag, r.test_set))
        if base is None:
            same_config = by_config.get((parent, decode_config_of(r.decode_tag), r.test_set), [])
            base = same_config[0] if len(same_config) == 1 else None
        if model_kind(parent) != "xe" or base is None or None in (r.score_json, base.score_json):
            continue
        rl_file = r.score_json.with_name("per_clip.json")
        xe_file = base.score_json.with_name("per_clip.json")
        group, run_seed = seed_group(r.model)
        name, base_name = (r.model, parent) if run_seed is None else (group, seed_group(parent)[0])
        sig = groups.setdefault(
            (name, run_seed is None, r.decode_tag, r.test_set),
            SignificanceRow(name, base_name, r.decode_tag, r.test_set, [], [], bootstrap_seed=seed),
        )
        lacking = _lacking_per_clip([xe_file, rl_file], metric, run_seed)
        if lacking:
            sig.left_out.append(lacking)
            continue
        sig.seeds.append(run_seed)
        sig.results.append(paired_bootstrap_files(xe_file, rl_file, metric=metric, num_resamples=num_resamples,
                                                  seed=seed))
    seeded = {key[0] for key in groups if not key[1]}
    out = []
    for (name, unseeded, _, _), sig in groups.items():
        if unseeded and name in seeded:  # as the table names it (group_seeds)
            sig.model, sig.baseline = sig.model + NO_SEED, sig.baseline + NO_SEED
        if not sig.results:  # no run of the group has per-clip scores (older runs): left out
            continue
        order = sorted(range(len(sig.seeds)), key=lambda i: sig.seeds[i] or 0)
        sig.seeds = [sig.seeds[i] for i in order]
        sig.results = [sig.results[i] for i in order]
        out.append(sig)
    out.sort(key=lambda s: (s.model, s.decode_tag, s.test_set))
    return out


def parse_compare(spec: str) -> Tuple[str, str]:
    """``"<baseline>=<model>"`` (seed-group names of the table, e.g.
    ``xe_a_logmel_word=xe_b_logmel_word/scst_train_scst``) as a pair. Either name may end in
    ``@<decode>``, as the table's decode column names it (e.g. ``xe_a_logmel_word@decode_rerank``): that
    side's runs of that decode only, so that two decodings (re-ranked against greedy) or a
    decoding of one model against another model's can be compared.

    Raises:
        ValueError: not two non-empty names around one ``=``.
    """
    base, sep, other = spec.partition("=")
    if not sep or not base.strip() or not other.strip() or "=" in other:
        raise ValueError(f"--compare {spec!r}: expected <baseline model>=<model> (seed-group names of RESULTS.md)")
    return base.strip(), other.strip()


def collect_comparisons(
    rows: Sequence[ScoreRow],
    pairs: Sequence[Tuple[str, str]],
    metric: str = SIGNIFICANCE_METRIC,
    num_resamples: int = NUM_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> List[SignificanceRow]:
    """Paired bootstraps of chosen models against chosen baselines (e.g. a pretrained encoder
    against the same model trained from scratch), seed by seed: for each ``(baseline, model)``
    pair of seed-group names (a ``<name> (no seed)`` of the table: only its run without a seed
    token), every run of ``model`` and the run of ``baseline`` with the same seed, decode tag
    and test set, both with a ``per_clip.json`` holding ``metric``, as
    :func:`collect_significance` compares RL with XE (a = baseline, b = model). A pair that
    matches no run is logged and left out (its models are not trained yet).

    Raises:
        ValueError: as :func:`collect_significance`.
    """
    runs: Dict[tuple, ScoreRow] = {}
    for r in rows:
        group, run_seed = seed_group(r.model)
        runs[(group, run_seed, r.decode_tag, r.test_set)] = r
    out = []
    for base_name, other_name in pairs:
        # a "<name> (no seed)" of the table: the run of that name without a seed token
        unseeded = base_name.endswith(NO_SEED) or other_name.endswith(NO_SEED)
        # "<name>@<decode dir>": that side's decode only (else the same decode on both sides)
        (base, _, base_tag), (other, _, other_tag) = (n.partition("@") for n in (base_name, other_name))
        base_tag, other_tag = base_tag or None, other_tag or None
        base, other = (n[:-len(NO_SEED)] if n.endswith(NO_SEED) else n for n in (base, other))
        # a plain name beside seeded runs of it is their seed group, as in the table
        seeded = any(key[0] == other and key[1] is not None for key in runs)
        groups: Dict[tuple, SignificanceRow] = {}
        for (group, run_seed, tag, test_set), r in sorted(runs.items(),
                                                          key=lambda kv: (kv[0][2], kv[0][3], kv[0][1] or 0)):
            b = runs.get((base, run_seed, base_tag or tag, test_set))
            if (group != other or b is None or None in (r.score_json, b.score_json)
                    or other_tag not in (None, tag)
                    or (run_seed is not None if unseeded else run_seed is None and seeded)):
                continue
            files = [x.score_json.with_name("per_clip.json") for x in (b, r)]
            sig = groups.setdefault((tag, test_set), SignificanceRow(other_name, base_name, tag, test_set, [], [],
                                                                    bootstrap_seed=seed))
            lacking = _lacking_per_clip(files, metric, run_seed)
            if lacking:
                sig.left_out.append(lacking)
                continue
            sig.seeds.append(run_seed)
            sig.results.append(paired_bootstrap_files(*files, metric=metric, num_resamples=num_resamples, seed=seed))
        compared = [g for g in groups.values() if g.results]
        if not compared:
            logging.warning("--compare %s=%s: no run of the two with the same seed, decode and set (with per-clip "
                            "scores); left out", base_name, other_name)
        out += compared
    return out


def table_keys(rows: Sequence[ScoreRow]) -> Tuple[str, ...]:
    """The metric columns of the table: :data:`METRIC_KEYS`, then the :data:`FLUENCY_KEYS` that
    some row has a value of."""
    return METRIC_KEYS + tuple(k for k in FLUENCY_KEYS if any(r.scores.get(k) is not None for r in rows))


def format_significance(sigs: Sequence[SignificanceRow], metric: str = SIGNIFICANCE_METRIC,
                        comparisons: Sequence[SignificanceRow] = ()) -> List[str]:
    """Markdown lines of the significance section (empty without comparisons): each RL model
    against its XE model, then the chosen ``comparisons`` (:func:`collect_comparisons`)."""
    if not sigs and not comparisons:
        return []
    first = (list(sigs) + list(comparisons))[0]
    seed = first.bootstrap_seed
    resamples = next((s.results[0].num_resamples for s in list(sigs) + list(comparisons) if s.results), NUM_RESAMPLES)
    lines = [
        "",
        "## Significance",
        "",
        f"Paired bootstrap (Koehn 2004; Efron & Tibshirani 1993) of each RL model against the XE "
        f"model it was fine-tuned from (directly or through another RL stage), on per-clip {metric} "
        f"(`per_clip.json`): {resamples} "
        f"resamples of the clips, seed {seed}; Δ{metric} = RL - XE; p = one-sided p of "
        f"\"RL better than XE\" = (1 + #{{resampled Δ <= 0}}) / (1 + resamples).",
        "",
    ]
    lines += _significance_lines(sigs, metric)
    if comparisons:
        lines += ["", f"Chosen comparisons (`caption_results --compare <baseline>=<model>`), the same test, seed by "
                      f"seed: Δ{metric} = model - baseline, p = one-sided p of \"model better than baseline\".", ""]
        lines += _significance_lines(comparisons, metric)
    return lines


def format_fluency_significance(sigs: Sequence[SignificanceRow], comparisons: Sequence[SignificanceRow] = (),
                                metric: str = "FER (rules)") -> List[str]:
    """Markdown lines of the paired bootstraps of a fluency error rate (``metric``: each clip's
    flag, 1.0 or 0.0, in ``per_clip.json``), worded for a rate where higher is worse: p is the
    one-sided p of "RL (the model) has the higher rate". Empty without any test."""
    if not sigs and not comparisons:
        return []
    lines = ["", f"## Significance of {metric}", "",
             f"The same paired bootstrap on each clip's fluency flag (1 if its caption is flagged, `{metric}` of "
             f"`per_clip.json`; the mean is the rate): Δ{metric} = RL - XE (model - baseline for the chosen "
             f"comparisons); p = one-sided p of \"the RL model (the model) has the higher error rate\".", ""]
    lines += _significance_lines(sigs, metric, "higher")
    if comparisons:
        lines += ["", "Chosen comparisons (`--compare <baseline>=<model>`):", ""]
        lines += _significance_lines(comparisons, metric, "higher")
    return lines


def _significance_lines(sigs: Sequence[SignificanceRow], metric: str, word: str = "better") -> List[str]:
    lines = []
    for s in sigs:
        parts = []
        for run_seed, res in zip(s.seeds, s.results):
            label = "no seed" if run_seed is None else f"seed {run_seed}"
            parts.append(f"{label}: Δ{metric} {res.delta:+.3f}, p={res.p_value:.4f}")
        better = sum(res.p_value < ALPHA for res in s.results)
        parts.append(f"{word} in {better}/{len(s.results)} seeds at p < {ALPHA:g}")
        fewest = min((res.num_items for res in s.results), default=MIN_BOOTSTRAP_CLIPS)
        if fewest < MIN_BOOTSTRAP_CLIPS:
            parts.append(f"warning: only {fewest} clips (fewer than {MIN_BOOTSTRAP_CLIPS}), too few for the p-values "
                         "to mean much")
        if s.left_out:
            parts.append("left out: " + "; ".join(s.left_out))
        lines.append(f"- `{s.model}` vs `{s.baseline}`, {s.decode_tag}, {s.test_set}: " + "; ".join(parts))
    return lines


def format_results(
    rows: List[ScoreRow],
    significance: Optional[Sequence[SignificanceRow]] = None,
    command: Optional[str] = None,
    comparisons: Sequence[SignificanceRow] = (),
    fluency: Sequence[Tuple[str, Sequence[SignificanceRow], Sequence[SignificanceRow]]] = (),
) -> str:
    """Render the rows (and significance tests) as a deterministic markdown document.

    Args:
        rows: score rows (:func:`collect_scores`); seeds are merged by :func:`group_seeds`.
        significance: from :func:`collect_significance`; ``None``/empty: no such section.
        command: the command that made the experiments, written under the title.
        comparisons: from :func:`collect_comparisons`, listed after ``significance``.
        fluency: ``(metric, significance, comparisons)`` of each fluency error rate
            (:func:`format_fluency_significance`), after them.

    Example:
        >>> print(format_results([]).splitlines()[0])
        # RESULTS
    """
    lines = [
        "# RESULTS",
        "",
        "<!-- Generated by `python -m captionbin.caption_results`; do not edit by hand. -->",
        *([f"Made by (in the recipe directory): `{command}`", ""] if command else []),
        "The date is deliberately not included, so this file is deterministic; the code and library "
        "versions that trained the models are listed below the table where their dirs recorded them "
        "(`env.yaml`), their options are in each dir's `config.yaml`.",
        "Scores have 3 decimals; `skipped` means the metric could not run "
        "(reasons below the table).",
        "Precision: BLEU-1..4 to SPIDEr on the 1-best captions. Seed 001, table 4: "
        "`CIDEr-D (samples)`: mean over clips of the mean CIDEr-D of each clip's sampled captions "
        "(`text_samples`; each scored against the clip's references with the document frequencies "
        "of the test references); Div-1, Div-2 (higher = more diverse) and mBLEU-4 (lower = more "
        "diverse) over the sampled captions of each clip, and the same with `(beams)` over the "
        "N best beam hypotheses (`text_nbest`); Vocab: distinct words of the 1-best captions. "
        "Models named `ensemble_*` are word-level ensembles (mean of the word probabilities).",
        "Runs of several training seeds (`_seed<N>` in the dir names) share one row named without "
        "the seed: `mean ± std` over the `seeds` runs (sample std); a single run shows its own "
        "values. `paper`: where the model comes from, and for RL models the reward they were "
        "trained with (from their `config.yaml`).",
        "",
    ]
    if not rows:
        lines.append("No `score.json` found (run stages 8-9 of caption.sh).")
        return "\n".join(lines) + "\n"
    keys = table_keys(rows)
    if keys != METRIC_KEYS:
        lines[-1:-1] = [FLUENCY_NOTE]
    header = ["model", "decode", "set", *keys, "seeds", "paper"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join(["---"] * 3 + ["---:"] * (len(keys) + 1) + ["---"]) + "|")
    for t in group_seeds(rows):
        cells = [t.model, t.decode_tag, t.test_set]
        cells += [_mean_std_cell([r.scores.get(k) for r in t.runs], k) for k in keys]
        cells += [str(len(t.runs)), "; ".join(dict.fromkeys(r.paper for r in t.runs))]
        lines.append("| " + " | ".join(cells) + " |")

    lines += _skipped_lines(rows, keys)
    lines += _environment_lines(rows)
    lines += format_significance(significance or [], comparisons=comparisons)
    for metric, fl_sigs, fl_comparisons in fluency:
        lines += format_fluency_significance(fl_sigs, fl_comparisons, metric)
    return "\n".join(lines) + "\n"


def _skipped_lines(rows: Sequence[ScoreRow], keys: Sequence[str]) -> List[str]:
    """The lines under the table: the reason of each skipped cell (each distinct (metric, reason)
    once), then what ``score.json`` records as skipped besides the metrics (e.g. the PTB tokenizer
    without Java: those rows' scores are not comparable with others)."""
    reasons: Dict[tuple, List[str]] = {}
    notes: Dict[tuple, List[str]] = {}
    for r in rows:
        where = f"{r.model} {r.decode_tag} {r.test_set}"
        for key in keys:
            if r.scores.get(key) is None:
                reason = r.skipped.get(key, "not scored with --metrics ...,fluency" if key in FLUENCY_KEYS
                                       else "no value and no reason given in score.json")
                reasons.setdefault((key, reason), []).append(where)
        for key, reason in r.skipped.items():
            if key not in METRIC_KEYS + FLUENCY_KEYS + ("fluency",):
                notes.setdefault((key, reason), []).append(where)
    return (_reason_lines("Skipped metrics:", reasons, len(rows))
            + _reason_lines("Scored differently (not comparable with rows scored otherwise):", notes, len(rows)))


def _environment_lines(rows: Sequence[ScoreRow]) -> List[str]:
    """The ``Trained with`` list: one item per distinct environment (a model resumed in
    another one reads ``A, then B``) with the model dirs it trained, or ``all N trained models``
    when there is one; nothing when no row's model was trained (no ``config.yaml``)."""
    by_env: Dict[str, List[str]] = {}
    models = {r.model: r.environments for r in rows if r.environments is not None}
    for model, envs in sorted(models.items()):
        label = ", then ".join(describe(e) for e in envs) if envs else "not recorded (no env.yaml)"
        by_env.setdefault(label, []).append(model)
    if not by_env:
        return []
    out = ["", "Trained with (each model dir's `env.yaml`: captionlib version and git revision, `modified` when "
               "the tracked code differed from it; torch, Python, device (the processor for a CPU), torch "
               "threads):", ""]
    if len(by_env) == 1:
        return out + [f"- {next(iter(by_env))}: all {len(models)} trained models"]
    return out + [f"- {label}: {', '.join(f'`{m}`' for m in names)}" for label, names in sorted(by_env.items())]


def _reason_lines(title: str, reasons: Mapping[tuple, List[str]], num_rows: int) -> List[str]:
    """A RESULTS.md list under ``title``: ``- <key>: <reason> (<rows>)`` per ``(key, reason)``,
    sorted, ``all rows`` when it holds for each of the ``num_rows``; nothing without reasons."""
    if not reasons:
        return []
    out = ["", title, ""]
    for (key, reason), where in sorted(reasons.items()):
        out.append(f"- {key}: {reason} ({'all rows' if len(where) == num_rows else '; '.join(where)})")
    return out


def write_results(
    exp_dir: Union[str, Path], output: Union[str, Path], command: Optional[str] = None,
    compare: Sequence[Tuple[str, str]] = (),
) -> List[ScoreRow]:
    """Collect the score files below ``exp_dir`` and write the table to ``output``.

    The table merges the seeds of each model (:func:`group_seeds`); the significance
    section compares each RL model with its XE model (:func:`collect_significance`), then
    each ``compare`` pair (:func:`collect_comparisons`).

    Args:
        exp_dir: experiment root (``exp``).
        output: markdown file to write (``RESULTS.md``), replaced atomically.
        command: the command that made the experiments (written under the title).
        compare: ``(baseline, model)`` seed-group names to compare (:func:`parse_compare`).

    Returns:
        The score rows read (one per ``score.json``).

    Raises:
        FileNotFoundError: if ``exp_dir`` does not exist.
        ValueError: naming the file, for a malformed ``score.json``/``per_clip.json`` or
            XE/RL per-clip files of different clips; naming the dir, for a path whose
            components carry different seeds.
    """
    exp_dir = Path(exp_dir)
    if not exp_dir.is_dir():
        raise FileNotFoundError(f"{exp_dir}: no such experiment directory")
    rows = collect_scores(exp_dir)
    if not rows:
        logging.warning("no */decode_*/*/score.json found under %s", exp_dir)
    significance = collect_significance(rows)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.name + ".tmp")
    comparisons = collect_comparisons(rows, compare)
    fluency = []
    for metric in ("FER (rules)", "FER (detector)"):  # where per-clip flags were written (--metrics ...,fluency)
        if any(r.scores.get(metric) is not None for r in rows):
            fluency.append((metric, [g for g in collect_significance(rows, metric) if g.results],
                            [g for g in collect_comparisons(rows, compare, metric) if g.results]))
    tmp.write_text(format_results(rows, significance, command, comparisons, fluency), encoding="utf-8")
    tmp.replace(output)
    logging.info("wrote %d rows to %s", len(rows), output)
    return rows
