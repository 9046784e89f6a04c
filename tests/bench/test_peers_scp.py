"""bench/compare_peers.py --scp against a stand-in of self-critical.pytorch: its module paths and
call signatures (``TransformerModel``, ``LossWrapper``, ``rewards``, cider's ``CiderD``), a model
with SCP's parameters whose captions come from its embedding and output layer only, SCP's
losses and CIDEr-D written plainly. The script prints a ratio for every row and passes its
checks; a stand-in whose CIDEr-D adds one to every document frequency fails them."""

import importlib.util
from pathlib import Path

import pytest
from test_compare_peers import ROOT, table
from test_compare_peers import run as run_peer

MODEL = '''
import torch
from torch import nn


class TransformerModel(nn.Module):
    """SCP's parameters (torch's pre-norm layers and a final norm per stack have its shapes); the
    captions come from the word embedding plus the mean embedded frame, through the output layer."""

    def __init__(self, opt):
        super().__init__()
        d, n = opt.d_model, opt.vocab_size + 1
        self.seq_length = opt.max_length
        self.att_embed = nn.Sequential(nn.Linear(opt.att_feat_size, d), nn.ReLU(), nn.Dropout(opt.drop_prob_lm))
        enc = nn.TransformerEncoderLayer(d, opt.num_att_heads, opt.d_ff, opt.dropout, batch_first=True,
                                         norm_first=True)
        dec = nn.TransformerDecoderLayer(d, opt.num_att_heads, opt.d_ff, opt.dropout, batch_first=True,
                                         norm_first=True)
        self.layers = nn.ModuleList([nn.TransformerEncoder(enc, opt.N_enc, enable_nested_tensor=False),
                                     nn.LayerNorm(d), nn.TransformerDecoder(dec, opt.N_dec), nn.LayerNorm(d)])
        self.embed = nn.Embedding(n, d)
        self.generator = nn.Linear(d, n)

    def context(self, att_feats, att_masks):
        x = self.att_embed(att_feats) * att_masks[..., None]
        return x.sum(1) / att_masks.sum(1, keepdim=True)

    def forward(self, fc_feats, att_feats, *args, mode="forward", opt=None):
        if mode == "forward":
            seq, att_masks = args
            seq = seq.reshape(-1, seq.shape[-1])
            ctx = self.context(att_feats, att_masks).repeat_interleave(seq.size(0) // att_feats.size(0), 0)
            return torch.log_softmax(self.generator(self.embed(seq) + ctx[:, None]), -1)
        (att_masks,) = args
        greedy = opt.get("sample_method", "greedy") == "greedy"
        n = 1 if opt.get("beam_size", 1) > 1 else int(opt.get("sample_n", 1))  # the beam is greedy here
        ctx = self.context(att_feats, att_masks).repeat_interleave(n, 0)
        it = torch.zeros(ctx.size(0), dtype=torch.long)
        seq = torch.zeros(ctx.size(0), self.seq_length, dtype=torch.long)
        logprobs = torch.zeros(ctx.size(0), self.seq_length, self.generator.out_features)
        unfinished = torch.ones(ctx.size(0), dtype=torch.bool)
        for t in range(self.seq_length):
            logp = torch.log_softmax(self.generator(self.embed(it) + ctx), -1)
            it = logp.argmax(-1) if greedy else torch.multinomial(logp.detach().exp(), 1)[:, 0]
            it = it.masked_fill(~unfinished, 0)
            seq[:, t], logprobs[:, t] = it, logp * unfinished[:, None]
            unfinished = unfinished & (it != 0)
            if not unfinished.any():
                break
        return seq, logprobs
'''

