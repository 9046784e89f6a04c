"""Caption text cleaner shared by the tokenizer, the CIDEr-D reward and scoring.

Follows seed 000 (Xu et al., DCASE 2020): lower-case and remove punctuation. The same
function is applied to references when building the vocabulary and the CIDEr-D
document frequencies and to references and hypotheses inside the reward, so that the
reward sees exactly the words the model can emit.
"""

import re
import unicodedata
from typing import List

_PUNCT = re.compile(r"[^\w\s']|_")
_SPACE = re.compile(r"\s+")


def clean_caption(text: str) -> str:
    """Lower-case, turn punctuation into spaces (apostrophes are dropped), squeeze spaces.

    Example:
        >>> clean_caption("A dog barks, twice.  Loudly!")
        'a dog barks twice loudly'
        >>> clean_caption("The dog's bark")
        'the dogs bark'
    """
    text = unicodedata.normalize("NFKC", text).lower()
    text = _PUNCT.sub(" ", text).replace("'", "")
    return _SPACE.sub(" ", text).strip()


def clean_words(text: str) -> List[str]:
    """:func:`clean_caption` split into words."""
    return clean_caption(text).split()
