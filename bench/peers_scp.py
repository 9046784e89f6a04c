"""captionlib against self-critical.pytorch (SCP, Luo 2020, "A better variant of self-critical
sequence training"), its own code: the rows and checks of ``bench/compare_peers.py --scp DIR``.

What is needed: a checkout of https://github.com/ruotianluo/self-critical.pytorch at commit
4c48a3304932d58c5349434e7b0085f48dcb4be4 with its ``cider`` submodule
(https://github.com/ruotianluo/cider at e9b736d038d39395fa2259e39342bb876f1cc877) in
``DIR/cider``, and the package ``six`` (``pip install six``), which ``captioning/utils/misc.py``
and ``cider/pyciderevalcap/ciderD/ciderD_scorer.py`` import. Nothing else: ``coco-caption``
(BLEU) and the optional models (transformers, meshed-memory-transformer) are not used. SCP's
modules are imported from ``DIR`` and ``DIR/cider`` (its ``rewards.py``, line 12, appends
``cider`` to ``sys.path`` relative to the working directory) and run unmodified; what they
print (the missing optional packages, "Cider scores" at every reward) is silenced.

The model on both sides: SCP's ``TransformerModel`` (``captioning/models/TransformerModel.py``)
with the sizes of ``configs/transformer/transformer.yml`` (decoder: 6 layers, d_model 512,
feed-forward 2048, 8 heads, dropout 0.1) and ``drop_prob_lm`` 0.5 (``captioning/utils/opts.py``
line 82) in its frame embedding (``att_embed``: linear 768 -> 512, ReLU, dropout; lines
274-279), against our :class:`~captionlib.models.captioner.Captioner` of ``encoder: linear``
(768 -> 512, ReLU, dropout 0.5) with a pre-norm ReLU ``encoder_conf.transformer`` stack and a
pre-norm ReLU ``decoder: transformer`` of those sizes, attention dropout 0.1 in the decoder.
The encoder has :data:`N_ENC` = 2 layers, not the paper's 6: SCP's 6 layers relate bottom-up
image regions that know nothing of each other, while the memory here is ConvNeXt's frame
outputs (as ``compare_peers.py``), already the last stage of a deep audio encoder; 2 layers
on top are SJTU's CNN + Transformer (Xu et al. 2021) and our stack's default, and keep the
benchmark one of the decoder and the RL loop. The parameter counts differ by exactly
2 x 512 + 1 = 1025: our token 0 is padding, an embedding row and an output unit that SCP,
whose id 0 is start, end and padding alike (``AttModel.py`` lines 63-65), does not have
(``tgt_vocab = vocab_size + 1``, line 288). Token ids: SCP's words are ours (1 ..
``vocab_size - 2``, ``<unk>`` included), our eos (``vocab_size - 1``) is SCP's 0.

Exact equality of the two models' losses is not possible, even with copied weights: SCP's
``LayerNorm`` (lines 76-87) divides by the unbiased standard deviation plus eps, not
``nn.LayerNorm``'s sqrt(biased variance + eps); its encoder ends with a LayerNorm even with
``N_enc`` 0 (line 68) and adds no positions to the frames, where our stack adds sinusoidal
ones; it drops attention weights in the encoder too (line 161) where our stack does not; and
the initialisations differ (Glorot for every matrix, lines 256-258). So the checks compare
what both sides compute from the same inputs: the CIDEr-D values and the policy-gradient
losses given the same captions and log-probabilities.

Before anything is timed, both models are trained for ``--warm_up_steps`` XE steps on the same
development captions (AdamW, lr 5e-4, as ``compare_peers.warm_up``), so that their captions
end like real ones. The header gives the mean length of each side's greedy and sampled
captions then: the RL rows' times grow with them (SCP's decoder step with the prefix too, see
"Memory" below), and after 60 steps SCP's greedy captions may still run to 20 words where ours
end (Clotho's mean is about 11), which counts against SCP's SCST rows; more
``--warm_up_steps`` make the two closer.

Rows, each timed round robin (``bench_train.timed_round_robin``), every update with Adam at lr
1e-5 (``configs/transformer/transformer_sc.yml`` and ``transformer_nsc.yml``), SCP's through
its ``LossWrapper`` (``captioning/modules/loss_wrapper.py``) as ``tools/train.py`` line 185
calls it:

* ``XE update``: theirs ``LanguageModelCriterion`` on the teacher-forced log-probs (loss_wrapper
  line 55); ours ``xe_loss``;
* ``SCST update`` (1 sample, greedy baseline): theirs ``sc_flag`` (lines 56-73: a greedy pass in
  eval mode, which encodes the clips again, then a sampling pass; ``RewardCriterion``); ours
  ``--rl_algo scst`` (the greedy caption decoded from the sampling pass's encoding);
* ``SCST update, 5 samples`` with the leave-one-out baseline: theirs ``struc_flag`` with
  ``structure_loss_type: new_self_critical`` (lines 25-49; ``losses.py`` lines 168-187); ours
  ``--rl_algo reinforce_plus`` with ``rl_conf: {num_samples: 5, baseline: mean}``;
* ``beam-5 decoding``: theirs ``_sample_beam`` (``AttModel.py`` lines 218-256, batched, through
  ``CaptionModel.beam_search``, which always runs all 20 steps, line 148, and reads the ended
  beams clip by clip with ``.item()``, lines 183-199); ours ``beam_search``. Both rank by the
  summed log-prob (SCP's ``length_penalty`` '', ``captioning/utils/misc.py`` lines 133-135), but
  SCP refills its beam when a hypothesis ends and ours keeps it there, so the captions may differ;
* ``CIDEr-D`` of SCP's 5 sampled captions per clip, from token ids to rewards: theirs
  ``rewards.get_scores`` (``array_to_str`` and ``CiderD.compute_score``, which counts every
  reference's n-grams again at each call); ours the reward of the RL objectives (reference
  vectors cached once).

Memory: SCP's decoder recomputes the whole prefix at every step and projects the memory for
every sample row again (``core``, ``TransformerModel.py`` lines 351-363), and the sampling pass
keeps all of it for the backward pass: its 5-sample update holds about 0.2 GB per sample row
(20 steps, 92 memory frames), some 32 GB for 32 clips x 5 samples: on a machine of 23 GB the
default batch is killed for memory, ``--batch_size 12`` peaked at 14 GB.

SCP decodes at most 20 tokens (``max_length``, ``opts.py`` line 341; ``AttModel.py`` line 60),
eos included, and stops a caption there without eos; ours decodes ``max_len`` 21 and forces
eos at the last step, the same 20 words. The CIDEr-D references are the 5 development
captions of each clip (the clip whose caption is the batch row's), the document frequencies
those of all development clips on both sides: ours from ``DocumentFrequency.from_references``,
SCP's from its ``CiderScorer.compute_doc_freq`` (``ciderD_scorer.py`` lines 143-154), set as
``init_scorer`` (``rewards.py`` lines 25-31) would load them from ``data/<cached_tokens>.p``.

Checks (exit status 1 when one fails; relative differences at most ``--tolerance``):

* the parameter counts, both printed: ours minus SCP's must be 1025 (see above);
* CIDEr-D in SCP's convention: ``array_to_str`` keeps a caption's first 0, so SCP's candidates
  and references end with an eos token that is counted as a word (its unigram's idf is 0, but
  it forms n-grams and lengthens the sentence); ours (``captionlib.metrics.cider_d``) on the
  same strings, with document frequencies counted on them, against ``get_scores``;
* CIDEr-D in ours, on words: our RL reward of the same captions against SCP's ``CiderD``
  given the same words and the words' document frequencies;
* the SCST loss (greedy baseline) and the new self-critical loss (leave-one-out baseline) of
  SCP's 5 sampled captions per clip, its log-probs and its greedy captions: ours
  (``policy_gradient_loss`` with the advantages of SCP-convention CIDEr-D, ``mean_of_others``)
  scaled by samples / tokens, since ours averages over samples and SCP over tokens, against
  SCP's ``RewardCriterion`` on ``get_self_critical_reward`` and ``StructureLosses``.
"""

