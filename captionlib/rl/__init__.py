"""RL fine-tuning objectives (stage 6); the table of algorithms is in :mod:`captionlib.rl.train`."""

#: Values of ``--rl_algo`` (kept here, free of torch imports, so ``--help`` stays fast).
RL_ALGOS = ("scst", "reinforce_plus", "sle", "ac", "mc_pg", "multitask")
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