LOSS_WRAPPER = '''
import torch

from ..utils import rewards


def token_mask(seq):
    return torch.cat([torch.ones_like(seq[:, :1]), (seq[:, :-1] > 0).long()], 1).float()


def lm_crit(logprobs, target, mask):
    target = target.reshape(-1, target.shape[-1])[:, : logprobs.size(1)]
    mask = mask.reshape(-1, mask.shape[-1])[:, : logprobs.size(1)]
    return -(logprobs.gather(2, target[..., None])[..., 0] * mask).sum() / mask.sum()


def rl_crit(logprobs, seq, reward):
    mask = token_mask(seq)
    return -(logprobs.gather(2, seq[..., None])[..., 0] * reward * mask).sum() / mask.sum()


class StructureLosses:
    def __init__(self, opt):
        self.opt = opt

    def __call__(self, logprobs, seq, gts):
        scores = torch.from_numpy(rewards.get_scores(gts, seq, self.opt)).to(logprobs).view(-1, self.opt.train_sample_n)
        advantage = scores - (scores.sum(1, keepdim=True) - scores) / (scores.size(1) - 1)
        mask = token_mask(seq)
        loss = -(logprobs.gather(2, seq[..., None])[..., 0] * mask * advantage.view(-1, 1)).sum() / mask.sum()
        return {"loss": loss, "reward": scores}


class LossWrapper(torch.nn.Module):
    def __init__(self, model, opt):
        super().__init__()
        self.model, self.opt = model, opt
        self.crit, self.rl_crit, self.struc_crit = lm_crit, rl_crit, StructureLosses(opt)

    def forward(self, fc_feats, att_feats, labels, masks, att_masks, gts, gt_indices, sc_flag, struc_flag,
                drop_worst_flag):
        sample = {"sample_method": "sample", "sample_n": self.opt.train_sample_n}
        if struc_flag:
            seq, logprobs = self.model(fc_feats, att_feats, att_masks, opt=sample, mode="sample")
            return {"loss": self.struc_crit(logprobs, seq, gts)["loss"]}
        if not sc_flag:
            logprobs = self.model(fc_feats, att_feats, labels[..., :-1], att_masks)
            return {"loss": self.crit(logprobs, labels[..., 1:], masks[..., 1:])}
        self.model.eval()
        with torch.no_grad():
            greedy, _ = self.model(fc_feats, att_feats, att_masks, opt={"sample_method": "greedy"}, mode="sample")
        self.model.train()
        seq, logprobs = self.model(fc_feats, att_feats, att_masks, opt=sample, mode="sample")
        reward = torch.from_numpy(rewards.get_self_critical_reward(greedy, gts, seq, self.opt)).to(logprobs)
        return {"loss": self.rl_crit(logprobs, seq, reward)}
'''

REWARDS = '''
import numpy as np

CiderD_scorer = None


def array_to_str(arr):
    out = []
    for x in arr:
        out.append(str(int(x)))
        if x == 0:
            break
    return " ".join(out)


def get_scores(data_gts, gen_result, opt):
    n = gen_result.shape[0] // len(data_gts)
    res = [{"image_id": i, "caption": [array_to_str(row)]} for i, row in enumerate(gen_result.tolist())]
    gts = {i: [array_to_str(ref) for ref in data_gts[i // n]] for i in range(len(res))}
    print("Cider scores:", 0.0)
    return CiderD_scorer.compute_score(gts, res)[1]


def get_self_critical_reward(greedy_res, data_gts, gen_result, opt):
    n = gen_result.shape[0] // len(data_gts)
    samples = get_scores(data_gts, gen_result, opt).reshape(len(data_gts), n)
    scores = samples - get_scores(data_gts, greedy_res, opt)[:, None]
    return np.repeat(scores.reshape(-1, 1), gen_result.shape[1], 1)
'''

CIDER = '''
import math
from collections import Counter, defaultdict

import numpy as np


def ngrams(sentence, n=4):
    w = sentence.split()
    return Counter(tuple(w[i: i + k]) for k in range(1, n + 1) for i in range(len(w) - k + 1))


class CiderScorer:
    def __init__(self):
        self.crefs, self.df_mode, self.ref_len, self.document_frequency = [], "corpus", None, defaultdict(float)

    def cook_append(self, test, refs):
        self.crefs.append([ngrams(r) for r in refs])

    def compute_doc_freq(self):
        for refs in self.crefs:
            for g in {g for r in refs for g in r}:
                self.document_frequency[g] += 1

    def clear(self):
        self.crefs = []

    def vector(self, counts):
        v = [{} for _ in range(4)]
        for g, tf in counts.items():
            v[len(g) - 1][g] = tf * (self.ref_len - math.log(IDF_DF(self.document_frequency.get(g, 0.0))))
        norms = [math.sqrt(sum(x * x for x in d.values())) for d in v]
        return v, norms, sum(tf for g, tf in counts.items() if len(g) == 2)

    def score(self, hyp, refs):
        vh, nh, lh = self.vector(ngrams(hyp))
        total = 0.0
        for ref in refs:
            vr, nr, lr = self.vector(ngrams(ref))
            sims = [sum(min(x, vr[k].get(g, 0.0)) * vr[k].get(g, 0.0) for g, x in vh[k].items())
                    / (nh[k] * nr[k] if nh[k] and nr[k] else 1.0) for k in range(4)]
            total += np.mean(sims) * math.exp(-((lh - lr) ** 2) / 72.0)
        return 10.0 * total / len(refs)


class CiderD:
    def __init__(self, n=4, sigma=6.0, df="corpus"):
        self.cider_scorer = CiderScorer()

    def compute_score(self, gts, res):
        scores = np.array([self.cider_scorer.score(r["caption"][0], gts[r["image_id"]]) for r in res])
        return scores.mean(), scores
'''