import contextlib
import io
import sys
import types
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import compare_peers  # noqa: E402

from captionlib.decode.search import beam_search, greedy_search, sample  # noqa: E402
from captionlib.metrics.cider_d import CiderD, DocumentFrequency  # noqa: E402
from captionlib.models.captioner import Captioner, xe_loss, xe_targets  # noqa: E402
from captionlib.rl import objective_class, objective_conf  # noqa: E402
from captionlib.rl.options import RLOptions  # noqa: E402
from captionlib.rl.policy_gradient import mean_of_others, policy_gradient_loss  # noqa: E402
import bench_train  # noqa: E402
from bench_train import timed_round_robin  # noqa: E402

#: SCP's configs/transformer/transformer.yml (N_dec, d_model, d_ff, num_att_heads, dropout)
N_DEC, D_MODEL, D_FF, HEADS, DROPOUT = 6, 512, 2048, 8, 0.1
#: encoder layers over the ConvNeXt memory (the module docstring says why not the paper's 6)
N_ENC = 2
#: SCP's default dropout of the frame embedding (captioning/utils/opts.py line 82)
DROP_PROB_LM = 0.5
#: SCP's max_length (opts.py line 341): tokens per caption, eos included; ours decodes one more
MAX_WORDS = 20
#: samples per clip of the leave-one-out rows and checks (transformer_nsc.yml train_sample_n)
SAMPLES = 5
#: learning rate of the timed updates (transformer_sc.yml, transformer_nsc.yml)
LR = 1e-5
#: the files of SCP's checkout this module imports
SCP_FILES = ("captioning/models/TransformerModel.py", "captioning/modules/loss_wrapper.py",
             "captioning/utils/rewards.py", "cider/pyciderevalcap/ciderD/ciderD.py")


