"""REINFORCE with a baseline over sampled captions: SCST and REINFORCE+.

* SCST (Rennie et al., "Self-critical sequence training for image captioning", CVPR 2017;
  seed 000 eq. 4): one multinomial sample per clip, baseline = reward of the greedy
  caption decoded under ``no_grad`` with the decoder in eval mode (on a GPU with
  ``sample_logprobs: recompute``, in the samples' pass, without dropout on its rows:
  :meth:`SampledObjective.baseline_and_samples`). By default
  (``baseline_encoding: shared``) the greedy caption is decoded from the embedding of the
  sampling pass, as the seed authors' code does (one encoder pass per clip);
  ``separate`` re-encodes the clips in eval mode (no dropout, BatchNorm running statistics).
* REINFORCE+ (seed 004): ``num_samples`` samples per clip; baseline the greedy reward or
  the mean reward of the *other* samples of the same clip.

Loss = -mean over samples of (r - b) * sum_t log p(w_t | w_<t, x), i.e. minus a sample
estimate of the gradient of the expected reward.

The log-probabilities come from the sampling loop, or (``sample_logprobs: recompute``) from one
teacher-forced decoder pass over the captions sampled without gradients
(:func:`teacher_forced_logprobs`): the backward pass is then XE's instead of one per decoding step.

* SLL-ME (``entropy_weight`` > 0; seed 001, table 2, after Mnih et al. 2016): the loss also
  subtracts ``entropy_weight`` x the mean over samples of sum_t H(p(. | w_<t, x)), the
  entropy of the policy at each step of the sampled caption (word-level exploration; the
  seed tuned the weight among 1e-1, 1e-2, 1e-3 and chose 1e-2).
"""

import contextlib
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import nn

from captionlib.decode.search import SampleOutput, entropy, greedy_search, sample, trimmed
from captionlib.models.batch_parts import cat_encodings, pooled
from captionlib.rl.options import DEFAULTS
from captionlib.rl.rewards import Reward
from captionlib.text.tokenizer import Tokenizer
from captionlib.train.options import option
from captionlib.utils.distributed import eval_rows_exact, pad_to_global, row_sharded

BASELINE_ENCODINGS = ("shared", "separate")
#: Where the sampled captions' log-probabilities come from (``sample_logprobs``): the sampling
#: loop, or one teacher-forced pass over them, see :meth:`SampledObjective.draw`.
SAMPLE_LOGPROBS = ("loop", "recompute")
#: REINFORCE+ baselines (seed 004): the greedy caption's reward, or the mean of the other samples.
BASELINES = ("greedy", "mean")
#: The ``--help`` group of the ``rl_conf`` keys.
RL_CONF = "rl_conf"


@dataclass
class LogprobsConf:
    """The ``rl_conf`` key of an objective whose samples' log-probabilities may be recomputed."""

    sample_logprobs: str = option(
        "loop", "the samples' log-probabilities from the sampling loop (loop: a backward pass through every "
                "decoding step) or recomputed by one teacher-forced decoder pass over the samples drawn without "
                "gradients (recompute: one pass and one backward, as XE's; the same samples, but decoder dropout "
                "draws other masks for the gradient; on a GPU a greedy baseline is decoded in the samples' pass "
                "where the decoder's only training-mode behaviour is dropout)", RL_CONF, SAMPLE_LOGPROBS)


@dataclass
class SampledConf(LogprobsConf):
    """The ``rl_conf`` keys of an objective with a greedy (self-critical) baseline."""

    baseline_encoding: str = option(
        "shared", "greedy baseline: decode from the sampling pass's encoding (shared, the seed authors' code) or "
                  "re-encode in eval mode (separate)", RL_CONF, BASELINE_ENCODINGS)


@dataclass
class SamplesConf:
    """The ``rl_conf`` keys of REINFORCE+'s samples (seed 004)."""

    num_samples: int = option(1, "captions sampled per clip", RL_CONF, valid=">= 1")
    baseline: str = option("greedy", "the reward of the greedy caption (greedy) or the mean of the clip's other "
                                     "samples (mean, needs num_samples >= 2)", RL_CONF, BASELINES)


