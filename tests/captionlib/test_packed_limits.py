"""Packed archives are read with bounded memory: a member over the size cap, and a member whose
stream runs past its stated size, are refused before they fill memory (peak RSS of the reading
process under 1 GiB, measured with resource.getrusage in a subprocess)."""

import hashlib
import json
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from captionlib.packed import MANIFEST, read_packed
from captionlib.utils.archive import CHUNK_BYTES, read_member
from bad_inputs import write_wav
from packed_models import make_packed

pytestmark = pytest.mark.long(1)

BIG = 1536 << 20  # a 1.5 GiB member of zeros (7 MB deflated)
# runs a binary's main() and prints the process's peak RSS (kB on Linux) as its last stderr line
PEAK_RSS = ("import resource, runpy, sys\nsys.argv = sys.argv[1:]\ntry:\n"
            "    runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\nfinally:\n"
            "    print('peak_rss_kb', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n")


def _with_big_member(packed: Path, output: Path, stated: int) -> Path:
    """``packed`` plus a member ``big.bin`` of :data:`BIG` zero bytes whose manifest entry and
    central-directory size both say ``stated`` bytes (``stated < BIG``: an understated stream)."""
    with zipfile.ZipFile(packed) as z:
        members = {n: z.read(n) for n in z.namelist()}
    digest = hashlib.sha256()
    for _ in range(stated // CHUNK_BYTES):
        digest.update(bytes(CHUNK_BYTES))
    digest.update(bytes(stated % CHUNK_BYTES))
    manifest = json.loads(members.pop(MANIFEST))
    manifest["files"].append({"name": "big.bin", "bytes": stated, "sha256": digest.hexdigest()})
    with zipfile.ZipFile(output, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr(MANIFEST, json.dumps(manifest))
        for name, data in members.items():
            z.writestr(name, data)
        with z.open("big.bin", "w") as f:
            for _ in range(BIG // (16 << 20)):
                f.write(bytes(16 << 20))
    if stated != BIG:  # rewrite the central directory's uncompressed size of big.bin
        data = bytearray(output.read_bytes())
        at = data.rindex(b"PK\x01\x02")  # big.bin's entry is the last one
        assert data[at + 46:at + 53] == b"big.bin"
        data[at + 24:at + 28] = struct.pack("<I", stated)
        output.write_bytes(bytes(data))
    return output


def _infer(model: Path, wav: Path, *extra: str):
    r = subprocess.run([sys.executable, "-c", PEAK_RSS, "captionbin.caption_infer", "--model", str(model),
                        *extra, str(wav)], capture_output=True, text=True, timeout=600)
    peak_kb = int(r.stderr.strip().splitlines()[-1].split()[-1])
    return r, peak_kb


def test_a_member_over_the_cap_is_refused_before_it_is_read(tmp_path):
    big = _with_big_member(make_packed(tmp_path), tmp_path / "big.zip", BIG)
    wav = write_wav(tmp_path / "a.wav")
    r, peak_kb = _infer(big, wav, "--max_model_bytes", str(1 << 30))
    assert r.returncode == 1, r.stderr
    assert "over the cap of 1,073,741,824 bytes; nothing was read" in r.stderr and "big.bin" in r.stderr, r.stderr
    assert peak_kb < 1 << 20, peak_kb  # 1 GiB
    with pytest.raises(ValueError, match="raise the cap with --max_model_bytes"):
        read_packed(big, max_bytes=1 << 30)


def test_a_stream_longer_than_its_stated_size_is_refused_at_that_size(tmp_path):
    big = _with_big_member(make_packed(tmp_path), tmp_path / "long.zip", 1 << 20)
    wav = write_wav(tmp_path / "a.wav")
    r, peak_kb = _infer(big, wav)
    assert r.returncode == 1, r.stderr
    assert "member big.bin is longer than its stated 1,048,576 bytes" in r.stderr, r.stderr
    assert peak_kb < 1 << 20, peak_kb


def test_read_member_checks_the_size_and_hash(tmp_path):
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("m", b"x" * 3000)
    with zipfile.ZipFile(path) as z:
        assert read_member(z, "m", 3000, "a.zip", hashlib.sha256(b"x" * 3000).hexdigest()) == b"x" * 3000
        with pytest.raises(ValueError, match="a.zip: member m is longer than its stated 2,999 bytes"):
            read_member(z, "m", 2999, "a.zip")
        with pytest.raises(ValueError, match="a.zip: member m holds 3,000 bytes, not its stated 3,001"):
            read_member(z, "m", 3001, "a.zip")
        with pytest.raises(ValueError, match="SHA-256"):
            read_member(z, "m", 3000, "a.zip", "0" * 64)