def quiet():
    """A context that swallows stdout: SCP prints at import and at every CIDEr-D call."""
    return contextlib.redirect_stdout(io.StringIO())


def import_scp(root: Path) -> types.SimpleNamespace:
    """SCP's ``TransformerModel``, ``LossWrapper``, ``rewards`` module and ``CiderD`` from the
    checkout ``root`` (``root`` and ``root/cider`` put first on ``sys.path``).

    Raises:
        SystemExit: a file of :data:`SCP_FILES` missing under ``root``, or a module SCP imports
            missing (``six``: ``pip install six``).
    """
    missing = [f for f in SCP_FILES if not (root / f).is_file()]
    if missing:
        raise SystemExit(f"--scp {root}: no {', '.join(missing)} (expected a checkout of "
                         "github.com/ruotianluo/self-critical.pytorch with its cider submodule: "
                         "git clone --recursive)")
    for path in (root / "cider", root):
        sys.path.insert(0, str(path))
    try:
        with quiet():
            from captioning.models.TransformerModel import TransformerModel
            from captioning.modules.loss_wrapper import LossWrapper
            from captioning.utils import rewards
            from pyciderevalcap.ciderD.ciderD import CiderD as ScpCiderD
    except ModuleNotFoundError as e:
        hint = "pip install six" if e.name == "six" else f"pip install {e.name}"
        raise SystemExit(f"--scp {root}: {e} (SCP's code needs it: '{hint}')") from e
    return types.SimpleNamespace(TransformerModel=TransformerModel, LossWrapper=LossWrapper, rewards=rewards,
                                 CiderD=ScpCiderD)


def our_model(vocab_size: int, seed: int) -> Captioner:
    """Our SCP-sized captioner: linear 768 -> 512 (ReLU, dropout 0.5), :data:`N_ENC` pre-norm ReLU
    encoder layers, :data:`N_DEC` pre-norm ReLU decoder layers (attention dropout 0.1)."""
    torch.manual_seed(seed)
    stack = dict(num_layers=N_ENC, d_model=D_MODEL, nhead=HEADS, dim_feedforward=D_FF, dropout=DROPOUT,
                 activation="relu", norm_first=True)
    decoder = dict(num_layers=N_DEC, d_model=D_MODEL, nhead=HEADS, dim_feedforward=D_FF, dropout=DROPOUT,
                   attention_dropout=DROPOUT, activation="relu", norm_first=True, positional="sinusoidal")
    return Captioner(vocab_size, feats_dim=compare_peers.MEMORY_SIZE, encoder="linear",
                     encoder_conf={"output_size": D_MODEL, "dropout": DROP_PROB_LM, "transformer": stack},
                     decoder="transformer", decoder_conf=decoder).to(bench_train.DEVICE)


