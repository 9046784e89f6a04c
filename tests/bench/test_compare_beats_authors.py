"""bench/compare_beats_authors.py: its plumbing (importing a beats/ directory, building, saving
and strictly loading the weights, comparing clips, the exit status), run against a stand-in for
the authors' code (the authors' code is not in the repository; the script's results against it
are in egs/clotho/README.md). The stand-in wraps captionlib's own encoder behind the authors'
interface (``BEATsConfig``, ``BEATs.extract_features`` on waveforms through
``torchaudio.compliance.kaldi.fbank``), once as it is and once with its tokens shifted."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "compare_beats_authors.py"
DATA = ROOT.parent / "shared" / "data"

STAND_IN = '''
import torch
import torchaudio.compliance.kaldi as ta_kaldi
from captionlib.models.beats import BEATsEncoder

SHIFT = {shift}


class BEATsConfig:
    def __init__(self, cfg):
        self.__dict__.update(cfg)


class BEATs(BEATsEncoder):
    def __init__(self, cfg):
        keys = ("embed_dim", "encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_layers",
                "encoder_attention_heads", "conv_pos", "conv_pos_groups", "num_buckets", "max_distance")
        super().__init__(**{{k: getattr(cfg, k) for k in keys}}, classes_num=cfg.predictor_class)

    def preprocess(self, source):
        fbank = ta_kaldi.fbank(source[:1] * 2 ** 15, num_mel_bins=128, sample_frequency=16000, frame_length=25,
                               frame_shift=10)
        return ((fbank - 15.41663) / (2 * 6.55582))[None]

    def extract_features(self, source):
        fbank = ta_kaldi.fbank(source[:1] * 2 ** 15, num_mel_bins=128, sample_frequency=16000, frame_length=25,
                               frame_shift=10)[None]
        tokens = self.tokens(fbank, torch.tensor([fbank.size(1)]))[0].flatten(1, 2) + SHIFT
        if self.predictor is None:
            return tokens, None
        return torch.sigmoid(self.predictor(tokens).mean(dim=1)), None
'''


def _run(tmp_path, shift):
    authors = tmp_path / f"beats_{shift}"
    authors.mkdir()
    (authors / "BEATs.py").write_text(STAND_IN.format(shift=shift))
    return subprocess.run([sys.executable, str(SCRIPT), "--authors_dir", str(authors), "--clips", "1", "--seconds",
                           "3", "--data", str(DATA)], capture_output=True, text=True, timeout=600, cwd=ROOT)


@pytest.mark.skipif(not (DATA / "clotho_subset").is_dir(), reason=f"{DATA}/clotho_subset not found")
def test_same_and_different_models(tmp_path):
    r = _run(tmp_path, 0.0)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "loaded strictly into ours" in r.stdout and "tokens (144, 48)" in r.stdout
    assert "clip probabilities max |diff|" in r.stdout and "same: largest relative token difference" in r.stdout
    r = _run(tmp_path, 0.01)
    assert r.returncode == 1 and "DIFFERENT" in r.stdout, r.stdout + r.stderr


def test_a_directory_without_the_authors_code_is_named(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--authors_dir", str(tmp_path)], capture_output=True, text=True,
                       timeout=600, cwd=ROOT)
    assert r.returncode != 0 and f"{tmp_path}: no BEATs.py" in r.stderr
