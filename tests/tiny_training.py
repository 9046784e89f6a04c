"""A tiny real training run for the tests of the training entry points: the dump dir of
:func:`dump_dirs.tiny_dump_dir`, its token list, and a one-epoch XE model of a linear
encoder and a GRU-8 decoder trained on it (stage 5), with the CIDEr-D document frequencies
that RL fine-tuning (stage 6) reads."""

from pathlib import Path

from dump_dirs import tiny_dump_dir

TOKENS = "<blank>\n<unk>\na\nand\nbarks\nbird\ndog\nfalls\nrain\nsings\n<sos/eos>\n"
SMALL_MODEL = {"encoder": "linear", "encoder_conf": {"output_size": 8}, "decoder": "gru",
               "decoder_conf": {"embed_size": 8, "hidden_size": 8}}


def train_tiny_xe(tmp_path: Path) -> Path:
    """Writes ``tmp_path``/dump, tokens.txt, cider_df.npz and the XE run ``tmp_path``/xe (one
    epoch, batches of 4, ``max_len`` 6); returns the dump dir."""
    from captionlib.metrics.cider_d import compute_cider_df
    from captionlib.train.options import XEOptions
    from captionlib.train.xe import train_xe

    data = tiny_dump_dir(tmp_path / "dump")
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(TOKENS)
    train_xe(XEOptions(train_data_dir=str(data), valid_data_dir=str(data), output_dir=str(tmp_path / "xe"),
                       token_list=str(tokens), batch_size=4, max_epoch=1, max_len=6, **SMALL_MODEL))
    compute_cider_df(str(data / "text"), str(tmp_path / "cider_df.npz"))
    return data