def scp_options(tok, samples: int) -> types.SimpleNamespace:
    """The options of SCP's model and ``LossWrapper`` (the keys of ``captioning/utils/opts.py`` they
    read): the sizes above, CIDEr-D reward only, ``samples`` samples per clip
    (``train_sample_n``), new self-critical for ``struc_flag``."""
    words = tok.vocab_size - 2  # ours but padding and eos
    return types.SimpleNamespace(
        vocab_size=words, vocab={str(i): tok.token_list[i] for i in range(1, words + 1)},
        input_encoding_size=D_MODEL, rnn_size=D_FF, num_layers=N_DEC, N_enc=N_ENC, N_dec=N_DEC, d_model=D_MODEL,
        d_ff=D_FF, num_att_heads=HEADS, dropout=DROPOUT, drop_prob_lm=DROP_PROB_LM, max_length=MAX_WORDS,
        seq_length=MAX_WORDS, fc_feat_size=compare_peers.MEMORY_SIZE, att_feat_size=compare_peers.MEMORY_SIZE,
        att_hid_size=512, use_bn=0, label_smoothing=0.0, structure_loss_type="new_self_critical",
        structure_loss_weight=1.0, use_ppo=0, train_sample_n=samples, train_sample_method="sample",
        train_beam_size=1, sc_sample_method="greedy", sc_beam_size=1, struc_use_logsoftmax=False,
        entropy_reward_weight=0.0, self_cider_reward_weight=0.0, cider_reward_weight=1.0, bleu_reward_weight=0.0)


def scp_cider(scp_cider_class, docs: list):
    """SCP's ``CiderD`` with the document frequencies of ``docs`` (per clip, its reference
    strings) kept fixed, as ``init_scorer`` loads them from a pickle: counted by its own
    ``CiderScorer.compute_doc_freq``, ``ref_len`` log(clips), a ``df_mode`` other than
    ``corpus`` (``ciderD_scorer.py`` lines 143-154, 185-186, 212)."""
    scorer = scp_cider_class(df="corpus")
    counter = scorer.cider_scorer
    for refs in docs:
        counter.cook_append(None, refs)
    counter.compute_doc_freq()
    counter.ref_len = np.log(float(len(counter.crefs)))
    counter.df_mode = "fixed"
    counter.clear()
    return scorer


def batch_clips(batch) -> list:
    """The development clip (an index of ``batch.caps``) of each batch row: one whose captions
    hold the row's caption.

    Raises:
        ValueError: a row whose caption is none of the development captions.
    """
    of = {}
    for c, caps in enumerate(batch.caps):
        for cap in caps:
            of.setdefault(tuple(cap), c)
    rows = [tuple(batch.tok.ids2text(row).split()) for row in batch.ys.tolist()]
    unknown = [" ".join(r) for r in rows if r not in of]
    if unknown:
        raise ValueError(f"batch captions that are no development caption: {unknown[:3]}")
    return [of[r] for r in rows]


def from_scp(seq: torch.Tensor, eos: int) -> torch.Tensor:
    """SCP's token rows (N, L) (words, then 0: eos, then padding) in our ids: each row's first 0
    becomes ``eos`` (a row of L words keeps none, as SCP cuts it)."""
    zero = seq == 0
    return seq.masked_fill(zero & (zero.cumsum(1) == 1), eos)


