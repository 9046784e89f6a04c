"""CIDEr-D engine vs pycocoevalcap on real Clotho captions."""

from collections import defaultdict

import numpy as np
import pytest
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.cider.cider_scorer import CiderScorer

from captionlib.metrics.cider_d import CiderD, DocumentFrequency, corpus_cider_d
from captionlib.metrics.pycoco import pycoco_cider_with_df
from captionlib.text.cleaner import clean_words
from _metrics_data import as_pycoco, clotho_split, eval_parity_set


def test_corpus_cider_d_equals_pycocoevalcap_per_clip():
    refs, hyps = eval_parity_set()
    assert len(refs) == 1045
    mean, per = corpus_cider_d(refs, hyps)
    gts, res = as_pycoco(refs, hyps)
    ref_mean, ref_per = Cider().compute_score(gts, res)
    ours = np.array([per[c] for c in gts])
    np.testing.assert_allclose(ours, ref_per, rtol=0, atol=1e-6)
    assert abs(mean - ref_mean) < 1e-6
    assert np.abs(ours - ref_per).max() < 1e-12  # in fact equal up to rounding


def test_document_frequency_equals_pycocoevalcap():
    refs, hyps = eval_parity_set()
    df = DocumentFrequency.from_references(refs)
    scorer = CiderScorer()
    gts, res = as_pycoco(refs, hyps)
    for c in gts:
        scorer += (res[c][0], gts[c])
    scorer.compute_doc_freq()
    assert df.to_dict() == dict(scorer.document_frequency)
    assert df.num_docs == 1045
    ngram = tuple(refs[next(iter(refs))][0][:2])
    assert df[ngram] == scorer.document_frequency[ngram]
    assert df[("no-such-word", "x")] == 0.0


@pytest.fixture(scope="module")
def train_df_and_batch():
    ids, caps = clotho_split("development")
    train_refs = {c: [clean_words(x) for x in r] for c, r in zip(ids, caps)}
    df = DocumentFrequency.from_references(train_refs)
    refs, _ = eval_parity_set()
    clips = list(refs)[:150]
    rng = np.random.default_rng(0)
    clip_ids, cands = [], []
    for c in clips:  # own caption 1, 4 captions of other clips, one empty caption sometimes
        eval_ids, eval_caps = clotho_split("evaluation")
        clip_ids.append(c)
        cands.append(clean_words(eval_caps[eval_ids.index(c)][0]))
        for _ in range(4):
            clip_ids.append(c)
            cands.append(clean_words(eval_caps[int(rng.integers(len(eval_caps)))][int(rng.integers(5))]))
    clip_ids.append(clips[0])
    cands.append([])
    clip_ids.append(clips[1])
    cands.append(["zzzunseenword", "zzzunseenword", "dog"])
    return df, {c: refs[c] for c in clips}, clip_ids, cands


def test_reward_equals_pycocoevalcap_with_same_df(train_df_and_batch):
    """Issue 2: CIDEr-D reward == pycocoevalcap's Cider given the same refs and df."""
    df, refs, clip_ids, cands = train_df_and_batch
    engine = CiderD(df, refs=refs)
    ours = engine.score(clip_ids, cands)
    pairs = [(" ".join(w), [" ".join(r) for r in refs[c]]) for c, w in zip(clip_ids, cands)]
    theirs = pycoco_cider_with_df(pairs, df.to_dict(), df.num_docs)
    assert ours.shape == (len(cands),)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)
    assert ours.max() > 0.5  # the own captions score high
    # again, now from the cache, in another order and one candidate at a time
    perm = np.random.default_rng(1).permutation(len(cands))
    again = engine.score([clip_ids[i] for i in perm], [cands[i] for i in perm])
    np.testing.assert_allclose(again, ours[perm], rtol=0, atol=1e-12)
    single = [engine.score([clip_ids[i]], [cands[i]])[0] for i in range(0, len(cands), 37)]
    np.testing.assert_allclose(single, ours[::37], rtol=0, atol=1e-12)


