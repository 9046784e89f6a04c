"""bench/bench_train.py runs end to end (tiny sizes; the speed targets live in its output,
not in this test)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_train_prints_its_table_bound_and_projection():
    cmd = [sys.executable, str(ROOT / "bench" / "bench_train.py"), "--min_s", "2", "--max_s", "3",
           "--batch_size", "4", "--reps", "1", "--skip_dump", "--warm_up_steps", "2", "--num_threads", "1",
           "--decode_compile", "aot_eager", "--one_pass"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    for needle in ("| XE update, padded batch | packed BiGRU |", "| beam 5, search only | per-clip loop |",
                   "| SCST update, padded batch | separate baseline encoding |",
                   "XE update bound:", "projected full Clotho",
                   "beam 5: batched and per-clip outputs identical for 4/4 clips",
                   "| SCST update, padded batch | eager sampling |", "| REINFORCE+ (--decode_compile aot_eager) / XE",
                   "| SCST update, padded batch | log-probs of the sampling loop |",
                   "| SCST (--sample_logprobs recompute) / XE update",
                   "| SCST (--decode_compile aot_eager, --sample_logprobs recompute) / XE update",
                   "| SCST update (--sample_logprobs recompute) | baseline, samples: two passes |",
                   "| SCST update (--sample_logprobs recompute, --decode_compile aot_eager) | baseline, samples: two",
                   # egs/clotho's rl_unit caption: an SCST epoch of 3839 x 5 pairs in batches of 4
                   "SCST epochs of rl_unit caption", "SCST 4799 x"):
        assert needle in out.stdout, (needle, out.stdout)
