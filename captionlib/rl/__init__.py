"""RL fine-tuning objectives (stage 6); the table of algorithms is in :mod:`captionlib.rl.train`."""

#: Values of ``--rl_algo`` (kept here, free of torch imports, so ``--help`` stays fast).
RL_ALGOS = ("scst", "reinforce_plus", "sle", "ac", "mc_pg", "multitask")