class ScpSide:
    """SCP's model and loss wrappers on the batch, in SCP's ids.

    Attributes:
        model: ``TransformerModel``; ``sc``, ``nsc``: its ``LossWrapper`` with 1 and
            :data:`SAMPLES` samples per clip (``train_sample_n``).
        fc (B, 768) the clips' mean memory frame (unused by the Transformer, as SCP's pooled
            features); att (B, frames, 768) the memory; att_masks (B, frames) 1 for valid frames.
        labels, masks (B, 1, length + 2): the batch's captions as SCP's data loader gives them
            (``captioning/data/dataloader.py`` lines 204-249): 0, words, 0-padding; masks over
            start, words and eos.
        gts: per clip, its references (5, longest + 1) as word ids, 0-padded (each ends in 0).
        docs: per development clip, its reference strings as ``rewards.array_to_str`` makes them,
            whose document frequencies SCP's reward (``rewards.CiderD_scorer``) is given.
    """

    def __init__(self, scp, batch, clips: list, seed: int):
        self.scp = scp
        opt = scp_options(batch.tok, 1)
        torch.manual_seed(seed)
        self.model = scp.TransformerModel(opt).to(bench_train.DEVICE)
        self.sc = scp.LossWrapper(self.model, opt)
        self.nsc = scp.LossWrapper(self.model, scp_options(batch.tok, SAMPLES))
        valid = torch.arange(batch.memory.size(1), device=batch.memory.device)[None, :] < batch.lens[:, None]
        self.att, self.att_masks = batch.memory, valid.float()
        self.fc = (batch.memory * self.att_masks[..., None]).sum(1) / batch.lens[:, None]
        self.labels, self.masks = self.targets(batch.ys, batch.ys_lens)
        ids = [[[batch.tok.token2id[w] for w in cap] for cap in caps] for caps in batch.caps]
        self.docs = [[scp.rewards.array_to_str(ref + [0]) for ref in refs] for refs in ids]
        scp.rewards.CiderD_scorer = scp_cider(scp.CiderD, self.docs)  # what init_scorer would set
        self.gts = []
        for c in clips:
            arr = np.zeros((len(ids[c]), max(map(len, ids[c])) + 1), dtype=np.int64)
            for j, ref in enumerate(ids[c]):
                arr[j, : len(ref)] = ref
            self.gts.append(arr)

    @staticmethod
    def targets(ys: torch.Tensor, ys_lens: torch.Tensor):
        """SCP's ``labels``, ``masks`` (B, 1, L + 2) of our captions ys (B, L) (0-padded, no eos)."""
        labels = torch.nn.functional.pad(ys, (1, 1))[:, None]
        positions = torch.arange(labels.size(-1), device=ys.device)
        return labels, (positions[None, :] < ys_lens[:, None] + 2).float()[:, None]

    def loss(self, sc_flag: bool, struc_flag: bool, labels=None, masks=None) -> torch.Tensor:
        """``LossWrapper.forward``'s loss (loss_wrapper.py lines 18-75) on the batch: XE (both flags
        false, of ``labels``/``masks`` when given), SCST (``sc_flag``) or new self-critical
        (``struc_flag``)."""
        lw = self.nsc if struc_flag else self.sc
        labels, masks = (self.labels, self.masks) if labels is None else (labels, masks)
        with quiet():
            return lw(self.fc, self.att, labels, masks, self.att_masks, self.gts,
                      torch.arange(len(self.gts)), sc_flag, struc_flag, False)["loss"]

    def decode(self, opt: dict):
        """``model(..., mode='sample')`` (``AttModel._sample``): tokens (N, 20), log-probs (N, 20, words + 1)."""
        return self.model(self.fc, self.att, self.att_masks, opt=opt, mode="sample")

    def get_scores(self, seq: torch.Tensor) -> np.ndarray:
        """``rewards.get_scores`` (rewards.py lines 83-114): CIDEr-D (N,) of ``seq`` (N, L), clip-major."""
        with quiet():
            return self.scp.rewards.get_scores(self.gts, seq, self.nsc.opt)


def objective(algo: str, rl_conf: dict, model: Captioner, reward, tok):
    """Our objective of ``--rl_algo algo`` with the ``rl_conf`` block ``rl_conf``, decoding 21 tokens."""
    cls = objective_class(algo)
    opts = RLOptions(rl_algo=algo, max_len=MAX_WORDS + 1)
    return cls.from_options(opts, objective_conf(cls, rl_conf, algo), model, reward, tok, None)


