"""Corpus preparations: official annotation files -> Kaldi-style data directories.

One module per corpus, each the body of a ``caption_prepare_<corpus>`` binary:

* :mod:`captionlib.corpora.clotho`: Clotho v2.1 (audio);
* :mod:`captionlib.corpora.audiocaps`: AudioCaps (audio fetched from YouTube);
* :mod:`captionlib.corpora.coco`: MS COCO, Karpathy split (images);
* :mod:`captionlib.corpora.msvd`, :mod:`captionlib.corpora.msrvtt`: MSVD, MSR-VTT (videos);
* :mod:`captionlib.corpora.prep`: what the corpus modules share (bad-record handling, caption
  and media checks, the data-dir writer).

Layering: this package sits above :mod:`captionlib.io` (data dirs, feature files) and the front
ends (:mod:`captionlib.audio`, :mod:`captionlib.visual`), and nothing below it imports it.
"""