def test_score_ids_equals_score(train_df_and_batch):
    df, refs, clip_ids, cands = train_df_and_batch
    engine = CiderD(df)
    engine.add_refs(refs)
    token_list = ["<blank>", "<unk>"] + sorted({w for c in cands for w in c}) + ["<sos/eos>"]
    tid = {w: i for i, w in enumerate(token_list)}
    eos = len(token_list) - 1
    width = max(len(c) for c in cands) + 3
    arr = np.zeros((len(cands), width), dtype=np.int64)  # padded with <blank>=0 after eos
    for i, c in enumerate(cands):
        arr[i, : len(c)] = [tid[w] for w in c]
        arr[i, len(c)] = eos
        if len(c) + 1 < width:
            arr[i, len(c) + 1] = tid["<unk>"]  # after eos: ignored
    got = engine.score_ids(clip_ids, arr, token_list, stop_ids=(eos, 0))
    np.testing.assert_allclose(got, engine.score(clip_ids, cands), rtol=0, atol=1e-12)
    torch = pytest.importorskip("torch")
    got_t = engine.score_ids(clip_ids, torch.from_numpy(arr), token_list, stop_ids=(eos,), ignore_ids=(0,))
    np.testing.assert_allclose(got_t, got, rtol=0, atol=1e-12)


def test_save_load_roundtrip(tmp_path, train_df_and_batch):
    df, refs, clip_ids, cands = train_df_and_batch
    path = tmp_path / "cider_df.npz"
    df.save(str(path))
    assert path.read_bytes()[:2] == b"PK" and not list(tmp_path.glob("*.tmp"))  # npz, written atomically
    df2 = DocumentFrequency.load(str(path))
    assert (df2.n, df2.num_docs, df2.words) == (df.n, df.num_docs, df.words)
    np.testing.assert_array_equal(df2.keys, df.keys)
    np.testing.assert_array_equal(df2.counts, df.counts)
    a = CiderD(df, refs=refs).score(clip_ids[:50], cands[:50])
    b = CiderD(df2, refs=refs).score(clip_ids[:50], cands[:50])
    np.testing.assert_array_equal(a, b)
    (tmp_path / "bad.pkl").write_bytes(b"\x80\x04K\x01.")  # pickled int
    with pytest.raises(ValueError, match="bad.pkl: not an .npz .* --trust_pickle true"):
        DocumentFrequency.load(str(tmp_path / "bad.pkl"))
    with pytest.raises(ValueError, match="bad.pkl: not a captionlib"):
        DocumentFrequency.load(str(tmp_path / "bad.pkl"), trust_pickle=True)


def test_edge_cases_match_pycocoevalcap():
    refs = {
        "a": [["a", "dog", "barks"], ["a", "dog", "is", "barking", "loudly"], ["dog"]],
        "b": [["rain", "falls", "on", "a", "roof"], ["heavy", "rain"]],
        "c": [["birds", "sing", "birds", "sing", "birds", "sing"]],
    }
    df = DocumentFrequency.from_references(refs)
    engine = CiderD(df, refs=refs)
    cases = [("a", []), ("a", ["dog"]), ("b", ["rain", "rain", "rain"]), ("c", ["birds", "sing"] * 4),
             ("c", ["unknown"]), ("b", ["a", "dog", "barks"])]
    ours = engine.score([c for c, _ in cases], [w for _, w in cases])
    pairs = [(" ".join(w), [" ".join(r) for r in refs[c]]) for c, w in cases]
    theirs = pycoco_cider_with_df(pairs, defaultdict(float, df.to_dict()), df.num_docs)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-9)


