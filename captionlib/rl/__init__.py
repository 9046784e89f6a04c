"""RL fine-tuning objectives (stage 6); the table of algorithms is in :mod:`captionlib.rl.train`.

The objective registry, :data:`RL_OBJECTIVES`, maps each ``--rl_algo`` to its class, like
the model registry (``ENCODERS``, ``DECODERS``) maps ``encoder:`` and ``decoder:``. A class
is given as ``"module:Class"`` and imported when used, so that this package (and so every
binary's ``--help``) imports no torch. Each class has a
``from_options(opts, model, reward, tokenizer, train_set)`` classmethod that reads and
validates its own options of :class:`captionlib.rl.options.RLOptions` and returns the
objective module ``(model, batch) -> (loss, stats)``. Adding an objective means one class
and one entry here (or a :func:`register_objective` call).
"""

import importlib
from typing import Dict, Union

#: ``--rl_algo`` -> its objective class (``"module:Class"``, imported by :func:`objective_class`).
RL_OBJECTIVES: Dict[str, Union[str, type]] = {
    "scst": "captionlib.rl.policy_gradient:SCST",
    "reinforce_plus": "captionlib.rl.policy_gradient:PolicyGradient",
    "sle": "captionlib.rl.sle:SLE",
    "ac": "captionlib.rl.actor_critic:ActorCritic",
    "mc_pg": "captionlib.rl.mc_pg:MonteCarloPG",
    "multitask": "captionlib.rl.multitask:MultiTask",
}
#: Values of ``--rl_algo``: the built-in objectives.
RL_ALGOS = tuple(RL_OBJECTIVES)
#: SLE (seed 001) distances and diversity baselines, see :mod:`captionlib.rl.sle`.
SLE_DISTANCES = ("bleu34_sum", "bleu34_mean")
SLE_DIVERSITY_BASELINES = ("leave_one_out", "all_pairs")
#: Multitask (seed 004) attribute words and the input of the attribute head, see :mod:`captionlib.rl.multitask`.
ATTRIBUTE_SELECTIONS = ("pos", "stopwords")
ATTRIBUTE_INPUTS = ("cnn", "embedding")
#: Actor-critic (seed 002) rewards (``metric``: the ``--reward`` metrics, i.e. A2C with a
#: CIDEr-D reward; ``embedding``: the paper's audio-caption embedding cosine) and value
#: encoders (the captioner's detached embedding, or the critic's own), see :mod:`captionlib.rl.actor_critic`.
AC_REWARDS = ("metric", "embedding")
AC_VALUE_ENCODERS = ("shared", "separate")
#: Where the sampled captions' log-probabilities come from (``--sample_logprobs``): the sampling
#: loop, or one teacher-forced pass over them, see :meth:`captionlib.rl.policy_gradient.SampledObjective.draw`.
SAMPLE_LOGPROBS = ("loop", "recompute")


def register_objective(name: str, cls: type) -> None:
    """Add (or replace) the objective of ``--rl_algo name``.

    Args:
        name: the ``rl_algo`` value.
        cls: a class with a ``from_options(opts, model, reward, tokenizer, train_set)``
            classmethod returning the objective.

    Raises:
        TypeError: ``cls`` has no ``from_options``.
    """
    if not callable(getattr(cls, "from_options", None)):
        raise TypeError(f"objective {name!r}: {cls!r} has no from_options(opts, model, reward, tokenizer, train_set)")
    RL_OBJECTIVES[name] = cls


def objective_class(name: str) -> type:
    """The objective class of ``--rl_algo name`` (imported on first use).

    Raises:
        ValueError: ``name`` is not registered.
    """
    if name not in RL_OBJECTIVES:
        raise ValueError(f"unknown rl_algo {name!r}; choose from {', '.join(RL_OBJECTIVES)}")
    cls = RL_OBJECTIVES[name]
    if isinstance(cls, str):
        module, attr = cls.split(":")
        cls = RL_OBJECTIVES[name] = getattr(importlib.import_module(module), attr)
    return cls


def check_rl_options(opts) -> type:
    """Check the options of an RL run before anything is loaded, and return the objective class.

    Checks each option's range and choices (:func:`captionlib.utils.cli.check_options`), that
    ``rl_algo`` is registered, that ``entropy_weight`` and ``sample_logprobs: recompute`` are read
    by the objective, the ``reward`` spec (and that SPICE can run where a term needs it:
    :func:`captionlib.rl.rewards.check_reward`), and the objective's own combinations (its
    ``check_options`` classmethod, e.g. SLE's ``num_samples >= 2``). What needs the model or the
    data (e.g. ``attribute_input: cnn`` with a model without a CNN) is checked when they are
    loaded. ``caption_rl_train --check_only`` runs this alone: the recipe checks every algorithm
    of ``--rl_algo`` before it trains any.

    Args:
        opts: a :class:`captionlib.rl.options.RLOptions`.

    Raises:
        ValueError: one line naming the option.
    """
    from captionlib.rl.rewards import check_reward
    from captionlib.utils.cli import check_options

    check_options(opts)
    cls = objective_class(opts.rl_algo)
    read = getattr(cls, "options_read", ())
    if opts.entropy_weight > 0 and "entropy_weight" not in read:
        raise ValueError(f"entropy_weight (SLL-ME) is for scst and reinforce_plus, not rl_algo {opts.rl_algo}")
    if opts.sample_logprobs != "loop" and "sample_logprobs" not in read:
        raise ValueError(f"sample_logprobs {opts.sample_logprobs} is not read by rl_algo {opts.rl_algo} "
                         "(its samples' log-probabilities come from its own loop)")
    check_reward(opts.reward, opts.spice_lib_dir)
    if opts.fluency_penalty > 0 and getattr(opts, "ac_reward", "metric") == "embedding" and opts.rl_algo == "ac":
        raise ValueError("fluency_penalty applies to the --reward metrics, not to ac_reward embedding")
    if opts.fluency_model and not opts.fluency_penalty > 0:
        raise ValueError(f"fluency_model {opts.fluency_model} is read only with fluency_penalty > 0")
    if callable(getattr(cls, "check_options", None)):
        cls.check_options(opts)
    return cls
