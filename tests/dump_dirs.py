"""A tiny dump dir for trainer tests: 4 clips of 64-bin dB-like features with captions."""

from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np
import yaml

from bad_inputs import write_raw_ark

CAPTIONS = {"c0": ["a dog barks", "a dog"], "c1": ["rain falls"], "c2": ["a bird sings"], "c3": ["rain and a dog"]}


def tiny_dump_dir(root: Path, feats_config: Optional[Mapping[str, Any]] = None) -> Path:
    """``root`` as a dump dir of 64-bin features (clip ``c<i>``: 40 + 4 i frames, file name
    ``c<i>.wav`` in aud2name) with :data:`CAPTIONS`, and ``feats_config`` as its
    feats_config.yaml when given."""
    rng = np.random.default_rng(0)
    root.mkdir()
    clips = {f"c{i}": (-40 + 10 * rng.standard_normal((40 + 4 * i, 64))).astype(np.float32) for i in range(4)}
    (root / "feats.scp").write_text(write_raw_ark(root / "feats", clips).read_text())
    (root / "feats_dim").write_text("64\n")
    caps = CAPTIONS
    (root / "text").write_text("".join(f"{c}-{k + 1} {t}\n" for c, ts in caps.items() for k, t in enumerate(ts)))
    (root / "utt2spk").write_text("".join(f"{c}-{k + 1} {c}\n" for c, ts in caps.items() for k in range(len(ts))))
    (root / "spk2utt").write_text(
        "".join(f"{c} {' '.join(f'{c}-{k + 1}' for k in range(len(ts)))}\n" for c, ts in caps.items()))
    (root / "aud2name").write_text("".join(f"{c} {c}.wav\n" for c in caps))
    if feats_config is not None:
        (root / "feats_config.yaml").write_text(yaml.safe_dump(dict(feats_config)))
    return root
