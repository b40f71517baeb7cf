"""Bit flips and truncations of stored chunks and shards never escape the error hierarchy.

For each layout (raw, blosc, zstd, gzip, crc32c, sharded with and without crc32c on the index and
on the inner chunks, variable-length strings) every single-bit flip of the stored value is read
back (whole array, and a part of it), and every truncation too:

* where crc32c guards the bytes, 100% of the flips raise ``ChecksumError``;
* elsewhere the outcome is a ``Zarr3Error`` (``CorruptionError`` naming the key for damaged
  bytes) or a successful read. A successful read may return wrong values only where nothing
  guards the bytes: raw elements, and compressed frames without a checksum (blosc; zstd without
  its content checksum; a gzip header's unguarded fields) can decode to other values;
* a truncated value always raises a ``Zarr3Error`` naming the key: no layout reads as whole when
  bytes are missing.

A write into the damaged value afterwards must also end in success or a ``Zarr3Error``. The
tests run with the address space capped at ``HEADROOM`` above its size at the start
(``RLIMIT_AS``): a damaged size field that would make a huge allocation (which Linux would grant
lazily, so it would not fail by itself) raises ``MemoryError`` and fails the test.
"""

from __future__ import annotations

import resource

import numpy as np
import pytest

import zarr3_backend as z3
from zarr3_backend import errors

BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
CRC = {"name": "crc32c"}
ZSTD = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}
ZSTD_CHECKED = {"name": "zstd", "configuration": {"level": 1, "checksum": True}}
GZIP = {"name": "gzip", "configuration": {"level": 1}}
BLOSC = {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4}}
VLEN = {"name": "vlen-utf8"}


def _shard(inner: list, index: list, location: str = "end") -> list:
    config = {"chunk_shape": [4], "codecs": inner, "index_codecs": index, "index_location": location}
    return [{"name": "sharding_indexed", "configuration": config}]


#: name -> (codecs, data type, what guards the stored bytes: "all", "index" or "none")
LAYOUTS = {
    "raw": ([BYTES], "float32", "none"),
    "blosc": ([BYTES, BLOSC], "float32", "none"),
    "zstd": ([BYTES, ZSTD], "float32", "none"),
    "zstd-checksum": ([BYTES, ZSTD_CHECKED], "float32", "none"),  # xxhash of the content only
    "gzip": ([BYTES, GZIP], "float32", "none"),  # crc32 of the content; header fields unguarded
    "crc32c": ([BYTES, CRC], "float32", "all"),
    "zstd-crc32c": ([BYTES, ZSTD, CRC], "float32", "all"),
    "blosc-crc32c": ([BYTES, BLOSC, CRC], "float32", "all"),
    "shard-crc-both": (_shard([BYTES, CRC], [BYTES, CRC]), "float32", "all"),
    "shard-crc-both-start": (_shard([BYTES, ZSTD, CRC], [BYTES, CRC], "start"), "float32", "all"),
    "shard-crc-index": (_shard([BYTES], [BYTES, CRC]), "float32", "index"),
    "shard-zstd-crc-index": (_shard([BYTES, ZSTD], [BYTES, CRC]), "float32", "index"),
    "shard-crc-inner": (_shard([BYTES, CRC], [BYTES]), "float32", "none"),  # an offset may move
    "shard-none": (_shard([BYTES], [BYTES], "start"), "float32", "none"),
    "shard-nested-crc": (
        _shard(
            [
                {
                    "name": "sharding_indexed",
                    "configuration": {
                        "chunk_shape": [2],
                        "codecs": [BYTES, CRC],
                        "index_codecs": [BYTES, CRC],
                    },
                }
            ],
            [BYTES, CRC],
        ),
        "float32",
        "all",
    ),
    "shard-nested-none": (
        _shard(
            [
                {
                    "name": "sharding_indexed",
                    "configuration": {"chunk_shape": [2], "codecs": [BYTES, ZSTD], "index_codecs": [BYTES]},
                }
            ],
            [BYTES],
            "start",
        ),
        "float32",
        "none",
    ),
    "vlen": ([VLEN], "string", "none"),
    "vlen-crc32c": ([VLEN, CRC], "string", "all"),
    "shard-vlen-crc-both": (_shard([VLEN, CRC], [BYTES, CRC]), "string", "all"),
}
KEY = "a/c/0"
#: Address space the tests may add to the process (thread stacks and malloc arenas included).
HEADROOM = 2**30


