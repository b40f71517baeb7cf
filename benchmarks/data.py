"""The data every library reads and writes: the source array, the fixture stores, cache eviction.

The source is quantised random float32 (values k/16, k < 1024): incompressible enough to be
honest, compressible enough (about 2x with byte shuffle) for blosc to do real work. It is
generated once per size and kept as ``.npy`` in the work directory; workers memory-map it.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import numpy as np

from .config import Size

DIMS = ("time", "y", "x")
VAR = "v"


def size_dir(workdir: str | os.PathLike, size: Size) -> Path:
    """The directory holding one size's source, fixtures and scratch stores."""
    d = Path(workdir) / size.name
    d.mkdir(parents=True, exist_ok=True)
    return d


def source_path(workdir: str | os.PathLike, size: Size) -> Path:
    return size_dir(workdir, size) / "source.npy"


def make_source(size: Size) -> np.ndarray:
    """The deterministic source array of ``size`` (seeded; the same on every run)."""
    rng = np.random.default_rng(20240611)
    out = np.empty(size.shape, dtype=np.float32)
    for i in range(size.n):  # plane by plane: bounded temporaries
        out[i] = rng.integers(0, 1024, size.shape[1:], dtype=np.int16)
    out *= np.float32(1 / 16)
    return out


def ensure_source(workdir: str | os.PathLike, size: Size) -> Path:
    """Write the source ``.npy`` if it is missing; return its path."""
    path = source_path(workdir, size)
    if not path.exists():
        tmp = path.with_suffix(".tmp.npy")
        np.save(tmp, make_source(size))
        os.replace(tmp, path)
    return path


def load_source(workdir: str | os.PathLike, size: Size, *, mmap: bool = True) -> np.ndarray:
    """The source array: memory-mapped (no RSS until touched) or loaded into memory."""
    return np.load(source_path(workdir, size), mmap_mode="r" if mmap else None)


def fixture_path(workdir: str | os.PathLike, size: Size, fixture: str) -> Path:
    """Root of the fixture store ``fixture`` (a group holding the array ``v``)."""
    return size_dir(workdir, size) / f"fixture_{fixture}.zarr"


def layout(size: Size, fixture: str) -> dict:
    """Chunking and compression of a fixture kind: ``raw``, ``blosc`` or ``sharded``."""
    if fixture == "sharded":
        return {"chunks": (size.inner,) * 3, "shards": (size.chunk,) * 3, "compressor": None}
    if fixture == "blosc":
        return {"chunks": (size.chunk,) * 3, "shards": None, "compressor": "blosc"}
    return {"chunks": (size.chunk,) * 3, "shards": None, "compressor": None}


BLOSC = {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4, "blocksize": 0}


def v3_codecs(size: Size, fixture: str) -> tuple[list[int], list[dict]]:
    """(chunk grid shape, codec chain as zarr.json JSON) of a fixture kind."""
    lay = layout(size, fixture)
    serializer = {"name": "bytes", "configuration": {"endian": "little"}}
    if lay["shards"] is not None:
        sharding = {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": list(lay["chunks"]),
                "codecs": [serializer],
                "index_codecs": [serializer, {"name": "crc32c"}],
                "index_location": "end",
            },
        }
        return list(lay["shards"]), [sharding]
    codecs = [serializer]
    if lay["compressor"] == "blosc":
        codecs.append({"name": "blosc", "configuration": dict(BLOSC)})
    return list(lay["chunks"]), codecs


def ensure_fixtures(workdir: str | os.PathLike, size: Size, fixtures: set[str]) -> None:
    """Write each needed fixture store (with zarr3_backend) unless it is already complete."""
    import zarr3_backend as z3

    src = None
    for fixture in sorted(fixtures):
        root = fixture_path(workdir, size, fixture)
        done = root / ".complete"
        if done.exists():
            continue
        if src is None:
            src = load_source(workdir, size, mmap=False)
        shutil.rmtree(root, ignore_errors=True)
        grid, codecs = v3_codecs(size, fixture)
        g = z3.create_group(str(root))
        a = g.create_array(
            VAR,
            shape=size.shape,
            dtype="float32",
            chunks=tuple(grid),
            codecs=codecs,
            fill_value=0.0,
            dimension_names=DIMS,
        )
        a[...] = src
        done.write_text("ok\n")
    os.sync()


def store_files(root: str | os.PathLike) -> list[str]:
    """Every file below ``root``."""
    out = []
    for dirpath, _, names in os.walk(root):
        out.extend(os.path.join(dirpath, n) for n in names)
    return out


def evict(root: str | os.PathLike) -> int:
    """Drop the page cache of every file below ``root`` (or of the file ``root``); returns the
    number of files. Dirty pages are flushed first: ``POSIX_FADV_DONTNEED`` skips them."""
    paths = [os.fspath(root)] if os.path.isfile(root) else store_files(root)
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return len(paths)


def warm(root: str | os.PathLike) -> None:
    """Read every file below ``root`` once so it sits in the page cache."""
    paths = [os.fspath(root)] if os.path.isfile(root) else store_files(root)
    buf = bytearray(1 << 22)
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def eviction_check(path: str | os.PathLike) -> dict:
    """Time a warm and an evicted read of one file: evidence that ``evict`` really evicts."""

    def timed() -> float:
        t = time.perf_counter()
        warm(path)
        return time.perf_counter() - t

    warm(path)
    t_warm = timed()
    evict(path)
    t_cold = timed()
    return {"warm_s": t_warm, "cold_s": t_cold, "evicts": t_cold > 1.5 * t_warm}
