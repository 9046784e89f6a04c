"""A tiny real training setup for the tests of the training entry points: a dump dir of 4
clips (random 16-d features in a kaldi ark, 1-2 captions each), its token list, and a
one-epoch XE model of a linear encoder and a GRU-8 decoder trained on it (stage 5), with the
CIDEr-D document frequencies that RL fine-tuning (stage 6) reads."""

from pathlib import Path

import numpy as np

from bad_inputs import write_raw_ark

CAPTIONS = {"c0": ["a dog barks", "a dog"], "c1": ["rain falls"], "c2": ["a bird sings"], "c3": ["rain and a dog"]}
TOKENS = "<blank>\n<unk>\na\nand\nbarks\nbird\ndog\nfalls\nrain\nsings\n<sos/eos>\n"
SMALL_MODEL = {"encoder": "linear", "encoder_conf": {"output_size": 8}, "decoder": "gru",
               "decoder_conf": {"embed_size": 8, "hidden_size": 8}}


def write_dump(root: Path, rng: np.random.Generator) -> Path:
    """A dump dir (feats.scp, feats_dim, text, utt2spk, spk2utt) of the 4 clips of :data:`CAPTIONS`."""
    root.mkdir()
    clips = {f"c{i}": rng.standard_normal((40 + 4 * i, 16)).astype(np.float32) for i in range(4)}
    scp = write_raw_ark(root / "feats", clips)
    (root / "feats.scp").write_text(scp.read_text())
    (root / "feats_dim").write_text("16\n")
    caps = CAPTIONS
    (root / "text").write_text("".join(f"{c}-{k + 1} {t}\n" for c, ts in caps.items() for k, t in enumerate(ts)))
    (root / "utt2spk").write_text("".join(f"{c}-{k + 1} {c}\n" for c, ts in caps.items() for k in range(len(ts))))
    (root / "spk2utt").write_text(
        "".join(f"{c} {' '.join(f'{c}-{k + 1}' for k in range(len(ts)))}\n" for c, ts in caps.items()))
    return root


def train_tiny_xe(tmp_path: Path) -> Path:
    """Writes ``tmp_path``/dump, tokens.txt, cider_df.npz and the XE run ``tmp_path``/xe (one
    epoch, batches of 4, ``max_len`` 6); returns the dump dir."""
    from captionlib.metrics.cider_d import compute_cider_df
    from captionlib.train.options import XEOptions
    from captionlib.train.xe import train_xe

    data = write_dump(tmp_path / "dump", np.random.default_rng(0))
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(TOKENS)
    train_xe(XEOptions(train_data_dir=str(data), valid_data_dir=str(data), output_dir=str(tmp_path / "xe"),
                       token_list=str(tokens), batch_size=4, max_epoch=1, max_len=6, **SMALL_MODEL))
    compute_cider_df(str(data / "text"), str(tmp_path / "cider_df.npz"))
    return data