def _address_space() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


@pytest.fixture(autouse=True)
def _memory_cap():
    """Cap the address space for the test (the soft limit, restored afterwards)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _address_space() + HEADROOM
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _values(dtype: str) -> np.ndarray:
    if dtype == "string":
        return np.array([f"v{i}" * (i % 3 + 1) for i in range(16)], dtype=object)
    return np.arange(16, dtype=dtype) * 1.5


def _make(store: z3.Store, layout: str) -> tuple[z3.Array, bytes]:
    codecs, dtype, _ = LAYOUTS[layout]
    fill = "" if dtype == "string" else 0
    a = z3.create_array(
        store, "a", shape=(16,), dtype=dtype, chunks=(16,), codecs=codecs, fill_value=fill, overwrite=True
    )
    a[:] = _values(dtype)
    return a, bytes(store.get(KEY))


def _index_bytes(layout: str, size: int) -> range:
    """The byte positions of a shard's index (empty for unsharded layouts)."""
    codecs, _, _ = LAYOUTS[layout]
    if codecs[0]["name"] != "sharding_indexed":
        return range(0)
    config = codecs[0]["configuration"]
    isz = 4 * 16 + (4 if config["index_codecs"][-1] == CRC else 0)
    return range(isz) if config["index_location"] == "start" else range(size - isz, size)


def _outcome(fn) -> Exception | None:
    """``None`` on success, the ``Zarr3Error`` raised otherwise; any other error fails the test."""
    try:
        fn()
    except errors.Zarr3Error as e:
        if isinstance(e, errors.CorruptionError):
            assert KEY in str(e), f"error does not name the key {KEY!r}: {e}"
        return e
    return None


def _check_flips(store: z3.Store, layout: str, positions: list[int]) -> dict[str, int]:
    a, good = _make(store, layout)
    _, dtype, guard = LAYOUTS[layout]
    expected = _values(dtype)
    index = _index_bytes(layout, len(good))
    counts = {"checksum": 0, "typed": 0, "same": 0, "different": 0}
    for pos in positions:
        for bit in range(8):
            bad = bytearray(good)
            bad[pos] ^= 1 << bit
            store.set(KEY, bytes(bad))
            a = z3.open_array(store, "a", mode="r+")
            got: list[np.ndarray] = []
            err = _outcome(lambda a=a, got=got: got.append(a[...]))
            where = f"{layout}: flip of bit {bit} of byte {pos} of {len(good)}"
            if guard == "all" or (guard == "index" and pos in index):
                assert isinstance(err, errors.ChecksumError), f"{where}: not detected ({err!r})"
            if err is not None:
                counts["checksum" if isinstance(err, errors.ChecksumError) else "typed"] += 1
            elif np.array_equal(got[0], expected):
                counts["same"] += 1
            else:  # allowed only where nothing guards the byte
                assert guard == "none" or (guard == "index" and pos not in index), where
                counts["different"] += 1
            part = _outcome(lambda a=a: a[5:7])
            if guard == "all" and pos in index:
                assert isinstance(part, errors.ChecksumError), f"{where}: partial read: {part!r}"
            _outcome(lambda a=a: a.__setitem__(slice(1, 2), expected[:1]))
    store.set(KEY, good)
    return counts


