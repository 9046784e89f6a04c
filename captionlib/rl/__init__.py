"""RL fine-tuning objectives (stage 6); the table of algorithms is in :mod:`captionlib.rl.train`.

The objective registry, :data:`RL_OBJECTIVES`, maps each ``--rl_algo`` to its class, like
the model registry (``ENCODERS``, ``DECODERS``) maps ``encoder:`` and ``decoder:``. A class
is given as ``"module:Class"`` and imported when used, so that this package (and so every
binary's ``--help``) imports no torch. Each class declares

* ``Conf``: the dataclass of its ``rl_conf`` block (fields made by
  :func:`captionlib.train.options.option`: default, help, choices, range), as ``encoder_conf``
  is the encoder's: ``--rl_algo sle --rl_conf "{num_samples: 5, alpha: 0.75}"``;
* ``paper``: its source, and ``describe(conf, reward)``: its ``paper`` cell of RESULTS.md;
* ``from_options(opts, conf, model, reward, tokenizer, train_set)``: the objective module
  ``(model, batch) -> (loss, stats)``, and optionally ``check_options(opts, conf)``: the
  combinations it cannot train with.

Adding an objective means one file with such a class and one entry here (or a
:func:`register_objective` call); ``rl/options.py`` and ``report/`` name no objective.
"""

import dataclasses
import importlib
from typing import Any, Dict, Mapping, Tuple, Union

#: ``--rl_algo`` -> its objective class (``"module:Class"``, imported by :func:`objective_class`).
RL_OBJECTIVES: Dict[str, Union[str, type]] = {
    "scst": "captionlib.rl.policy_gradient:SCST",
    "reinforce_plus": "captionlib.rl.policy_gradient:PolicyGradient",
    "sle": "captionlib.rl.sle:SLE",
    "ac": "captionlib.rl.actor_critic:ActorCritic",
    "mc_pg": "captionlib.rl.mc_pg:MonteCarloPG",
    "multitask": "captionlib.rl.multitask:MultiTask",
    "ppo": "captionlib.rl.ppo:PPO",
    "grpo": "captionlib.rl.grpo:GRPO",
    "dpo": "captionlib.rl.dpo:DPO",
}
#: Values of ``--rl_algo``: the built-in objectives.
RL_ALGOS = tuple(RL_OBJECTIVES)


def register_objective(name: str, cls: type) -> None:
    """Add (or replace) the objective of ``--rl_algo name``.

    Args:
        name: the ``rl_algo`` value.
        cls: a class with a ``Conf`` dataclass (its ``rl_conf`` keys), a ``paper`` string and a
            ``from_options(opts, conf, model, reward, tokenizer, train_set)`` classmethod
            returning the objective (see the module docstring).

    Raises:
        TypeError: ``cls`` lacks one of them.
    """
    if not callable(getattr(cls, "from_options", None)):
        raise TypeError(f"objective {name!r}: {cls!r} has no from_options(opts, conf, model, reward, tokenizer, "
                        "train_set)")
    if not dataclasses.is_dataclass(getattr(cls, "Conf", None)) or not isinstance(getattr(cls, "paper", None), str):
        raise TypeError(f"objective {name!r}: {cls!r} needs a Conf dataclass (its rl_conf keys) and a paper string")
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


def objective_conf(cls: type, rl_conf: Mapping[str, Any], rl_algo: str) -> Any:
    """The ``rl_conf`` block of ``--rl_algo rl_algo`` as its class's ``Conf``, checked
    (:func:`captionlib.utils.cli.options_from_mapping`).

    Raises:
        ValueError: ``rl_conf (rl_algo sle): unknown key 'x'; its keys: ...``, or a value of
            the wrong type, outside its choices or its range.
    """
    from captionlib.utils.cli import options_from_mapping

    return options_from_mapping(cls.Conf, rl_conf, f"rl_conf (rl_algo {rl_algo})")


def check_rl_options(opts) -> Tuple[type, Any]:
    """Check the options of an RL run before anything is loaded; return the objective class
    and its ``rl_conf`` block (its ``Conf``).

    Checks each option's range and choices (:func:`captionlib.utils.cli.check_options`), that
    ``rl_algo`` is registered, its ``rl_conf`` keys (:func:`objective_conf`), the ``reward`` spec
    (and that SPICE can run where a term needs it: :func:`captionlib.rl.rewards.check_reward`),
    and the objective's own combinations (its ``check_options(opts, conf)`` classmethod, e.g.
    actor-critic's embedding reward with ``fluency_penalty``). What needs the model or the data
    (e.g. ``attribute_input: cnn`` with a model without a CNN) is checked when they are loaded.
    ``caption_rl_train --check_only`` runs this alone: the recipe checks every algorithm of
    ``--rl_algo`` before it trains any.

    Args:
        opts: a :class:`captionlib.rl.options.RLOptions`.

    Raises:
        ValueError: one line naming the option.
    """
    from captionlib.rl.rewards import check_reward
    from captionlib.utils.cli import check_options

    check_options(opts)
    cls = objective_class(opts.rl_algo)
    conf = objective_conf(cls, opts.rl_conf, opts.rl_algo)
    check_reward(opts.reward, opts.spice_lib_dir)
    if opts.fluency_model and not opts.fluency_penalty > 0:
        raise ValueError(f"fluency_model {opts.fluency_model} is read only with fluency_penalty > 0")
    if callable(getattr(cls, "check_options", None)):
        cls.check_options(opts, conf)
    return cls, conf


def objective_paper(config: Mapping[str, Any]) -> str:
    """The ``paper`` cell of RESULTS.md for an RL model dir, from its ``config.yaml``: the
    objective class's ``describe(conf, reward)`` with the reward of ``config["reward"]``
    (:func:`captionlib.rl.rewards.describe_reward`). A ``config.yaml`` written before the
    ``rl_conf`` blocks (flat keys, :data:`captionlib.rl.options.MOVED_TO_RL_CONF`) is read
    with its keys moved into the block.

    Returns:
        e.g. ``"Chen & Jin 2020 (SLE), reward CIDEr-D"``; ``"rl_algo <name>"`` for an objective
        that is not registered in this process.
    """
    from captionlib.rl.options import MOVED_TO_RL_CONF
    from captionlib.rl.rewards import describe_reward

    algo = str(config.get("rl_algo"))
    try:
        cls = objective_class(algo)
    except ValueError:
        return f"rl_algo {algo}"
    conf = dict(config.get("rl_conf") or {})
    if "rl_conf" not in config:  # written before rl_conf
        keys = {f.name for f in dataclasses.fields(cls.Conf)}
        conf = {new: config[old] for old, (_, new) in MOVED_TO_RL_CONF.items() if old in config and new in keys}
    spec = config.get("reward")
    if spec is None:
        return f"{cls.paper}, reward not recorded (no reward: in config.yaml)"
    try:
        reward = describe_reward(str(spec))
    except ValueError:
        reward = str(spec)
    return cls.describe(conf, reward)