def relative(a, b) -> float:
    """max |a - b| / max |b| (0 when both are 0)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    diff, scale = float(np.abs(a - b).max()), float(np.abs(b).max())
    return 0.0 if diff == 0 else (diff / scale if scale else float("inf"))


def checks(ours: Captioner, theirs: ScpSide, batch, clips: list, reward, seq, logprobs, greedy,
           tolerance: float) -> list:
    """The equality checks (see the module docstring): ``[(name, value, passed)]``.

    Args:
        clips: the development clip of each batch row (:func:`batch_clips`); reward: our
            CIDEr-D reward of the development clips (ids ``clip<index>``).
        seq (B * 5, 20), logprobs (B * 5, 20, words + 1): SCP's samples, clip-major, and their
            log-probs; greedy (B, 20): SCP's greedy captions.
    """
    out = []
    n_ours, n_theirs = (sum(p.numel() for p in m.parameters()) for m in (ours, theirs.model))
    out.append((f"parameters: ours {n_ours:,}, SCP {n_theirs:,}",
                f"ours - SCP = {n_ours - n_theirs} (our padding token: {2 * D_MODEL + 1})",
                n_ours - n_theirs == 2 * D_MODEL + 1))
    n = seq.size(0) // len(clips)
    keys = [f"clip{c}" for c in clips]
    cand_clips = [c for c in clips for _ in range(n)]
    cand_keys = [f"clip{c}" for c in cand_clips]
    scp_words = {f"clip{c}": [s.split() for s in docs] for c, docs in enumerate(theirs.docs)}
    ours_scp = CiderD(DocumentFrequency.from_references(scp_words), refs=scp_words)
    strings = [theirs.scp.rewards.array_to_str(row) for row in seq.tolist()]
    scores, b = ours_scp.score(cand_keys, [s.split() for s in strings]), theirs.get_scores(seq)
    d = relative(scores, b)
    out.append((f"CIDEr-D, SCP's strings (eos a token), {len(b)} samples: ours {scores.mean():.4f}, "
                f"SCP {b.mean():.4f}", f"rel. diff {d:.1e}", d <= tolerance))

    tokens = from_scp(seq, ours.eos_id)
    words = [batch.tok.ids2text(row).split() for row in tokens.tolist()]
    docs = [[" ".join(cap) for cap in caps] for caps in batch.caps]
    with quiet():
        _, b = scp_cider(theirs.scp.CiderD, docs).compute_score(
            {i: docs[c] for i, c in enumerate(cand_clips)},
            [{"image_id": i, "caption": [" ".join(w)]} for i, w in enumerate(words)])
    a = reward(cand_keys, words)["reward"]
    d = relative(a, b)
    out.append((f"CIDEr-D reward, words: ours {a.mean():.4f}, SCP's CiderD {np.mean(b):.4f}", f"rel. diff {d:.1e}",
                d <= tolerance))

    lp = logprobs.gather(2, seq.unsqueeze(2)).squeeze(2)
    mask = (tokens != 0).float()
    scale = seq.size(0) / mask.sum()  # ours: mean over samples; SCP: mean over tokens
    r = torch.as_tensor(scores, dtype=torch.float32, device=lp.device).view(len(keys), n)
    greedy_strings = [theirs.scp.rewards.array_to_str(row).split() for row in greedy.tolist()]
    g = torch.as_tensor(ours_scp.score(keys, greedy_strings), dtype=torch.float32, device=lp.device)
    ours_sc = policy_gradient_loss(lp, mask, (r - g[:, None]).reshape(-1)) * scale
    with quiet():
        rew = theirs.scp.rewards.get_self_critical_reward(greedy, theirs.gts, seq, theirs.nsc.opt)
    theirs_sc = theirs.sc.rl_crit(logprobs, seq, torch.from_numpy(rew).to(logprobs))
    ours_nsc = policy_gradient_loss(lp, mask, (r - mean_of_others(r)).reshape(-1)) * scale
    with quiet():
        theirs_nsc = theirs.nsc.struc_crit(logprobs, seq, theirs.gts)["loss"]
    for name, x, y in (("SCST loss, greedy baseline", ours_sc, theirs_sc),
                       ("new self-critical loss, leave-one-out baseline", ours_nsc, theirs_nsc)):
        d = relative(x.item(), y.item())
        out.append((f"{name}, SCP's {len(cand_keys)} samples: ours x samples / tokens {x.item():.6f}, "
                    f"SCP {y.item():.6f}", f"rel. diff {d:.1e}", d <= tolerance))
    return out


def rows(ours: Captioner, theirs: ScpSide, batch, keys: list, reward, seq, reps: int) -> list:
    """``[(row, our seconds, SCP's seconds)]``: the XE, SCST and 5-sample SCST updates, beam-5
    decoding, and the CIDEr-D of SCP's samples ``seq`` (B * 5, 20)."""
    tok, m, lens, ys, ys_lens = batch.tok, batch.memory, batch.lens, batch.ys, batch.ys_lens
    opt_ours = torch.optim.Adam(ours.parameters(), lr=LR)
    opt_theirs = torch.optim.Adam(theirs.model.parameters(), lr=LR)
    scst = objective("scst", {}, ours, reward, tok)
    rplus = objective("reinforce_plus", {"num_samples": SAMPLES, "baseline": "mean"}, ours, reward, tok)
    B = m.size(0)
    tokens = from_scp(seq, ours.eos_id)
    cand_keys = [k for k in keys for _ in range(seq.size(0) // B)]

    specs = (
        (f"XE update, {B} captions", True, lambda: bench_train.xe_update(ours, opt_ours, m, lens, ys, ys_lens),
         lambda: compare_peers.optimizer_step(opt_theirs, theirs.loss(False, False))),
        (f"SCST update, {B} clips (1 sample, greedy baseline)", True,
         lambda: bench_train.rl_update(scst, ours, opt_ours, keys, m, lens),
         lambda: compare_peers.optimizer_step(opt_theirs, theirs.loss(True, False))),
        (f"SCST update, {B} clips x {SAMPLES} samples (leave-one-out baseline)", True,
         lambda: bench_train.rl_update(rplus, ours, opt_ours, keys, m, lens),
         lambda: compare_peers.optimizer_step(opt_theirs, theirs.loss(False, True))),
        (f"beam-5 decoding, {B} clips", False, lambda: beam_search(ours, ours.encode(m, lens), 5, MAX_WORDS + 1),
         lambda: theirs.decode({"beam_size": 5, "sample_n": 1})),
        (f"CIDEr-D of {seq.size(0)} sampled captions", False,
         lambda: rplus.rewards(cand_keys, rplus.words(tokens), m.device), lambda: theirs.get_scores(seq)),
    )
    out = []
    for name, train, mine, peer in specs:
        both = (ours, theirs.model)
        t = timed_round_robin({"ours": compare_peers.in_mode(both, train, mine),
                               "theirs": compare_peers.in_mode(both, train, peer)}, reps)
        out.append((name, t["ours"], t["theirs"]))
    return out


def compare(args, batch):
    """SCP's rows and checks (see the module docstring) for ``compare_peers.main``.

    Args:
        args: ``compare_peers``'s options (scp, seed, reps, warm_up_steps, tolerance, ...).
        batch: a ``compare_peers.Batch``.

    Returns:
        (header line, ``[(row, our seconds, SCP's seconds)]``, ``[(check, value, passed)]``).

    Raises:
        SystemExit: as :func:`import_scp`.
    """
    scp = import_scp(Path(args.scp))
    tok = batch.tok
    clips = batch_clips(batch)
    keys = [f"clip{c}" for c in clips]
    reward = bench_train.cider_reward(types.SimpleNamespace(refs={f"clip{c}": caps
                                                                  for c, caps in enumerate(batch.caps)}))
    ours = our_model(tok.vocab_size, args.seed)
    ours.train()
    compare_peers.warm_up(lambda ys, ys_lens: xe_loss(ours(batch.memory, batch.lens, ys),
                                                      xe_targets(ys, ys_lens, ours.eos_id)),
                          ours.parameters(), batch, args.warm_up_steps, args.seed)
    theirs = ScpSide(scp, batch, clips, args.seed)
    theirs.model.train()
    compare_peers.warm_up(lambda ys, ys_lens: theirs.loss(False, False, *theirs.targets(ys, ys_lens)),
                          theirs.model.parameters(), batch, args.warm_up_steps, args.seed)
    ours.eval()
    theirs.model.eval()
    with torch.no_grad():
        ours_greedy = greedy_search(ours, ours.encode(batch.memory, batch.lens), MAX_WORDS + 1)
        greedy, _ = theirs.decode({"sample_method": "greedy"})
        ours.train()  # both sample in training mode (SCP: loss_wrapper.py lines 63-68)
        theirs.model.train()
        ours_samples = sample(ours, ours.encode(batch.memory, batch.lens).repeat_interleave(SAMPLES, 0),
                              MAX_WORDS + 1).tokens
        seq, logprobs = theirs.decode({"sample_method": "sample", "sample_n": SAMPLES})
    checks_ = checks(ours, theirs, batch, clips, reward, seq, logprobs, greedy, args.tolerance)
    words = {name: np.mean([len(tok.ids2text(r).split()) for r in t.tolist()])
             for name, t in (("greedy ours", ours_greedy), ("greedy SCP", from_scp(greedy, ours.eos_id)),
                             ("samples ours", ours_samples), ("samples SCP", from_scp(seq, ours.eos_id)))}
    header = (f"self-critical.pytorch ({args.scp}): {args.batch_size} clips of {int(batch.lens.min())}-"
              f"{int(batch.lens.max())} memory frames ({compare_peers.MEMORY_SIZE}-d), {tok.vocab_size} tokens, "
              f"Transformer {N_ENC} + {N_DEC} layers, d_model {D_MODEL}; {args.warm_up_steps} warm-up steps, "
              f"words per caption, ours / SCP: greedy {words['greedy ours']:.1f} / {words['greedy SCP']:.1f}, "
              f"samples {words['samples ours']:.1f} / {words['samples SCP']:.1f}")
    return header, rows(ours, theirs, batch, keys, reward, seq, args.reps), checks_