def _check_truncations(store: z3.Store, layout: str, cuts: list[int]) -> None:
    a, good = _make(store, layout)
    for n in cuts:
        store.set(KEY, good[:n])
        a = z3.open_array(store, "a")
        err = _outcome(lambda a=a: a[...])
        assert err is not None, f"{layout}: reading {n} of {len(good)} bytes succeeded"
        _outcome(lambda a=a: a[5:7])


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_bit_flips_are_detected_or_unprotected(layout):
    """Every bit of every fourth byte (the slow tier flips every byte)."""
    size = len(_make(z3.MemoryStore(), layout)[1])
    counts = _check_flips(z3.MemoryStore(), layout, sorted({*range(0, size, 4), size - 1}))
    if LAYOUTS[layout][2] == "all":
        assert counts["checksum"] == sum(counts.values())
    assert sum(counts.values()) > 0


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_bit_flip_is_detected_or_unprotected(layout):
    size = len(_make(z3.MemoryStore(), layout)[1])
    counts = _check_flips(z3.MemoryStore(), layout, list(range(size)))
    if LAYOUTS[layout][2] == "all":
        assert counts["checksum"] == sum(counts.values()) == 8 * size


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_truncation_is_a_typed_error(layout):
    size = len(_make(z3.MemoryStore(), layout)[1])
    _check_truncations(z3.MemoryStore(), layout, list(range(size)))


@pytest.mark.parametrize(
    "layout", ["raw", "zstd-crc32c", "shard-crc-index", "shard-none", "shard-crc-both", "vlen"]
)
def test_flips_and_truncations_on_a_local_store(tmp_path, layout):
    """The local store's own read paths (positioned reads into the output, open shard readers)."""
    store = z3.LocalStore(tmp_path / "root")
    size = len(_make(store, layout)[1])
    _check_flips(store, layout, list(range(0, size, 3)))
    _check_truncations(store, layout, list(range(0, size, 5)))


def test_unguarded_layouts_can_decode_to_other_values():
    """The fuzzing above is not vacuous: without a checksum some flips read as other values."""
    counts = _check_flips(z3.MemoryStore(), "raw", list(range(64)))
    assert counts["different"] > 0 and counts["checksum"] == 0
    counts = _check_flips(z3.MemoryStore(), "shard-crc-index", list(range(64)))
    assert counts["different"] > 0


def _garbage(rng: np.random.Generator, good: bytes) -> list[bytes]:
    """Values that are not the stored one: random bytes of many lengths, constant fills, the
    good value with random tails, and spliced halves."""
    out = [b"", b"\x00", b"\xff" * 4, b"\x00" * len(good), b"\xff" * len(good), good + good, good * 3]
    for _ in range(60):
        out.append(rng.integers(0, 256, int(rng.integers(0, 2 * len(good) + 8)), dtype=np.uint8).tobytes())
    for _ in range(20):
        cut = int(rng.integers(0, len(good)))
        out.append(good[:cut] + rng.integers(0, 256, int(rng.integers(0, 64)), dtype=np.uint8).tobytes())
        out.append(good[cut:] + good[:cut])
    return out


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_garbage_values_are_typed_errors_or_reads(layout):
    """Whatever bytes sit under the key, reads and writes end in success or a Zarr3Error (and
    where crc32c guards the whole value, never in a successful read of other values)."""
    store = z3.MemoryStore()
    _, good = _make(store, layout)
    _, dtype, guard = LAYOUTS[layout]
    expected = _values(dtype)
    for value in _garbage(np.random.default_rng(7), good):
        store.set(KEY, value)
        a = z3.open_array(store, "a", mode="r+")
        got: list[np.ndarray] = []
        err = _outcome(lambda a=a, got=got: got.append(a[...]))
        if err is None and guard == "all":
            assert np.array_equal(got[0], expected), f"{layout}: {value!r} read as other values"
        _outcome(lambda a=a: a[5:7])
        _outcome(lambda a=a: a.__setitem__(slice(1, 2), expected[:1]))
