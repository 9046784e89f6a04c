"""Caption metrics: exact re-implementations of pycocoevalcap's and fast RL rewards.

Main entry points:

* :class:`captionlib.metrics.cider_d.DocumentFrequency`, :class:`~captionlib.metrics.cider_d.CiderD`,
  :func:`~captionlib.metrics.cider_d.corpus_cider_d`: CIDEr-D (reward engine and corpus score);
* :mod:`captionlib.metrics.bleu`, :mod:`captionlib.metrics.rouge`: BLEU-1..4 and ROUGE-L;
* :mod:`captionlib.metrics.diversity`: Div-1, Div-2, mBLEU-4, vocabulary size, novelty;
* :mod:`captionlib.metrics.scorer`: the ``caption_score`` pipeline (PTB tokenizer, METEOR,
  SPICE/SPIDEr through Java, ``score.json``);
* :mod:`captionlib.metrics.fluency_rules` (rules, the -FL penalty), :mod:`~captionlib.metrics.fluency`
  (the error detector),
  :mod:`~captionlib.metrics.fluency_corrupt` (FENSE's synthetic errors),
  :mod:`~captionlib.metrics.fluency_train` (``caption_train_fluency``),
  :mod:`~captionlib.metrics.fluency_score` (FER, CIDEr-D-FL, SPIDEr-FL of ``caption_score``).
"""

from captionlib.metrics.bleu import corpus_bleu, pairwise_bleu, sentence_bleu
from captionlib.metrics.cider_d import CiderD, DocumentFrequency, corpus_cider_d
from captionlib.metrics.diversity import diversity_metrics
from captionlib.metrics.rouge import corpus_rouge_l, sentence_rouge_l

__all__ = [
    "CiderD",
    "DocumentFrequency",
    "corpus_cider_d",
    "corpus_bleu",
    "sentence_bleu",
    "pairwise_bleu",
    "corpus_rouge_l",
    "sentence_rouge_l",
    "diversity_metrics",
]
