"""XE training, the trainer and the pieces shared with RL fine-tuning (stages 5-6).

The options of both entry points are dataclasses in :mod:`captionlib.train.options`.
"""

#: Validation metrics a model can be selected by (``--best_model_criterion``) and whether
#: higher or lower is better (kept here, free of torch imports, so ``--help`` stays fast).
SELECTION_MODES = {"cider_d": "max", "bleu_4": "max", "loss": "min"}
