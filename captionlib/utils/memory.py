"""Host memory of long runs: keep glibc's malloc heap from holding freed tensors.

glibc's ``malloc`` serves a request of at least its *mmap threshold* with a mapping of its
own, returned to the system when freed; smaller requests come from its heaps, whose freed
memory mostly stays resident. The threshold starts at 128 KiB but is *dynamic*: each freed
mapping of up to 32 MiB raises it to that size (glibc ``malloc.c``, "Update in sysmalloc /
free": ``mp_.mmap_threshold = chunksize(p)``). A training loop frees tensors of a few MiB to
32 MiB every step (activations, logits, gradients), so after its first steps they all come
from the heap, and with batches of varying length (length-bucketed batches, variable clip
and caption lengths) the heap fragments: freed blocks that do not fit the next step's
tensors stay resident while the heap grows. :func:`limit_heap_growth` fixes the threshold
(``mallopt(M_MMAP_THRESHOLD)``, which also turns the dynamic update off), so tensors above
it are mapped and unmapped like the largest ones.

On the Clotho recipe's XE stage (seed 000's CRNN + GRU, length-bucketed batches of 32 clips of
15-30 s, one thread), 60 updates peaked at 4,787 MiB of RSS with glibc's default and at 3,035
MiB with a 4 MiB threshold (2,935 MiB with 1 MiB, 3,657 MiB with 16 MiB), and the default's
RSS kept rising with the steps (to 7.7 GiB at the end of a full epoch: bench/README.md, "Speed"); the
updates were the same. Over whole epochs with the recipe's 2 threads, XE and SCST peaked at
3,206 and 3,354 MiB (7,850 and 7,611 before). It costs some speed, since every mapped tensor is
faulted in afresh: the two stages took about 4% longer (bench/README.md, "Speed";
``bench/bench_heap.py`` compares settings).

Reference: ``mallopt(3)``, glibc ``malloc/malloc.c`` (``M_MMAP_THRESHOLD``,
``DEFAULT_MMAP_THRESHOLD_MAX``).
"""

import ctypes
import logging
import platform
from typing import Optional

#: ``M_MMAP_THRESHOLD`` of glibc's ``<malloc.h>``
M_MMAP_THRESHOLD = -3
#: the threshold set by :func:`limit_heap_growth` (bytes)
HEAP_MMAP_THRESHOLD = 4 << 20

_SET: Optional[int] = None


def glibc() -> Optional[ctypes.CDLL]:
    """The process's C library when it is glibc on Linux, else ``None`` (musl's ``mallopt``
    is a stub; macOS has no ``mallopt``)."""
    if platform.system() != "Linux":
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 -- the lookup is the probe: AttributeError unless glibc
    except (OSError, AttributeError):
        return None
    return libc


def limit_heap_growth(threshold_bytes: int = HEAP_MMAP_THRESHOLD) -> bool:
    """Serve every allocation of ``threshold_bytes`` or more with its own mapping (glibc).

    Process-wide and idempotent; a no-op returning ``False`` where the C library is not glibc
    (macOS, musl) or refuses the value.

    Args:
        threshold_bytes: the fixed mmap threshold in bytes (glibc accepts up to 32 MiB on
            64-bit systems).

    Returns:
        ``True`` when the threshold is set (now or by an earlier call with the same value).

    Raises:
        ValueError: ``threshold_bytes`` < 1.
    """
    global _SET
    if threshold_bytes < 1:
        raise ValueError(f"threshold_bytes must be >= 1, got {threshold_bytes}")
    if _SET == threshold_bytes:
        return True
    libc = glibc()
    if libc is None:
        return False
    if libc.mallopt(M_MMAP_THRESHOLD, int(threshold_bytes)) != 1:
        logging.warning("mallopt(M_MMAP_THRESHOLD, %d) refused: glibc's dynamic threshold stays", threshold_bytes)
        return False
    _SET = threshold_bytes
    return True
