"""Reporting over finished experiments, the top layer of the library (above ``rl``):

* :mod:`captionlib.report.results`: the ``RESULTS.md`` table of an experiment tree
  (``caption_results``);
* :mod:`captionlib.report.plot`: training curves from ``history.json`` files
  (``caption_plot_history``).
"""
