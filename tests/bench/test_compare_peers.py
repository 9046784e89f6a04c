"""bench/compare_peers.py against a stand-in of CoNeTTE: its module paths and call signatures,
over torch's own Transformer decoder (post-norm, as CoNeTTE's). The script prints a ratio for
every row and passes its equality checks; a stand-in that computes something else (ReLU for
GELU) fails them."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

DECODER = '''
import math
import torch
from torch import nn


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout_p, maxlen=512):
        super().__init__()
        pos = torch.arange(maxlen)[:, None]
        rate = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(maxlen, 1, d_model)
        pe[:, 0, 0::2], pe[:, 0, 1::2] = torch.sin(pos * rate), torch.cos(pos * rate)
        self.dropout = nn.Dropout(dropout_p)
        self.register_buffer("pos_embedding", pe)

    def forward(self, x):
        return self.dropout(x + self.pos_embedding[: x.size(0)])


class AACTransformerDecoder(nn.TransformerDecoder):
    def __init__(self, vocab_size, bos_id, eos_id, pad_id, acti_name="gelu", d_model=256, dim_feedforward=2048,
                 dropout=0.2, nhead=8, num_decoder_layers=6):
        super().__init__(nn.TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout, activation=ACTIVATION),
                         num_decoder_layers)
        self.emb_layer = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.pos_encoding = PositionalEncoding(d_model, dropout)
        self.classifier = nn.Linear(d_model, vocab_size)

    def forward(self, frame_embs, frame_embs_pad_mask, caps_in, caps_in_pad_mask, caps_in_sq_mask):
        x = self.pos_encoding(self.emb_layer(caps_in) * math.sqrt(self.emb_layer.embedding_dim))
        x = super().forward(x, frame_embs, tgt_mask=caps_in_sq_mask, tgt_key_padding_mask=caps_in_pad_mask,
                            memory_key_padding_mask=frame_embs_pad_mask)
        return self.classifier(x)
'''

FORCING = '''
import torch


def teacher_forcing(decoder, pad_id, bos_id, eos_id, vocab_size, frame_embs, frame_embs_pad_mask, caps_in):
    mask = torch.nn.Transformer.generate_square_subsequent_mask(caps_in.size(1))
    logits = decoder(frame_embs.permute(2, 0, 1), frame_embs_pad_mask, caps_in.t(), caps_in == pad_id, mask)
    return logits.permute(1, 2, 0)
'''

GREEDY = '''
import torch


@torch.no_grad()
def greedy_search(decoder, pad_id, bos_id, eos_id, vocab_size, frame_embs, frame_embs_pad_mask, max_pred_size=20):
    preds = torch.full((frame_embs.size(0), 1), bos_id)
    out = torch.full((frame_embs.size(0), vocab_size, max_pred_size), float("-inf"))
    done = torch.zeros(frame_embs.size(0), dtype=torch.bool)
    for i in range(max_pred_size):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(i + 1)
        logits = decoder(frame_embs.permute(2, 0, 1), frame_embs_pad_mask, preds.t(), None, mask)[-1]
        logits[done] = float("-inf")
        logits[done, pad_id] = 0.0
        out[:, :, i] = logits
        preds = torch.cat([preds, logits.argmax(-1, keepdim=True)], 1)
        done |= preds[:, -1] == eos_id
    return out
'''

BEAM = '''
from conette.nn.decoding.greedy import greedy_search


def generate(decoder, pad_id, bos_id, eos_id, vocab_size, frame_embs, frame_embs_pad_mask, beam_size=2,
             max_pred_size=20):
    """The stand-in's beam is its greedy search (the script only times it)."""
    best = greedy_search(decoder, pad_id, bos_id, eos_id, vocab_size, frame_embs, frame_embs_pad_mask,
                         max_pred_size=max_pred_size).argmax(1)
    return best, None, None, None
'''


def stand_in(root: Path, activation: str) -> Path:
    """A CoNeTTE-layout source tree (src/conette/nn/...) whose decoder uses ``activation``."""
    pkg = root / "src" / "conette" / "nn"
    for sub, text in (("decoders/aac_tfmer.py", DECODER.replace("ACTIVATION", repr(activation))),
                      ("decoding/forcing.py", FORCING), ("decoding/greedy.py", GREEDY), ("decoding/beam.py", BEAM)):
        (pkg / sub).parent.mkdir(parents=True, exist_ok=True)
        (pkg / sub).write_text(text)
    (root / "src" / "conette" / "__init__.py").write_text("raise ImportError('the package __init__ must not run')\n")
    return root


def run(peer: Path, flag: str = "--conette"):
    """compare_peers.py on ``peer`` (given as ``flag``), tiny sizes."""
    cmd = [sys.executable, str(ROOT / "bench" / "compare_peers.py"), flag, str(peer), "--min_s", "2",
           "--max_s", "3", "--batch_size", "4", "--reps", "1", "--warm_up_steps", "2", "--num_threads", "1"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)


def table(stdout: str, header: str) -> dict:
    lines = stdout.split(header, 1)[1].splitlines()[2:]  # the header's rest, its rule
    rows = {}
    for line in lines:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.split("|")[1:-1]]
        rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.parametrize("activation, passes", [("gelu", True), ("relu", False)])
def test_compare_peers_prints_every_row_and_checks_equality(tmp_path, activation, passes):
    out = run(stand_in(tmp_path, activation))
    assert out.returncode == (0 if passes else 1), out.stderr[-3000:]
    rows = table(out.stdout, "| row |")
    assert list(rows) == ["XE update, 4 captions", "greedy decoding, 4 clips", "beam-5 decoding, 4 clips"]
    for ours, theirs, ratio in rows.values():
        assert float(ratio) == pytest.approx(float(ours) / float(theirs), rel=0.02, abs=0.01)
    checks = table(out.stdout, "| check |")
    losses, greedy = checks.values()
    assert losses[-1] == ("yes" if passes else "NO") and greedy[-1] in (["yes"] if passes else ["yes", "NO"])


def test_compare_peers_names_what_is_missing(tmp_path):
    out = run(tmp_path)
    assert out.returncode != 0 and f"--conette {tmp_path}: no src/conette/nn/decoders" in out.stderr


PEER = ROOT / "tools" / "peers" / "conette-0.3.2"


@pytest.mark.skipif(not PEER.is_dir(), reason="CoNeTTE's sources are not in tools/peers (make peers)")
def test_compare_peers_against_conette_itself():
    out = run(PEER)
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-3000:]
    assert [v[-1] for v in table(out.stdout, "| check |").values()] == ["yes", "yes"]
