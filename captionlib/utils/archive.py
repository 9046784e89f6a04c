"""Reading zip archives someone gave us (packed models, ``torch.export`` ``.pt2`` files) with
bounded memory.

Each member's size is taken from the archive's central directory and checked against a
cap before anything is read; members are then read in chunks of :data:`CHUNK_BYTES`, so that
a member whose compressed stream expands past its stated size is refused as soon as it
yields one byte more (zipfile is told to stop there), never decompressed whole.
:data:`DEFAULT_MAX_MODEL_BYTES` is the default cap on the total size of an archive's members;
``caption_infer --max_model_bytes`` raises it.
"""

import copy
import hashlib
import zipfile
import zlib
from typing import Dict, Optional

#: default cap on the summed (uncompressed) size of an archive's members, in bytes (4 GiB)
DEFAULT_MAX_MODEL_BYTES = 4 << 30
#: bytes decompressed at a time
CHUNK_BYTES = 1 << 20


def member_sizes(z: zipfile.ZipFile, name: str, max_bytes: int = DEFAULT_MAX_MODEL_BYTES) -> Dict[str, int]:
    """``{member name: size in bytes}`` from the central directory, checked against a cap.

    Args:
        z: the open archive.
        name: how messages name the archive (its path).
        max_bytes: the largest summed member size accepted, in bytes.

    Raises:
        ValueError: naming ``name``: a member name that occurs twice, or members whose sizes
            add up to more than ``max_bytes`` (the message names the largest member and the
            option that raises the cap).
    """
    sizes: Dict[str, int] = {}
    for info in z.infolist():
        if info.filename in sizes:
            raise ValueError(f"{name}: member {info.filename} occurs twice in the archive")
        sizes[info.filename] = info.file_size
    total = sum(sizes.values())
    if total > max_bytes:
        largest = max(sizes, key=sizes.get)
        raise ValueError(f"{name}: its members hold {total:,} bytes (the largest, {largest}, {sizes[largest]:,}), "
                         f"over the cap of {max_bytes:,} bytes; nothing was read (raise the cap with "
                         f"--max_model_bytes if you trust the file)")
    return sizes


def read_member(z: zipfile.ZipFile, member: str, size: int, name: str, sha256: Optional[str] = None) -> bytes:
    """Read one member in chunks, refusing it as soon as its stream passes ``size`` bytes.

    Args:
        z: the open archive.
        member: the member's name.
        size: its stated size in bytes (from a manifest or the central directory).
        name: how messages name the archive.
        sha256: the expected SHA-256 (hex) of the member, if known.

    Returns:
        The member's bytes.

    Raises:
        ValueError: naming ``name`` and ``member``: a stream longer or shorter than ``size``,
            a corrupt stream (bad CRC-32, a truncated or invalid deflate stream), or a SHA-256
            other than ``sha256``.
    """
    chunks, read, digest, crc = [], 0, hashlib.sha256(), 0
    stated = z.getinfo(member)
    info = copy.copy(stated)
    info.file_size = size + 1  # zipfile then yields one byte past the stated size if the stream has it,
    info.CRC = None  # before checking a CRC-32 (checked below, on what was read)
    try:
        with z.open(info) as f:
            while True:
                chunk = f.read(CHUNK_BYTES)
                if not chunk:
                    break
                read += len(chunk)
                if read > size:
                    raise ValueError(f"{name}: member {member} is longer than its stated {size:,} bytes")
                digest.update(chunk)
                crc = zlib.crc32(chunk, crc)
                chunks.append(chunk)
    except (zipfile.BadZipFile, EOFError, OSError, RuntimeError) as e:
        raise ValueError(f"{name}: member {member} is corrupt ({type(e).__name__}: {e}); nothing from it "
                         f"was used") from None
    if read != size:
        raise ValueError(f"{name}: member {member} holds {read:,} bytes, not its stated {size:,}")
    if crc != stated.CRC:
        raise ValueError(f"{name}: member {member} is corrupt (bad CRC-32); nothing from it was used")
    if sha256 is not None and digest.hexdigest() != sha256:
        raise ValueError(f"{name}: member {member} is corrupt (its SHA-256 is not the manifest's)")
    return b"".join(chunks)