def test_errors():
    refs = {"a": [["a", "dog"]]}
    engine = CiderD(DocumentFrequency.from_references(refs))
    with pytest.raises(KeyError, match="no references cached"):
        engine.score(["zz"], [["a"]])
    with pytest.raises(ValueError, match="clip ids"):
        engine.score(["a", "a"], [["a"]])
    with pytest.raises(ValueError, match="no reference"):
        engine.add_refs({"b": []})
    with pytest.raises(ValueError, match="exceeds"):
        CiderD(DocumentFrequency.from_references(refs, n=2), n=4)
    with pytest.raises(ValueError, match="differ"):
        corpus_cider_d(refs, {"b": ["a"]})
    assert engine.score([], []).shape == (0,)


# ----------------------------------------------------------------------------- per-batch IDF (seed 000)
def test_batch_cider_d_equals_pycocoevalcap_on_the_batch(train_df_and_batch):
    """Issue 10.6: the per-batch reward == ``Cider().compute_score`` called on the batch as
    SCST code does (one gts/res entry per candidate, duplicated clips counted each time)."""
    from captionlib.metrics.cider_d import batch_cider_d

    _, refs, clip_ids, cands = train_df_and_batch
    ours = batch_cider_d(refs, clip_ids, cands)
    gts = {i: [" ".join(r) for r in refs[c]] for i, c in enumerate(clip_ids)}
    res = {i: [" ".join(w)] for i, w in enumerate(cands)}
    _, theirs = Cider().compute_score(gts, res)
    assert ours.shape == (len(cands),)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)
    # the batch statistics differ from the train-set ones, and duplicates matter:
    # one document per distinct clip would give other scores
    assert np.abs(ours - CiderD(train_df_and_batch[0], refs=refs).score(clip_ids, cands)).max() > 1e-3
    distinct = list(dict.fromkeys(clip_ids))
    per_clip_docs = CiderD(DocumentFrequency.from_references({c: refs[c] for c in distinct}), refs=refs)
    assert np.abs(ours - per_clip_docs.score(clip_ids, cands)).max() > 1e-3
    assert batch_cider_d(refs, [], []).shape == (0,)
    with pytest.raises(ValueError, match="clip ids"):
        batch_cider_d(refs, clip_ids[:2], cands[:1])


def test_reward_cider_d_batch(tmp_path, train_df_and_batch):
    from captionlib.metrics.cider_d import batch_cider_d
    from captionlib.rl.rewards import Reward, describe_reward

    df, refs, clip_ids, cands = train_df_and_batch
    df.save(str(tmp_path / "df.npz"))
    out = Reward("cider_d_batch:2,cider_d:1", refs, str(tmp_path / "df.npz"))(clip_ids, cands)
    np.testing.assert_array_equal(out["cider_d_batch"], batch_cider_d(refs, clip_ids, cands))
    np.testing.assert_allclose(out["reward"], 2 * out["cider_d_batch"] + out["cider_d"], rtol=0, atol=1e-12)
    assert describe_reward("cider_d_batch:2,cider_d:1") == "2 CIDEr-D with per-batch IDF + CIDEr-D"
    assert describe_reward("cider_d:1.0") == "CIDEr-D"


def test_mean_cider_d_of_sets_equals_mean_of_pycocoevalcap_runs():
    """Seed 001's CIDEr of 5 samples: each sample set scored as a test run, then averaged."""
    from captionlib.metrics.cider_d import mean_cider_d_of_sets

    refs, hyps = eval_parity_set()
    clips = list(refs)[:300]
    refs = {c: refs[c] for c in clips}
    rng = np.random.default_rng(2)
    sets = {c: [hyps[c], hyps[clips[int(rng.integers(len(clips)))]], refs[c][0][:3]] for c in clips}
    mean, per = mean_cider_d_of_sets(refs, sets)
    gts = {c: [" ".join(r) for r in refs[c]] for c in clips}
    runs = [Cider().compute_score(gts, {c: [" ".join(sets[c][k])] for c in clips}) for k in range(3)]
    assert mean == pytest.approx(np.mean([m for m, _ in runs]), abs=1e-6)
    np.testing.assert_allclose([per[c] for c in clips], np.mean([s for _, s in runs], axis=0), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="no caption"):
        mean_cider_d_of_sets(refs, dict(sets, **{clips[0]: []}))
