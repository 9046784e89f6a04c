"""Test-session settings.

- One torch thread per process: the CI machine has 2 cores and the recipe tests run several
  jobs at once; oversubscribed threads make small ops much slower. ``OMP_NUM_THREADS=1``
  (unless set already) carries this to the recipe jobs the tests start as subprocesses.
- ``pytest.mark.long(minutes)`` on a module says about how long it takes on 2 idle CPU cores.
  Such modules are collected first, longest first, so that under pytest-xdist (``make test``
  runs ``-n TEST_JOBS --dist loadscope``) the longest start at once instead of last, when
  the other workers would have nothing left to do.
"""

import os

import torch

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)


def pytest_configure(config):
    config.addinivalue_line("markers", "long(minutes): the module takes about this many minutes on 2 CPU "
                                       "cores; collected first, longest first")


def _minutes(item) -> float:
    mark = item.get_closest_marker("long")
    return float(mark.args[0]) if mark is not None else 0.0


def pytest_collection_modifyitems(session, config, items):
    """Longest modules first (stable: the order inside a module and among the rest is kept)."""
    items.sort(key=lambda item: -_minutes(item))
