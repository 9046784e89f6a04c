"""Test-session settings.

- One torch thread per process: the CI machine has 2 cores and the recipe tests run several
  jobs at once; oversubscribed threads make small ops much slower. ``OMP_NUM_THREADS=1``
  (unless set already) carries this to the recipe jobs the tests start as subprocesses.
- ``pytestmark = pytest.mark.long(minutes)`` (module level) says about how long a module takes
  on 2 idle CPU cores. Such modules are ordered first after collection, longest first, so that
  under pytest-xdist (``make test`` runs ``-n TEST_JOBS --dist loadscope
  --no-loadscope-reorder``; without that flag xdist puts the modules of most tests first) the
  longest start at once instead of last, when the other workers would have nothing left to do.
"""

import os

import torch

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)


def pytest_configure(config):
    config.addinivalue_line("markers", "long(minutes): module level only; the module takes about this many "
                                       "minutes on 2 CPU cores; ordered first, longest first")


def _minutes(item) -> float:
    mark = item.get_closest_marker("long")
    return float(mark.args[0]) if mark is not None else 0.0


def pytest_collection_modifyitems(session, config, items):
    """Longest modules first, a module's tests kept together and in their order (stable sort by
    the module's largest mark, so a mark on one test cannot split its module's fixtures)."""
    minutes = {}
    for item in items:
        minutes[item.path] = max(minutes.get(item.path, 0.0), _minutes(item))
    items.sort(key=lambda item: -minutes[item.path])