#: the document frequency of an n-gram's idf: CIDEr-D's max(1, df), or one added to each
IDF_DF = {True: "(lambda df: max(1.0, df))", False: "(lambda df: df + 1.0)"}


def stand_in(root: Path, right: bool) -> Path:
    """An SCP-layout tree (captioning/..., cider/pyciderevalcap/ciderD/...); ``right``: CIDEr-D's
    document frequencies, else one added to each."""
    files = {"captioning/models/TransformerModel.py": MODEL, "captioning/modules/loss_wrapper.py": LOSS_WRAPPER,
             "captioning/utils/rewards.py": REWARDS,
             "cider/pyciderevalcap/ciderD/ciderD.py": CIDER.replace("IDF_DF", IDF_DF[right])}
    for package in ("captioning", "captioning/models", "captioning/modules", "captioning/utils",
                    "cider/pyciderevalcap", "cider/pyciderevalcap/ciderD"):
        (root / package).mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").write_text("")
    for path, text in files.items():
        (root / path).write_text(text)
    return root


def run(peer: Path):
    return run_peer(peer, "--scp")


ROWS = ["XE update, 4 captions", "SCST update, 4 clips (1 sample, greedy baseline)",
        "SCST update, 4 clips x 5 samples (leave-one-out baseline)", "beam-5 decoding, 4 clips",
        "CIDEr-D of 20 sampled captions"]
CHECKS = ["parameters", "CIDEr-D, SCP's strings", "CIDEr-D reward, words", "SCST loss", "new self-critical loss"]


def passed(stdout: str) -> dict:
    """``{check name prefix: 'yes' | 'NO'}`` of the printed checks, in :data:`CHECKS` order."""
    checks = table(stdout, "| check |")
    assert [next(p for p in CHECKS if name.startswith(p)) for name in checks] == CHECKS, list(checks)
    return {p: cells[-1] for p, cells in zip(CHECKS, checks.values())}


@pytest.mark.parametrize("right", [True, False])
def test_compare_scp_prints_every_row_and_checks_equality(tmp_path, right):
    out = run(stand_in(tmp_path, right))
    assert out.returncode == (0 if right else 1), out.stderr[-3000:]
    assert "Cider scores" not in out.stdout
    rows = table(out.stdout, "| row |")
    assert list(rows) == ROWS
    for ours, theirs, ratio in rows.values():
        assert float(ratio) == pytest.approx(float(ours) / float(theirs), rel=0.02, abs=0.01)
    checks = passed(out.stdout)
    assert checks["parameters"] == "yes"
    assert checks["CIDEr-D, SCP's strings"] == ("yes" if right else "NO")
    if right:
        assert set(checks.values()) == {"yes"}


def test_compare_scp_names_what_is_missing(tmp_path):
    out = run(tmp_path)
    assert out.returncode != 0 and f"--scp {tmp_path}: no captioning/models/TransformerModel.py" in out.stderr


@pytest.mark.skipif(importlib.util.find_spec("six") is not None, reason="six is installed")
def test_compare_scp_asks_for_six(tmp_path):
    stand_in(tmp_path, True)
    (tmp_path / "captioning" / "utils" / "rewards.py").write_text("import six\n" + REWARDS)
    out = run(tmp_path)
    assert out.returncode != 0 and "pip install six" in out.stderr


PEER = ROOT / "tools" / "peers" / "self-critical.pytorch"


@pytest.mark.skipif(not PEER.is_dir(), reason="self-critical.pytorch is not in tools/peers (make peers)")
@pytest.mark.skipif(importlib.util.find_spec("six") is None, reason="SCP's code needs six (pip install six)")
def test_compare_scp_against_self_critical_pytorch_itself():
    out = run(PEER)
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-3000:]
    assert list(table(out.stdout, "| row |")) == ROWS
    assert set(passed(out.stdout).values()) == {"yes"}
