"""Test-session settings: one torch thread per process (the CI machine has 2 cores and the
recipe tests run several jobs at once; oversubscribed threads make small ops much slower)."""

import torch

torch.set_num_threads(1)
