"""Token lists and tokenizers: word vocabulary (min-count) or sentencepiece BPE.

A token list is a text file with one token per line; the line number (from 0) is the
token id. Layout (ESPnet's): ``<blank>`` (0, padding), ``<unk>`` (1), the tokens by
decreasing train-set frequency (ties broken alphabetically), ``<sos/eos>`` (last).
Captions are cleaned with :func:`captionlib.text.cleaner.clean_caption` first (seed 000:
lower-case, no punctuation), so the model only ever emits cleaned text.
"""

import logging
import os
import re
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Union

import sentencepiece as spm

from captionlib.text.cleaner import clean_caption

BLANK = "<blank>"
UNK = "<unk>"
SOS_EOS = "<sos/eos>"
BPE_MODEL = "bpe.model"
#: sentencepiece's word-boundary mark; the cleaner removes it, so no word token holds it.
SPM_SPACE = "\u2581"


class TokenListOptionError(ValueError):
    """A :func:`build_token_list` setting that cannot work with these captions.

    The message starts with the setting's name and value (``nbpe 3 is too small: ...``).

    Attributes:
        option: the name of the setting (``nbpe`` or ``min_count``), for a binary to name
            its ``--option``.
    """

    def __init__(self, option: str, message: str):
        super().__init__(message)
        self.option = option


def read_token_list(path: Union[str, Path]) -> List[str]:
    """Read a token list (one token per line).

    Raises:
        ValueError: on an empty line or a duplicate token, naming file and line.
    """
    tokens: List[str] = []
    seen = set()
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            tok = line.rstrip("\n")
            if not tok or " " in tok:
                raise ValueError(f"{path}:{lineno}: empty token or token with a space: {line!r}")
            if tok in seen:
                raise ValueError(f"{path}:{lineno}: duplicate token {tok!r}")
            seen.add(tok)
            tokens.append(tok)
    if len(tokens) < 3 or tokens[0] != BLANK or tokens[1] != UNK or tokens[-1] != SOS_EOS:
        raise ValueError(f"{path}: a token list starts with {BLANK}, {UNK} and ends with {SOS_EOS}")
    return tokens


class Tokenizer:
    """Text <-> token ids for one token list (word-level, or BPE with a sentencepiece model).

    Args:
        token_list: the tokens (index = id), see :func:`read_token_list`.
        bpemodel: path of a sentencepiece model for ``token_type == "bpe"``, else ``None``.
        bpe_proto: the same model as serialized bytes (as stored in model files).

    Attributes:
        pad_id (0), unk_id (1), eos_id (= sos id, last index), vocab_size.
    """

    def __init__(
        self, token_list: Sequence[str], bpemodel: Optional[str] = None, bpe_proto: Optional[bytes] = None
    ):
        self.token_list = list(token_list)
        self.token2id: Dict[str, int] = {t: i for i, t in enumerate(self.token_list)}
        self.pad_id = 0
        self.unk_id = 1
        self.eos_id = len(self.token_list) - 1
        self.vocab_size = len(self.token_list)
        self.bpemodel = bpemodel
        self._sp = None
        if bpemodel is not None or bpe_proto is not None:
            if bpe_proto is not None:
                self._sp = spm.SentencePieceProcessor(model_proto=bpe_proto)
            else:
                self._sp = spm.SentencePieceProcessor(model_file=str(bpemodel))

    @property
    def bpe_proto(self) -> Optional[bytes]:
        """The sentencepiece model as bytes (``None`` for word tokens), stored in model files."""
        return None if self._sp is None else self._sp.serialized_model_proto()

    def text2tokens(self, text: str) -> List[str]:
        """Clean ``text`` and split it into tokens (words, or BPE pieces)."""
        text = clean_caption(text)
        if self._sp is not None:
            return self._sp.encode(text, out_type=str)
        return text.split()

    def text2ids(self, text: str) -> List[int]:
        """Clean, tokenize and map to ids (unknown tokens -> ``unk_id``); no eos appended."""
        return [self.token2id.get(t, self.unk_id) for t in self.text2tokens(text)]

    def ids2text(self, ids: Iterable[int]) -> str:
        """Map ids back to text, stopping at the first eos or padding id."""
        toks = []
        for i in ids:
            i = int(i)
            if i == self.eos_id or i == self.pad_id:
                break
            toks.append(self.token_list[i])
        if self._sp is not None:
            return self._sp.decode_pieces(toks)
        return " ".join(toks)