@dataclass
class CriticConf:
    """The ``rl_conf`` key of an objective with networks of its own (critic, baseline, attributes)."""

    critic_lr: float = option(1e-3, "Adam learning rate of the objective's own networks (critic, baseline, "
                                    "attribute head, embedding)", RL_CONF, valid="> 0")


@dataclass
class SCSTConf(SampledConf):
    """The ``rl_conf`` keys of SCST (``--rl_algo scst``)."""

    entropy_weight: float = option(
        0.0, "weight of the maximum-entropy regularization, SLL-ME (seed 001, table 2: 0.01; 0: off)", RL_CONF,
        valid=">= 0")


@dataclass
class ReinforcePlusConf(SCSTConf, SamplesConf):
    """The ``rl_conf`` keys of REINFORCE+ (``--rl_algo reinforce_plus``): SCST's and its samples'."""


def mean_of_others(rewards: torch.Tensor) -> torch.Tensor:
    """Leave-one-out mean baseline: for (clips, samples) rewards, each entry's baseline is
    the mean of the other samples of its clip (needs samples >= 2).

    Raises:
        ValueError: fewer than 2 samples per clip.
    """
    n = rewards.size(1)
    if n < 2:
        raise ValueError("the mean baseline needs at least 2 samples per clip")
    return (rewards.sum(1, keepdim=True) - rewards) / (n - 1)


def check_baseline(baseline: str, num_samples: int) -> None:
    """Check a REINFORCE+ baseline setting (seed 004).

    Raises:
        ValueError: ``baseline`` other than ``greedy`` or ``mean``, or ``mean`` with fewer than
            2 samples per clip (it averages the *other* samples).
    """
    if baseline not in ("greedy", "mean"):
        raise ValueError(f"baseline must be greedy or mean, got {baseline!r}")
    if baseline == "mean" and num_samples < 2:
        raise ValueError("baseline 'mean' needs num_samples >= 2")