def build_token_list(
    texts: Iterable[str],
    output_dir: Union[str, Path],
    token_type: str = "word",
    min_count: int = 1,
    nbpe: int = 1000,
) -> Path:
    """Fit the token inventory on train captions and write ``<output_dir>/tokens.txt``.

    Args:
        texts: raw train captions (cleaned here).
        output_dir: destination; for BPE also receives ``bpe.model``/``bpe.vocab``.
        token_type: ``word`` (vocabulary of words seen at least ``min_count`` times) or
            ``bpe`` (sentencepiece BPE with ``nbpe`` pieces, Sennrich et al. 2016).
        min_count: minimum train count of a word (word only).
        nbpe: sentencepiece vocabulary size (bpe only).

    Returns:
        Path of the written token list. A word run also removes a ``bpe.model``/``bpe.vocab``
        left in ``output_dir`` by an earlier BPE run (with a warning): :func:`load_tokenizer`
        would otherwise take the word list for BPE pieces.

    Raises:
        ValueError: unknown token_type, or no caption with a word left after cleaning.
        TokenListOptionError: ``min_count`` above the count of every word (an empty
            vocabulary), or ``nbpe`` below 1 or below the pieces that BPE needs (one per
            distinct character, plus ``<unk>``).
    """
    if token_type not in ("word", "bpe"):
        raise ValueError(f"token_type must be word or bpe, got {token_type!r}")
    cleaned = [clean_caption(t) for t in texts]
    cleaned = [t for t in cleaned if t]
    if not cleaned:
        raise ValueError("no caption has a word left after cleaning (lower-case, punctuation removed)")
    output_dir = Path(output_dir)
    if token_type == "word":
        counts = Counter(w for t in cleaned for w in t.split())
        vocab = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
        logging.info(
            "word vocabulary: %d of %d words with count >= %d", len(vocab), len(counts), min_count
        )
        if not vocab:
            top, top_count = min(counts.items(), key=lambda wc: (-wc[1], wc[0]))
            raise TokenListOptionError(
                "min_count",
                f"min_count {min_count} leaves no word in the vocabulary: the most frequent word "
                f"({top!r}) occurs {top_count} times; use at most {top_count}",
            )
        output_dir.mkdir(parents=True, exist_ok=True)
    else:
        vocab = _train_bpe(cleaned, output_dir, nbpe)
        logging.info("BPE inventory: %d pieces", len(vocab))
    out = output_dir / "tokens.txt"
    tmp = out.with_suffix(".txt.tmp")
    tmp.write_text("\n".join([BLANK, UNK] + vocab + [SOS_EOS]) + "\n", encoding="utf-8")
    os.replace(tmp, out)
    if token_type == "word":
        for stale in (output_dir / BPE_MODEL, output_dir / "bpe.vocab"):
            if stale.exists():
                stale.unlink()
                logging.warning("removed %s of an earlier BPE run: it does not belong to the word list %s", stale, out)
    return out


def _train_bpe(cleaned: List[str], output_dir: Path, nbpe: int) -> List[str]:
    """Train sentencepiece BPE of ``nbpe`` pieces on the cleaned captions into
    ``output_dir/bpe.model`` and return its pieces but ``<unk>`` (see :func:`build_token_list`).

    Raises:
        TokenListOptionError: ``nbpe`` below 1 or below what BPE needs for these captions.
    """
    if nbpe < 1:
        raise TokenListOptionError("nbpe", f"nbpe {nbpe} is too small: it must be >= 1")
    output_dir.mkdir(parents=True, exist_ok=True)
    train_txt = output_dir / "train_text.txt"
    train_txt.write_text("\n".join(cleaned) + "\n", encoding="utf-8")
    try:
        spm.SentencePieceTrainer.train(
            input=str(train_txt),
            model_prefix=str(output_dir / "bpe"),
            vocab_size=nbpe,
            model_type="bpe",
            character_coverage=1.0,
            unk_surface=UNK,
            bos_id=-1,
            eos_id=-1,
            unk_id=0,
            hard_vocab_limit=False,
            minloglevel=2,
        )
    except RuntimeError as e:  # sentencepiece's own checks; say which setting to change
        msg = " ".join(str(e).split())
        m = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", msg)
        if m:
            raise TokenListOptionError(
                "nbpe",
                f"nbpe {nbpe} is too small: BPE needs at least {m[2]} pieces for these captions (one per "
                f"distinct character, plus {UNK})",
            ) from None
        raise TokenListOptionError("nbpe", f"nbpe {nbpe}: sentencepiece BPE training failed: {msg}") from None
    sp = spm.SentencePieceProcessor(model_file=str(output_dir / BPE_MODEL))
    return [sp.id_to_piece(i) for i in range(1, sp.get_piece_size())]


def load_tokenizer(token_list: Union[str, Path]) -> Tokenizer:
    """Load a :class:`Tokenizer` from ``tokens.txt`` (uses ``bpe.model`` beside it if present).

    The two must belong together, as :func:`build_token_list` writes them: with a
    ``bpe.model`` the tokens between ``<unk>`` and ``<sos/eos>`` are exactly its pieces;
    without one no token holds sentencepiece's word mark (a BPE list whose model is gone).

    Raises:
        ValueError: as :func:`read_token_list`; a ``bpe.model`` that sentencepiece cannot
            load; a token list and ``bpe.model`` that do not belong together (naming both);
            a BPE token list without its ``bpe.model``.
    """
    token_list = Path(token_list)
    tokens = read_token_list(token_list)
    bpemodel = token_list.parent / BPE_MODEL
    if not bpemodel.exists():
        bpe_like = [t for t in tokens if t.startswith(SPM_SPACE)]
        if bpe_like:
            raise ValueError(
                f"{token_list}: {len(bpe_like)} tokens are BPE pieces (e.g. {bpe_like[0]!r}) but there is no "
                f"{bpemodel}; rerun caption_tokenize --token_type bpe into this directory"
            )
        return Tokenizer(tokens)
    try:
        tokenizer = Tokenizer(tokens, str(bpemodel))
    except (RuntimeError, OSError) as e:
        raise ValueError(f"{bpemodel}: not a sentencepiece model ({' '.join(str(e).split())})") from None
    sp = tokenizer._sp
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not sp.is_unknown(i)]
    middle = tokens[2:-1]
    piece_set = set(pieces)
    not_pieces = [t for t in middle if t not in piece_set]
    missing = [p for p in pieces if p not in tokenizer.token2id]
    if not_pieces or missing:
        shown = f" (e.g. {not_pieces[0]!r} on line {tokens.index(not_pieces[0]) + 1})" if not_pieces else ""
        raise ValueError(
            f"{token_list} and {bpemodel} do not belong together: {len(not_pieces)} of the {len(middle)} tokens "
            f"are not pieces of the BPE model{shown} and {len(missing)} of its {len(pieces)} pieces are not in "
            f"the token list (a word token list with a stale bpe.model beside it?); rerun caption_tokenize "
            f"into this directory, or remove {bpemodel} if the list is a word list"
        )
    return tokenizer