@contextlib.contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    """``model`` in eval mode and no gradients within the block; its mode restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def teacher_forced_logprobs(model, v: torch.Tensor, out: SampleOutput, max_len: int) -> SampleOutput:
    """``out`` with its log-probabilities and entropies recomputed by one teacher-forced pass of
    the decoder over its tokens (``model.decoder.forward_teacher``, the pass XE trains), with
    gradients, instead of the sampling loop's step by step.

    The pass equals the loop's steps (the same inputs and weights) except for dropout: in train
    mode it draws its own masks, so with decoder dropout the gradient is that of the sampled
    captions under another draw of the dropout noise than the one they were sampled with.

    Args:
        model: a :class:`~captionlib.models.captioner.Captioner`.
        v: (rows, embed) the embeddings ``out`` was sampled from (one row per sample; a
            memory decoder's encoding likewise), with gradients.
        out: :func:`~captionlib.decode.search.sample`'s output, e.g. drawn under ``no_grad``.
        max_len: the ``max_len`` it was sampled with: a caption cut there ends in a forced eos,
            whose log-probability is 0 (as in the loop).

    Returns:
        a :class:`~captionlib.decode.search.SampleOutput` with ``out``'s tokens, mask and
        states, and the new ``logprobs`` and ``entropy`` (rows, length).
    """
    width = out.tokens.size(1)
    # data-parallel ranks trim their samples to their own longest caption (sample's sync_every):
    # padded to the longest over the ranks, the pass's dropout draws rows of the same one-process
    # mask (row_sharded_randomness), so the ranks' generators stay in step
    tokens, mask = pad_to_global((out.tokens, out.mask)) if row_sharded() else (out.tokens, out.mask)
    ys_in = tokens[:, :-1].masked_fill(tokens[:, :-1] == model.eos_id, 0)  # the caption so far, 0 after eos
    logp = torch.log_softmax(model.decoder.forward_teacher(v, ys_in), dim=-1)[:, :width]  # (rows, length, vocab)
    # positions after eos hold 0, the padding id, of log-prob -inf: read eos's there, then mask
    lp = logp.gather(2, out.tokens.masked_fill(out.mask == 0, model.eos_id).unsqueeze(2)).squeeze(2) * out.mask
    if width == max_len:  # the last step's eos was forced: probability 1 under the truncated policy
        lp = torch.cat([lp[:, :-1], torch.zeros_like(lp[:, -1:])], dim=1)
    return SampleOutput(tokens=out.tokens, logprobs=lp, mask=out.mask, entropy=entropy(logp) * out.mask,
                        states=out.states)


def policy_gradient_loss(logprobs: torch.Tensor, mask: torch.Tensor, advantage: torch.Tensor) -> torch.Tensor:
    """-mean_i advantage_i * sum_t logprobs_it.

    Args:
        logprobs: (batch, length) log-probs of the sampled tokens.
        mask: (batch, length) 1 for tokens up to and including eos.
        advantage: (batch,) reward minus baseline (no gradient flows through it).
    """
    return -(advantage.detach() * (logprobs * mask).sum(1)).mean()


class SampledObjective(nn.Module):
    """Base of the sampling-based RL objectives: reward, tokenizer, greedy baseline helpers.

    Subclasses implement ``forward(model, (clip_ids, feats, feat_lens)) -> (loss, stats)``
    with at least the stats ``reward``, ``baseline``, ``advantage`` and ``entropy``.

    Args:
        reward: scores candidates (lists of words) of the train clips.
        tokenizer: token ids -> words for the reward.
        max_len: maximum caption length in tokens (eos included).
        temperature: sampling temperature (1.0 keeps the estimators unbiased).
        baseline_encoding: where the greedy baseline's audio embedding comes from:
            ``shared`` (the sampling pass's, detached) or ``separate`` (a second, eval-mode
            encoder pass).
        sample_logprobs: where :meth:`draw` takes the samples' log-probabilities from:
            ``loop`` (the sampling loop, with gradients through every step) or ``recompute``
            (samples drawn under ``no_grad``, then :func:`teacher_forced_logprobs`: one
            decoder pass, whose backward is XE's, instead of one per step; the same samples).

    Raises:
        ValueError: unknown ``baseline_encoding`` or ``sample_logprobs``.
    """

    #: the ``rl_conf`` keys (see :mod:`captionlib.rl`) and the source of a subclass
    Conf: type = SampledConf
    paper: str = ""
    #: device types where :meth:`baseline_and_samples` may decode the greedy baseline and the samples
    #: in one pass: there a decoding loop costs its steps' host time, not their arithmetic (README
    #: "Speed"), and one pass of both halves it; on the CPU, two passes keep the results of earlier
    #: versions to the last float
    joint_pass_devices: Tuple[str, ...] = ("cuda",)

    def __init__(
        self, reward: Reward, tokenizer: Tokenizer, max_len: int = DEFAULTS.max_len,
        temperature: float = DEFAULTS.temperature, baseline_encoding: str = SampledConf.baseline_encoding,
        sample_logprobs: str = SampledConf.sample_logprobs,
    ):
        super().__init__()
        if baseline_encoding not in BASELINE_ENCODINGS:
            raise ValueError(f"baseline_encoding must be one of {BASELINE_ENCODINGS}, got {baseline_encoding!r}")
        if sample_logprobs not in SAMPLE_LOGPROBS:
            raise ValueError(f"sample_logprobs must be one of {SAMPLE_LOGPROBS}, got {sample_logprobs!r}")
        self.reward, self.tokenizer = reward, tokenizer
        self.max_len, self.temperature = max_len, temperature
        self.baseline_encoding, self.sample_logprobs = baseline_encoding, sample_logprobs

    @classmethod
    def check_options(cls, opts, conf) -> None:
        """Refuse the options (:class:`captionlib.rl.options.RLOptions` and the ``rl_conf`` block
        ``conf``, a :attr:`Conf`) this objective cannot train with that can be told before anything
        is loaded (``train_rl`` and ``caption_rl_train --check_only`` call it; the constructor
        checks the same again). The base class has none.

        Raises:
            ValueError: in subclasses, naming the option.
        """

    @classmethod
    def describe(cls, conf: Mapping[str, Any], reward: str) -> str:
        """The ``paper`` cell of RESULTS.md of a model trained with the ``rl_conf`` keys ``conf``
        (as ``config.yaml`` holds them) and the reward described by ``reward`` (e.g. ``CIDEr-D``):
        ``"<paper>, reward <reward>"``, with SLL-ME named where ``entropy_weight`` is set."""
        if conf.get("entropy_weight"):
            return (f"{cls.paper} + max-entropy {conf['entropy_weight']:g} (SLL-ME, Chen & Jin 2020), "
                    f"reward {reward}")
        return f"{cls.paper}, reward {reward}"

    def draw(self, model, v: torch.Tensor, words: bool = True) -> Tuple[Optional[List[List[str]]], SampleOutput]:
        """One caption sampled per row of ``v`` (rows, embed), at ``temperature``: its words (a
        list per row; ``None`` if ``words`` is false) and its
        :class:`~captionlib.decode.search.SampleOutput` (rows, length), with log-probabilities and
        entropies as ``sample_logprobs`` says (differentiable where gradients are enabled). With
        ``recompute`` the words are read before the teacher-forced pass is queued: on a GPU the
        reward's work on the CPU then overlaps that pass."""
        if self.sample_logprobs == "loop":
            out = sample(model, v, self.max_len, temperature=self.temperature)
            return self.words(out.tokens) if words else None, out
        with torch.no_grad():
            out = sample(model, v, self.max_len, temperature=self.temperature)
        return self.words(out.tokens) if words else None, teacher_forced_logprobs(model, v, out, self.max_len)

    def words(self, tokens: torch.Tensor) -> List[List[str]]:
        """Token id rows (batch, length) -> lists of words (cut at eos)."""
        return [self.tokenizer.ids2text(row).split() for row in tokens.tolist()]

    @staticmethod
    def inputs(model, batch):
        """Move a ``collate_clips`` batch to the model's device: (clip_ids, feats, feat_lens)."""
        clips, feats, lens = batch
        dev = next(model.parameters()).device
        return list(clips), feats.to(dev), lens.to(dev)

    def greedy_words(self, model, v: torch.Tensor, feats: torch.Tensor, lens: torch.Tensor) -> List[List[str]]:
        """Greedy captions decoded in eval mode under ``no_grad`` (the self-critical baseline),
        from ``v`` (batch, embed) or from a fresh encoding of ``feats`` (batch, frames,
        n_mels) / ``lens`` (batch,), as ``baseline_encoding`` says."""
        v = self.baseline_input(model, v, feats, lens)
        with _eval_mode(model):
            return self.words(greedy_search(model, v, self.max_len))

    def baseline_input(self, model, v: torch.Tensor, feats: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        """The encoding the greedy baseline decodes: ``v`` detached (``baseline_encoding: shared``) or,
        for ``separate``, ``feats`` (batch, frames, n_mels) / ``lens`` (batch,) encoded again in eval mode
        without gradients."""
        if self.baseline_encoding == "shared":
            return v.detach()
        with _eval_mode(model):
            return model.encode(feats, lens)

    def one_pass(self, model, v: torch.Tensor) -> bool:
        """Whether :meth:`baseline_and_samples` decodes the baseline and the samples of the clips
        ``v`` (batch, embed) in one pass: ``sample_logprobs: recompute``, ``v`` on a device of
        :attr:`joint_pass_devices`, and :func:`eval_rows_exact` of the decoder."""
        return (self.sample_logprobs == "recompute" and pooled(v).device.type in self.joint_pass_devices
                and eval_rows_exact(model.decoder))

    def baseline_and_samples(self, model, v: torch.Tensor, feats: torch.Tensor, lens: torch.Tensor,
                             n: int) -> Tuple[List[List[str]], List[List[str]], SampleOutput]:
        """The greedy baseline (:meth:`greedy_words`) and :meth:`draw`'s ``n`` samples per clip of ``v``
        (batch, embed), clip-major (batch * n rows).

        Where :meth:`one_pass` says so (``sample_logprobs: recompute`` on a GPU, a decoder whose
        only training-mode behaviour is dropout), both are decoded in one pass without gradients
        (:func:`~captionlib.decode.search.sample`'s ``greedy_rows``: the baseline's rows arg-max
        and without dropout) before the samples'
        log-probabilities are recomputed: the captions and random draws of two passes, up to the float
        rounding of a larger batch. Otherwise two passes, the baseline's in eval mode.

        Returns:
            the baseline's words (one list per clip), and the samples' words and
            :class:`~captionlib.decode.search.SampleOutput` (batch * n rows), as :meth:`draw`'s.
        """
        vs = v.repeat_interleave(n, 0)
        if not self.one_pass(model, v):
            return (self.greedy_words(model, v, feats, lens), *self.draw(model, vs))
        vg = self.baseline_input(model, v, feats, lens)
        k = vg.size(0)
        with torch.no_grad():
            out = sample(model, cat_encodings([vg, vs]), self.max_len, temperature=self.temperature,
                         greedy_rows=k)
        samples = trimmed(out.rows(slice(k, None)))
        words = self.words(out.tokens)  # before the teacher-forced pass is queued (see draw)
        return words[:k], words[k:], teacher_forced_logprobs(model, vs, samples, self.max_len)

    def scored_samples(self, model, batch, n: int) -> Tuple[List[str], torch.Tensor, torch.Tensor, SampleOutput,
                                                            torch.Tensor]:
        """:meth:`draw`'s ``n`` samples per clip of a ``collate_clips`` batch, scored by the reward.

        Returns:
            (clip ids, feats (batch, frames, n_mels), lens (batch,), the samples' output
            (batch * n rows, clip-major), their rewards (batch, n)).
        """
        clips, feats, lens = self.inputs(model, batch)
        words, out = self.draw(model, model.encode(feats, lens).repeat_interleave(n, 0))
        keys = [c for c in clips for _ in range(n)]
        return clips, feats, lens, out, self.rewards(keys, words, feats.device).view(len(clips), n)

    def rewards(self, keys: Sequence[str], candidates: Sequence[Sequence[str]], device) -> torch.Tensor:
        """Rewards (num_candidates,) as a float tensor on ``device`` (one scoring call)."""
        return torch.as_tensor(self.reward(keys, candidates)["reward"], dtype=torch.float32, device=device)


class PolicyGradient(SampledObjective):
    """Objective ``(model, (clip_ids, feats, feat_lens)) -> (loss, stats)`` for SCST/REINFORCE+.

    Its random draws are the same on every data-parallel rank (``row_sharded_randomness``),
    so N ranks equal one process on the global batch.

    Args:
        reward, tokenizer, max_len, temperature: see :class:`SampledObjective`.
        num_samples: samples per clip (SCST: 1).
        baseline: ``greedy`` (self-critical) or ``mean`` (of the other samples).
        baseline_encoding: see :class:`SampledObjective`.
        entropy_weight: weight of the maximum-entropy term (SLL-ME, see the module
            docstring; 0: off).
        sample_logprobs: see :class:`SampledObjective`.

    Raises:
        ValueError: unknown ``baseline``, ``mean`` with one sample, or a negative
            ``entropy_weight``.
    """

    row_sharded_randomness = True
    Conf = ReinforcePlusConf
    paper = "Li & Gong 2019 (REINFORCE+)"

    def __init__(
        self,
        reward: Reward,
        tokenizer: Tokenizer,
        num_samples: int = ReinforcePlusConf.num_samples,
        baseline: str = ReinforcePlusConf.baseline,
        max_len: int = DEFAULTS.max_len,
        temperature: float = DEFAULTS.temperature,
        baseline_encoding: str = ReinforcePlusConf.baseline_encoding,
        entropy_weight: float = ReinforcePlusConf.entropy_weight,
        sample_logprobs: str = ReinforcePlusConf.sample_logprobs,
    ):
        super().__init__(reward, tokenizer, max_len, temperature, baseline_encoding, sample_logprobs)
        if entropy_weight < 0:
            raise ValueError(f"entropy_weight must be >= 0, got {entropy_weight}")
        self.entropy_weight = entropy_weight
        check_baseline(baseline, num_samples)
        self.num_samples, self.baseline = num_samples, baseline

    @classmethod
    def check_options(cls, opts, conf) -> None:
        """:func:`check_baseline` of the ``rl_conf`` keys ``baseline`` and ``num_samples``.

        Raises:
            ValueError: ``baseline: mean`` with ``num_samples`` < 2.
        """
        check_baseline(conf.baseline, conf.num_samples)

    @classmethod
    def from_options(cls, opts, conf, model, reward: Reward, tokenizer: Tokenizer, train_set) -> "PolicyGradient":
        """REINFORCE+ (``--rl_algo reinforce_plus``) from :class:`captionlib.rl.options.RLOptions`
        (``max_len``, ``temperature``) and its ``rl_conf`` block ``conf`` (:class:`ReinforcePlusConf`).

        Raises:
            ValueError: bad ``baseline``/``baseline_encoding``/``sample_logprobs``, or ``mean``
                with one sample.
        """
        return cls(reward, tokenizer, conf.num_samples, conf.baseline, opts.max_len, opts.temperature,
                   conf.baseline_encoding, conf.entropy_weight, conf.sample_logprobs)

    def forward(self, model, batch) -> Tuple[torch.Tensor, Dict[str, float]]:
        clips, feats, lens = self.inputs(model, batch)
        return self.loss_from_embedding(model, clips, model.encode(feats, lens), feats, lens)

    def loss_from_embedding(
        self, model, clips: List[str], v: torch.Tensor, feats: torch.Tensor, lens: torch.Tensor
    ) -> Tuple[torch.Tensor, Dict[str, float]]:
        """The policy-gradient loss given the audio embeddings ``v`` (batch, embed) already
        computed with gradients (so a multitask objective can share them)."""
        n = self.num_samples
        if self.baseline == "greedy":
            greedy_words, words, out = self.baseline_and_samples(model, v, feats, lens, n)
        else:
            greedy_words, (words, out) = [], self.draw(model, v.repeat_interleave(n, 0))
        keys: List[str] = [c for c in clips for _ in range(n)]
        r_all = self.rewards(keys + clips[: len(greedy_words)], words + greedy_words, v.device)
        r = r_all[: len(keys)].view(len(clips), n)
        b = r_all[len(keys):].view(-1, 1).expand_as(r) if self.baseline == "greedy" else mean_of_others(r)
        adv = (r - b).reshape(-1)
        loss = policy_gradient_loss(out.logprobs, out.mask, adv)
        if self.entropy_weight > 0:
            loss = loss - self.entropy_weight * out.entropy.sum(1).mean()
        ntok = out.mask.sum()
        return loss, {
            "reward": r.mean().item(),
            "baseline": b.mean().item(),
            "advantage": adv.mean().item(),
            "entropy": (out.entropy.sum() / ntok).item(),
            "sample_len": (ntok / out.mask.size(0)).item(),
        }


class SCST(PolicyGradient):
    """SCST (``--rl_algo scst``): :class:`PolicyGradient` with one sample per clip and the
    greedy baseline (Rennie et al. 2017; seed 000 eq. 4)."""

    Conf = SCSTConf
    paper = "Rennie et al. 2017; Xu et al. 2020"

    @classmethod
    def check_options(cls, opts, conf) -> None:
        """None to check: SCST's ``rl_conf`` has no ``num_samples`` or ``baseline``."""

    @classmethod
    def from_options(cls, opts, conf, model, reward: Reward, tokenizer: Tokenizer, train_set) -> "SCST":
        """SCST from :class:`captionlib.rl.options.RLOptions` and its ``rl_conf`` block ``conf``
        (:class:`SCSTConf`): one sample per clip, the greedy baseline.

        Raises:
            ValueError: bad ``baseline_encoding`` or ``sample_logprobs``.
        """
        return cls(reward, tokenizer, 1, "greedy", opts.max_len, opts.temperature, conf.baseline_encoding,
                   conf.entropy_weight, conf.sample_logprobs)
