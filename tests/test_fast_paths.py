"""Correctness of the speed paths: inline local-store reads and writes, decoding straight into the
output, per-thread scratch buffers, the fill-value probe, batched shard indexes, get_regions.

Each test would fail if its fast path returned wrong data, shared memory it must not share, or
turned an error into silence. No timing assertions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading

import numpy as np
import pytest

import zarr3_backend as z3
from zarr3_backend import _threads
from zarr3_backend.byte_range import ByteRange
from zarr3_backend.codecs.base import ChunkSpec
from zarr3_backend.codecs.blosc import BloscCodec
from zarr3_backend.codecs.fill import is_fill
from zarr3_backend.codecs.zstd import ZstdCodec
from zarr3_backend.core.shard_reads import raw_shard_reads, shard_indexes
from zarr3_backend.core.shard_view import ShardView
from zarr3_backend.errors import ChecksumError, CorruptionError, InvalidKeyError, ReadOnlyError
from zarr3_backend.stores.local import LocalStore

BLOSC = {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle"}}
ZSTD = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}
CRC = {"name": "crc32c"}


def _data(shape, dtype="f4", seed=0):
    rng = np.random.default_rng(seed)
    return (rng.integers(1, 1000, shape) / 8).astype(dtype)


def _create(tmp_path, name="a", **kw):
    return z3.create_array(str(tmp_path / name), fill_value=0, **kw)


# ---- reads: inline local store, direct decode ---------------------------------------------------
@pytest.mark.parametrize("compressors", [None, BLOSC, ZSTD, [BLOSC, CRC], [CRC]], ids=str)
@pytest.mark.parametrize(
    "shape,chunks",
    [
        ((6, 8, 10), (1, 8, 10)),  # every chunk is one contiguous block of the output: direct path
        ((6, 8, 10), (4, 3, 4)),  # strided chunk regions, edge chunks: scratch path
        ((5,), (5,)),  # one chunk, the whole output
    ],
)
def test_local_reads_match_numpy(tmp_path, compressors, shape, chunks):
    data = _data(shape)
    a = _create(tmp_path, shape=shape, dtype="f4", chunks=chunks, compressors=compressors)
    a[...] = data
    b = z3.open_array(str(tmp_path / "a"))
    np.testing.assert_array_equal(b[...], data)
    np.testing.assert_array_equal(b[1:, ...], data[1:, ...])
    np.testing.assert_array_equal(b[..., ::2], data[..., ::2])
    np.testing.assert_array_equal(b[::-1], data[::-1])
    np.testing.assert_array_equal(b[-1], data[-1])


def test_direct_reads_are_checked_against_the_zarr_python_oracle(tmp_path):
    import zarr

    data = _data((6, 8, 10))
    path = str(tmp_path / "oracle")
    za = zarr.create_array(
        path, shape=data.shape, chunks=(1, 8, 10), dtype="f4", compressors=None, fill_value=0
    )
    za[...] = data
    za2 = zarr.create_array(
        str(tmp_path / "oracle_b"), shape=data.shape, chunks=(2, 8, 5), dtype="f4", fill_value=0
    )
    za2[...] = data
    np.testing.assert_array_equal(z3.open_array(path)[...], data)
    np.testing.assert_array_equal(z3.open_array(str(tmp_path / "oracle_b"))[...], data)


def test_big_endian_chunks_are_swapped_not_placed_raw(tmp_path):
    data = _data((4, 6), dtype="f8")
    codecs = [{"name": "bytes", "configuration": {"endian": "big"}}]
    a = _create(tmp_path, shape=data.shape, dtype="f8", chunks=(1, 6), codecs=codecs)
    a[...] = data
    raw = (tmp_path / "a" / "c" / "0" / "0").read_bytes()
    assert raw == data[0].astype(">f8").tobytes()
    np.testing.assert_array_equal(z3.open_array(str(tmp_path / "a"))[...], data)


def test_missing_chunks_read_as_fill(tmp_path):
    a = z3.create_array(
        str(tmp_path / "a"), shape=(4, 6), dtype="i4", chunks=(1, 6), fill_value=-7, compressors=None
    )
    a[1] = np.arange(6)
    expected = np.full((4, 6), -7, dtype="i4")
    expected[1] = np.arange(6)
    np.testing.assert_array_equal(a[...], expected)


@pytest.mark.parametrize("compressors", [None, BLOSC], ids=["raw", "blosc"])
@pytest.mark.parametrize("chunks", [(1, 6), (3, 4)], ids=["contiguous", "strided"])
def test_truncated_chunk_is_a_corruption_error_naming_the_key(tmp_path, compressors, chunks):
    a = _create(tmp_path, shape=(4, 6), dtype="f4", chunks=chunks, compressors=compressors)
    a[...] = _data((4, 6))
    chunk = tmp_path / "a" / "c" / "0" / "0"
    chunk.write_bytes(chunk.read_bytes()[:-5])
    with pytest.raises(CorruptionError, match="c/0/0"):
        a[...]


@pytest.mark.parametrize("chunks", [(1, 6), (3, 4)], ids=["contiguous", "strided"])
def test_overlong_raw_chunk_is_a_corruption_error(tmp_path, chunks):
    a = _create(tmp_path, shape=(4, 6), dtype="f4", chunks=chunks, compressors=None)
    a[...] = _data((4, 6))
    chunk = tmp_path / "a" / "c" / "1" / "0"
    chunk.write_bytes(chunk.read_bytes() + b"xx")
    with pytest.raises(CorruptionError, match="c/1/0"):
        a[...]


def test_checksum_mismatch_under_blosc_is_detected(tmp_path):
    a = _create(tmp_path, shape=(4, 6), dtype="f4", chunks=(1, 6), compressors=[BLOSC, CRC])
    a[...] = _data((4, 6))
    chunk = tmp_path / "a" / "c" / "2" / "0"
    raw = bytearray(chunk.read_bytes())
    raw[20] ^= 0xFF
    chunk.write_bytes(bytes(raw))
    with pytest.raises(ChecksumError, match="c/2/0"):
        a[...]


def test_garbage_blosc_frame_is_a_corruption_error(tmp_path):
    a = _create(tmp_path, shape=(4, 6), dtype="f4", chunks=(1, 6), compressors=BLOSC)
    a[...] = _data((4, 6))
    (tmp_path / "a" / "c" / "3" / "0").write_bytes(b"\x02\x01\x21\x04" + b"\x60\x00\x00\x00" * 3 + b"junk")
    with pytest.raises(CorruptionError, match="c/3/0"):
        a[...]


def test_results_never_alias_scratch_memory(tmp_path):
    x, y = _data((8, 8), seed=1), _data((8, 8), seed=2)
    a = _create(tmp_path, "x", shape=x.shape, dtype="f4", chunks=(3, 3), compressors=BLOSC)
    b = _create(tmp_path, "y", shape=y.shape, dtype="f4", chunks=(3, 3), compressors=BLOSC)
    a[...] = x
    b[...] = y
    first = a[...]
    second = b[...]
    third = a[2:5, 2:5]
    np.testing.assert_array_equal(first, x)  # not overwritten by the later reads
    np.testing.assert_array_equal(second, y)
    np.testing.assert_array_equal(third, x[2:5, 2:5])
    assert (first.flags.writeable and first.flags.owndata) or first.base is not None
    first[...] = -1  # writing into a result changes nothing stored
    np.testing.assert_array_equal(a[...], x)


def test_concurrent_reads_from_many_threads(tmp_path):
    data = _data((16, 12))
    a = _create(tmp_path, shape=data.shape, dtype="f4", chunks=(3, 5), compressors=BLOSC)
    a[...] = data
    errors = []

    def worker(seed):
        rng = np.random.default_rng(seed)
        for _ in range(20):
            i, j = sorted(rng.integers(0, 16, 2))
            if not np.array_equal(a[i : j + 1], data[i : j + 1]):
                errors.append((i, j))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# ---- writes: inline encode-and-store with scratch chunks ----------------------------------------
@pytest.mark.parametrize("compressors", [None, BLOSC, [ZSTD, CRC]], ids=["raw", "blosc", "zstd-crc"])
def test_inline_writes_store_every_chunk_correctly(tmp_path, compressors):
    data = _data((10, 7))
    a = _create(tmp_path, shape=data.shape, dtype="f4", chunks=(3, 3), compressors=compressors)
    a[...] = data  # all chunks go through the same per-thread scratch buffer
    np.testing.assert_array_equal(z3.open_array(str(tmp_path / "a"))[...], data)
    files = sorted(str(p.relative_to(tmp_path / "a")) for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert len(files) == 1 + 4 * 3 and not any(".z3tmp" in f for f in files)


def test_inline_writes_read_back_by_zarr_python(tmp_path):
    import zarr

    data = _data((9, 9))
    a = _create(tmp_path, shape=data.shape, dtype="f4", chunks=(2, 4), compressors=BLOSC)
    a[...] = data
    a[3:5, 1:7] = 0.5  # partial chunks: read-modify-write
    data[3:5, 1:7] = 0.5
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"), mode="r")[...], data)


@pytest.mark.parametrize(
    "config",
    [
        {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4},
        {"cname": "zstd", "clevel": 3, "shuffle": "bitshuffle", "typesize": 4},
        {"cname": "blosclz", "clevel": 9, "shuffle": "noshuffle"},
        {"cname": "lz4hc", "clevel": 1, "shuffle": "shuffle", "typesize": 8, "blocksize": 4096},
        {"cname": "zlib", "clevel": 2, "shuffle": "shuffle", "typesize": 3},  # not whole items
    ],
    ids=str,
)
@pytest.mark.parametrize("nbytes", [1, 1000, 100_000])
def test_blosc_encode_into_writes_the_same_frame_as_encode(config, nbytes):
    from zarr3_backend.codecs import blosc as blosc_module

    assert blosc_module._compress_ctx() is not None  # the numcodecs build here exports it
    codec = BloscCodec.from_config(config)
    spec = ChunkSpec((nbytes // 4,), np.dtype("f4"), 0.0)
    data = np.frombuffer(_data(nbytes, dtype="u1", seed=nbytes).tobytes(), dtype="u1")
    out = memoryview(bytearray(nbytes + 64))
    got = codec.encode_into(data, spec, out)
    assert isinstance(got, memoryview) and got.obj is out.obj  # written into the caller's buffer
    assert bytes(got) == bytes(codec.encode(data, spec))
    assert bytes(codec.decode(got, spec)) == data.tobytes()


def test_blosc_encode_into_falls_back_when_it_cannot_write_in_place(monkeypatch):
    from zarr3_backend.codecs import blosc as blosc_module

    codec = BloscCodec.from_config(BLOSC["configuration"])
    spec = ChunkSpec((256,), np.dtype("f4"), 0.0)
    data = _data(256)
    small = memoryview(bytearray(data.nbytes))  # may be too small for an incompressible chunk
    assert bytes(codec.encode_into(data, spec, small)) == bytes(codec.encode(data, spec))
    monkeypatch.setattr(blosc_module, "_compress_ctx", lambda: None)  # not exported: numcodecs
    big = memoryview(bytearray(data.nbytes + 64))
    got = codec.encode_into(data, spec, big)
    assert not isinstance(got, memoryview) and bytes(got) == bytes(codec.encode(data, spec))


def test_blosc_encode_into_reports_an_unknown_compressor_as_a_codec_error(monkeypatch):
    from zarr3_backend.codecs import blosc as blosc_module
    from zarr3_backend.errors import CodecError

    monkeypatch.setattr(blosc_module, "available_cnames", lambda: frozenset({"lz4", "nope"}))
    bad = BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4)
    object.__setattr__(bad, "cname", "nope")  # bypasses validation to reach c-blosc itself
    with pytest.raises(CodecError, match=r"blosc.*compression of 256 bytes failed"):
        bad.encode_into(_data(64), ChunkSpec((64,), np.dtype("f4"), 0.0), memoryview(bytearray(512)))


def test_inline_blosc_writes_match_the_bytes_of_a_memory_store_write(tmp_path):
    data = _data((40, 30))
    kw = dict(shape=data.shape, dtype="f4", chunks=(16, 16), compressors=BLOSC, fill_value=0)
    a = z3.create_array(str(tmp_path / "a"), **kw)  # inline: compressed into per-thread scratch
    a[...] = data
    mem = z3.create_array(z3.MemoryStore(), **kw)  # whole-bytes path
    mem[...] = data
    for key in ("c/0/0", "c/1/1", "c/2/1"):
        assert (tmp_path / "a" / key).read_bytes() == bytes(mem.store.get(key))
    np.testing.assert_array_equal(z3.open_array(str(tmp_path / "a"))[...], data)


def test_fill_chunks_are_erased_by_inline_writes(tmp_path):
    a = _create(tmp_path, shape=(4, 4), dtype="f4", chunks=(2, 2), compressors=None)
    a[...] = 1.0
    a[0:2, 0:2] = 0.0
    assert not (tmp_path / "a" / "c" / "0" / "0").exists()
    assert (tmp_path / "a" / "c" / "1" / "1").exists()
    expected = np.ones((4, 4), "f4")
    expected[:2, :2] = 0
    np.testing.assert_array_equal(a[...], expected)


def test_failed_write_to_read_only_store_writes_nothing(tmp_path):
    a = _create(tmp_path, shape=(4, 4), dtype="f4", chunks=(2, 2), compressors=None)
    a[...] = 1.0

    def snapshot():
        return {p: p.read_bytes() for p in (tmp_path / "a").rglob("*") if p.is_file()}

    before = snapshot()
    ro = z3.open_array(str(tmp_path / "a"), mode="r")
    with pytest.raises(ReadOnlyError):
        ro[...] = 2.0
    with pytest.raises(ReadOnlyError):
        ro[0:1, 0:1] = 0.0
    assert snapshot() == before


# ---- the fill-value probe -----------------------------------------------------------------------
@pytest.mark.parametrize("fill", [0.0, np.nan, 3.0])
def test_fill_probe_never_decides_alone_that_a_chunk_is_fill(fill):
    chunk = np.full((5, 5), fill, dtype="f4")
    assert is_fill(chunk, np.float32(fill))
    chunk[2, 2] = 1.5  # first and last elements still equal the fill value
    assert not is_fill(chunk, np.float32(fill))
    chunk[...] = fill
    chunk[0, 0] = 7.0
    assert not is_fill(chunk, np.float32(fill))


def test_fill_probe_keeps_the_nan_and_signed_zero_rules():
    assert is_fill(np.array([np.nan, np.nan], "f4"), np.float32(np.nan))
    assert not is_fill(np.array([np.nan, 0.0], "f4"), np.float32(np.nan))
    assert not is_fill(np.array([0.0, -0.0, 0.0], "f4"), np.float32(0.0))  # bit for bit
    assert not is_fill(np.array([-0.0, 0.0, 0.0], "f4"), np.float32(0.0))
    assert is_fill(np.zeros((0,), "f4"), np.float32(1.0))
    assert is_fill(np.array([0, 5, 0, 7, 0], "i2")[::2], np.int16(0))  # strided views
    assert not is_fill(np.array([0, 5, 3, 7, 0], "i2")[::2], np.int16(0))


def test_chunk_with_fill_at_both_ends_is_still_written(tmp_path):
    a = _create(tmp_path, shape=(6,), dtype="f4", chunks=(6,), compressors=None)
    value = np.zeros(6, "f4")
    value[3] = 2.0
    a[...] = value
    assert (tmp_path / "a" / "c" / "0").exists()
    np.testing.assert_array_equal(a[...], value)


# ---- shards: batched indexes, single-region results, get_regions ------------------------
class CountingLocalStore(LocalStore):
    """Records every ranged read (the shard-index fetches are the suffix ranges)."""

    def __init__(self, root, **kw):
        super().__init__(root, **kw)
        self.ranged: list[list] = []

    def get_partial_values(self, key_ranges):
        self.ranged.append(list(key_ranges))
        return super().get_partial_values(key_ranges)

    def with_read_only(self, read_only=True):
        return CountingLocalStore(self.root, read_only=read_only)


def _sharded(tmp_path, data, shards=(8, 8), chunks=(4, 4), compressors=None):
    store = CountingLocalStore(str(tmp_path / "s"))
    a = z3.create_array(
        store,
        shape=data.shape,
        dtype=data.dtype,
        chunks=chunks,
        shards=shards,
        compressors=compressors,
        fill_value=0,
    )
    a[...] = data
    store.ranged.clear()
    return a, store


def test_get_regions_matches_numpy_and_reads_each_shard_index_once(tmp_path):
    data = _data((16, 16))
    a, store = _sharded(tmp_path, data)
    regions = [
        (slice(0, 4), slice(4, 8)),
        (slice(2, 10), slice(5, 13)),
        (slice(12, 16), slice(0, 4)),
        (slice(0, 4), slice(4, 8)),
        (slice(0, 16), slice(0, 16)),
    ]
    got = a.get_regions(regions)
    for r, g in zip(regions, got, strict=True):
        np.testing.assert_array_equal(g, data[r])
    suffix_keys = [k for call in store.ranged for k, r in call if r is not None and r.is_suffix]
    assert sorted(suffix_keys) == sorted(set(suffix_keys))  # every touched shard's index once
    assert len(suffix_keys) == 4
    assert not np.shares_memory(got[0], got[3])  # the same region twice: two independent arrays
    got[0][...] = -1
    np.testing.assert_array_equal(got[3], data[regions[3]])


def test_get_regions_on_unsharded_and_compressed_arrays(tmp_path):
    data = _data((10, 9))
    a = _create(tmp_path, shape=data.shape, dtype="f4", chunks=(3, 4), compressors=BLOSC)
    a[...] = data
    regions = [(slice(0, 3), slice(0, 4)), (slice(1, 10), slice(2, 9)), (slice(9, 10), slice(8, 9))]
    for r, g in zip(regions, a.get_regions(regions), strict=True):
        np.testing.assert_array_equal(g, data[r])
    assert a.get_regions([]) == []


def test_get_regions_of_missing_shards_are_fill(tmp_path):
    data = np.zeros((16, 16), "f4")
    data[:8, :8] = _data((8, 8))
    a, _ = _sharded(tmp_path, data)
    assert not (tmp_path / "s" / "c" / "1" / "1").exists()
    got = a.get_regions([(slice(8, 16), slice(8, 12)), (slice(4, 12), slice(4, 12))])
    np.testing.assert_array_equal(got[0], 0)
    np.testing.assert_array_equal(got[1], data[4:12, 4:12])


def test_single_shard_region_results_are_correct_in_any_order(tmp_path):
    data = _data((16, 16))
    a, _ = _sharded(tmp_path, data)
    np.testing.assert_array_equal(a[0:4, 4:8], data[0:4, 4:8])  # one inner chunk, decoded in place
    np.testing.assert_array_equal(a[7:1:-1, 3], data[7:1:-1, 3])  # reversed: copied in order
    np.testing.assert_array_equal(a[5, 6], data[5, 6])
    np.testing.assert_array_equal(a.oindex[[3, 1, 2], 0:3], data[[3, 1, 2], 0:3])
    np.testing.assert_array_equal(a.vindex[[3, 1], [2, 0]], data[[3, 1], [2, 0]])


def test_corrupt_shard_index_in_a_batch_names_the_shard(tmp_path):
    data = _data((16, 16))
    a, _ = _sharded(tmp_path, data)
    path = tmp_path / "s" / "c" / "1" / "0"
    raw = bytearray(path.read_bytes())
    raw[-10] ^= 0xFF  # inside the crc32c-guarded index
    path.write_bytes(bytes(raw))
    with pytest.raises(ChecksumError, match="c/1/0"):
        a.get_regions([(slice(0, 4), slice(0, 4)), (slice(8, 12), slice(0, 4))])
    with pytest.raises(ChecksumError, match="c/1/0"):
        a[8:12, 0:4]


def test_compressed_sharded_reads(tmp_path):
    data = _data((16, 16))
    a, _ = _sharded(tmp_path, data, compressors=BLOSC)
    np.testing.assert_array_equal(a[...], data)
    np.testing.assert_array_equal(a[3:13, 1:2], data[3:13, 1:2])


# ---- the local store's read primitives ----------------------------------------------------------
def test_get_into_reads_into_the_given_buffer(tmp_path):
    store = LocalStore(str(tmp_path))
    store.set("a/b", b"0123456789")
    target = bytearray(10)
    sizes = []

    def alloc(n):
        sizes.append(n)
        return memoryview(target)[:n]

    got = store.get_into("a/b", alloc)
    assert bytes(got) == b"0123456789" and bytes(target) == b"0123456789" and sizes == [10]
    assert store.get_into("a/missing", alloc) is None
    assert store.get_into("a", alloc) is None  # a directory is not a key


def test_symlinks_out_of_the_root_are_refused_by_every_read(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(outside / "secret", root / "leak")
    os.symlink(outside, root / "dir")
    store = LocalStore(str(root))
    for key in ("leak", "dir/secret", "dir/missing"):
        with pytest.raises(InvalidKeyError, match=key):
            store.get(key)
        with pytest.raises(InvalidKeyError, match=key):
            store.get_into(key, lambda n: memoryview(bytearray(n)))
        with pytest.raises(InvalidKeyError, match=key):
            store.get_partial_values([(key, ByteRange(0, 2))])


def test_symlinks_inside_the_root_are_followed(tmp_path):
    root = tmp_path / "root"
    (root / "real").mkdir(parents=True)
    (root / "real" / "k").write_bytes(b"value")
    os.symlink(root / "real", root / "alias")
    store = LocalStore(str(root))
    assert store.get("alias/k") == b"value"
    assert bytes(store.get_into("alias/k", lambda n: memoryview(bytearray(n)))) == b"value"


def test_byte_ranges_clip_at_the_end_of_the_file(tmp_path):
    store = LocalStore(str(tmp_path))
    store.set("k", b"abcdef")
    assert store.get("k", ByteRange(2, 3)) == b"cde"
    assert store.get("k", ByteRange(4, 10)) == b"ef"
    assert store.get("k", ByteRange(10, 2)) == b""
    assert store.get("k", ByteRange(3)) == b"def"
    assert store.get("k", ByteRange.suffix(2)) == b"ef"
    assert store.get("k", ByteRange.suffix(20)) == b"abcdef"
    assert store.get("missing", ByteRange.suffix(2)) is None


# ---- scratch buffers ----------------------------------------------------------------------------
def test_scratch_buffers_are_per_thread_and_per_slot():
    a = _threads.scratch_buffer(100, 0)
    b = _threads.scratch_buffer(50, 0)
    c = _threads.scratch_buffer(100, 1)
    assert len(a) == 100 and len(b) == 50 and not a.readonly
    assert np.shares_memory(np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8))  # reused
    assert not np.shares_memory(np.frombuffer(a, np.uint8), np.frombuffer(c, np.uint8))
    other = []
    t = threading.Thread(target=lambda: other.append(_threads.scratch_buffer(100, 0)))
    t.start()
    t.join()
    assert not np.shares_memory(np.frombuffer(a, np.uint8), np.frombuffer(other[0], np.uint8))


def test_huge_scratch_requests_are_not_kept():
    big = _threads.SCRATCH_KEEP_MAX + 1
    x = _threads.scratch_buffer(big, 7)
    y = _threads.scratch_buffer(big, 7)
    assert len(x) == big and not np.shares_memory(np.frombuffer(x, np.uint8), np.frombuffer(y, np.uint8))


# ---- codecs decoding into a caller's buffer -----------------------------------------------------
SPEC = ChunkSpec((256,), np.dtype("f4"), np.float32(0))


@pytest.mark.parametrize(
    "codec", [BloscCodec(cname="lz4", shuffle="shuffle", typesize=4), ZstdCodec(level=3)]
)
def test_decode_into_fills_the_buffer_or_refuses(codec):
    x = np.arange(256, dtype="f4")
    frame = codec.encode(memoryview(x).cast("B"), SPEC)
    dest = bytearray(1024)
    assert codec.decode_into(frame, SPEC, memoryview(dest)).nbytes == 1024
    np.testing.assert_array_equal(np.frombuffer(dest, "f4"), x)
    with pytest.raises(CorruptionError, match=codec.name):
        codec.decode_into(frame, SPEC, memoryview(bytearray(1020)))
    with pytest.raises(CorruptionError, match=codec.name):
        codec.decode_into(bytes(frame)[:10], SPEC, memoryview(bytearray(1024)))


def test_zstd_decode_into_a_frame_without_content_size(tmp_path):
    if shutil.which("zstd") is None:
        pytest.skip("the zstd command line tool writes the streaming frame this test needs")
    x = np.arange(256, dtype="f4")
    frame = subprocess.run(
        ["zstd", "-c", "-q", "-"], input=x.tobytes(), capture_output=True, check=True
    ).stdout
    codec = ZstdCodec()
    dest = bytearray(1024)
    codec.decode_into(frame, SPEC, memoryview(dest))
    np.testing.assert_array_equal(np.frombuffer(dest, "f4"), x)
    with pytest.raises(CorruptionError, match="zstd"):
        codec.decode_into(frame, SPEC, memoryview(bytearray(1000)))


# ---- sharded writes straight from the caller's array --------------------------------------------
@pytest.mark.parametrize("layout", ["transposed", "strided", "broadcast"])
def test_whole_shard_writes_from_non_contiguous_values(tmp_path, layout):
    base = _data((16, 16))
    value = {"transposed": base.T, "strided": _data((32, 16))[::2], "broadcast": np.float32(2.5)}[layout]
    expected = np.broadcast_to(value, (16, 16))
    a, _ = _sharded(tmp_path, np.zeros((16, 16), "f4"))
    a[...] = value
    np.testing.assert_array_equal(z3.open_array(str(tmp_path / "s"))[...], expected)
    if layout != "broadcast":
        np.testing.assert_array_equal(value, base.T if layout == "transposed" else value)  # not modified


def test_whole_shard_writes_skip_fill_shards_and_inner_chunks(tmp_path):
    value = np.zeros((16, 16), "f4")
    value[0, 0] = 1.0  # shard (0, 0): one inner chunk of data, three of fill
    a, _ = _sharded(tmp_path, np.ones((16, 16), "f4"))
    a[...] = value
    assert not (tmp_path / "s" / "c" / "1" / "1").exists()  # an all-fill shard is erased
    shard = (tmp_path / "s" / "c" / "0" / "0").read_bytes()
    assert len(shard) == 4 * 4 * 4 + 4 * 16 + 4  # one stored inner chunk plus the index
    np.testing.assert_array_equal(a[...], value)
    wec = z3.open_array(str(tmp_path / "s"), mode="r+")
    wec.write_empty_chunks = True
    wec[...] = value
    assert (tmp_path / "s" / "c" / "1" / "1").exists()
    np.testing.assert_array_equal(wec[...], value)


def test_get_into_byte_ranges_clip_like_get(tmp_path):
    store = LocalStore(str(tmp_path))
    store.set("k", b"abcdef")
    ranges = [
        ByteRange(2, 3),
        ByteRange(4, 10),
        ByteRange(10, 2),
        ByteRange(3),
        ByteRange.suffix(2),
        ByteRange.suffix(20),
    ]
    for r in ranges:
        got = store.get_into("k", lambda n: memoryview(bytearray(n)), r)
        assert bytes(got) == store.get("k", r), r
    assert store.get_into("missing", lambda n: memoryview(bytearray(n)), ByteRange(0, 2)) is None


# ---- raw inner chunks read straight into the output (ShardingCodec.read_partial_into) -----------
def _raw_sharded(tmp_path, data, *, index_location="end", endian="little", chunks=(4, 4), shards=(8, 8)):
    codecs = [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": list(chunks),
                "codecs": [{"name": "bytes", "configuration": {"endian": endian}}],
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, CRC],
                "index_location": index_location,
            },
        }
    ]
    a = z3.create_array(
        str(tmp_path / "r"), shape=data.shape, dtype=data.dtype, chunks=shards, codecs=codecs, fill_value=0
    )
    a[...] = data
    return z3.open_array(str(tmp_path / "r"))


@pytest.mark.parametrize("index_location", ["start", "end"])
@pytest.mark.parametrize("endian", ["little", "big"])
def test_raw_inner_chunk_reads_match_numpy(tmp_path, index_location, endian):
    data = _data((16, 16))
    data[8:12, 12:16] = 0  # one inner chunk of fill: not stored, read as fill
    a = _raw_sharded(tmp_path, data, index_location=index_location, endian=endian)
    assert raw_shard_reads(a._pipeline)
    selections = [
        (slice(0, 4), slice(4, 8)),  # one whole inner chunk: read into the output itself
        (slice(0, 8), slice(0, 8)),  # a whole shard
        (slice(2, 10), slice(5, 15)),  # partial inner chunks across shards: scratch path
        (slice(8, 12), slice(12, 16)),  # the missing inner chunk
        (slice(7, 1, -1), 3),  # reversed, an int
        (5, slice(None, None, 3)),
    ]
    for sel in selections:
        np.testing.assert_array_equal(a[sel], data[sel])
    got = a.get_regions([s for s in selections if all(isinstance(x, slice) for x in s)])
    for g, sel in zip(got, [s for s in selections if all(isinstance(x, slice) for x in s)], strict=True):
        np.testing.assert_array_equal(g, data[sel])
    np.testing.assert_array_equal(a.oindex[[3, 1, 9], 0:6], data[[3, 1, 9], 0:6])


def test_raw_shard_fast_path_only_for_plain_inner_chunks(tmp_path):
    data = _data((16, 16))
    a, _ = _sharded(tmp_path, data, compressors=BLOSC)
    assert not raw_shard_reads(a._pipeline)
    np.testing.assert_array_equal(a[0:4, 4:8], data[0:4, 4:8])
    mem = z3.create_array(z3.MemoryStore(), shape=(8,), dtype="f4", chunks=(2,), shards=(4,), fill_value=0)
    assert not raw_shard_reads(mem._pipeline)


def _rewrite_index(path, layout, mutate):
    from zarr3_backend.codecs.shard_index import decode_index, encode_index

    raw = bytearray(path.read_bytes())
    isz = layout.index_size
    at_end = layout.index_location == "end"
    index = decode_index(bytes(raw[-isz:] if at_end else raw[:isz]), layout.index).copy()
    mutate(index, len(raw))
    new = encode_index(index, layout.index)
    if at_end:
        raw[-isz:] = new
    else:
        raw[:isz] = new
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("index_location", ["start", "end"])
def test_raw_inner_chunk_pointing_outside_the_data_is_corruption(tmp_path, index_location):
    data = _data((16, 16))
    a = _raw_sharded(tmp_path, data, index_location=index_location)
    layout = a._pipeline.shard_codec.layout(a._pipeline.chain.specs[-1])
    path = tmp_path / "r" / "c" / "1" / "0"

    def past_the_end(index, size):  # inner chunk (1, 1) now ends in the index or past the end
        index[1, 1, 0] = size - layout.index_size - 8 if index_location == "end" else size - 8

    _rewrite_index(path, layout, past_the_end)
    expected = "into the shard index" if index_location == "end" else "past the end of the shard"
    with pytest.raises(CorruptionError, match=r"^shard 'c/1/0': .*" + expected) as info:
        a[12:16, 4:8]
    assert "inner chunk (1, 1)" in str(info.value)
    with pytest.raises(CorruptionError, match=r"shard 'c/1/0'"):
        a.get_regions([(slice(0, 4), slice(0, 4)), (slice(12, 16), slice(4, 8))])
    np.testing.assert_array_equal(a[8:12, 0:4], data[8:12, 0:4])  # the other entries still read


def test_raw_inner_chunk_of_the_wrong_size_is_corruption(tmp_path):
    data = _data((16, 16))
    a = _raw_sharded(tmp_path, data)
    layout = a._pipeline.shard_codec.layout(a._pipeline.chain.specs[-1])

    def shorter(index, size):
        index[0, 1, 1] -= 4

    _rewrite_index(tmp_path / "r" / "c" / "0" / "0", layout, shorter)
    with pytest.raises(CorruptionError, match=r"shard 'c/0/0'.*inner chunk \(0, 1\).*holds 60 bytes"):
        a[0:4, 4:8]


def test_rewritten_shard_is_read_afresh_not_from_the_index_memo(tmp_path):
    data = _data((16, 16))
    a = _raw_sharded(tmp_path, data)
    np.testing.assert_array_equal(a[0:4, 0:4], data[0:4, 0:4])
    assert a._pipeline.index_memo and all(not i.flags.writeable for i in a._pipeline.index_memo.values())
    w = z3.open_array(str(tmp_path / "r"), mode="r+")
    w[0:4, 0:4] = 0  # the inner chunk is dropped: the shard's index changes
    w[4:8, 4:8] = 7
    np.testing.assert_array_equal(a[0:8, 0:8][:4, :4], 0)
    np.testing.assert_array_equal(a[4:8, 4:8], 7)


def test_get_regions_results_from_shared_slabs_are_independent(tmp_path, monkeypatch):
    from zarr3_backend import _slabs

    monkeypatch.setattr(_slabs, "SLAB_BYTES", 64 * 1024)  # several slabs for a small test
    monkeypatch.setattr(_slabs, "POOL", _slabs.BufferPool(2**20))
    data = _data((64, 64, 32))
    a = _raw_sharded(tmp_path, data, chunks=(8, 8, 32), shards=(16, 16, 32))
    regions = [(slice(i, i + 8), slice(j, j + 8), slice(0, 32)) for i in (0, 8, 16) for j in (0, 24, 40)]
    regions = regions * 5  # repeated regions are read once, then copied
    small = _slabs.SLAB_BYTES // 4
    assert sum(data[r].nbytes for r in regions) >= 2 * small  # big enough for shared slabs
    got = a.get_regions(regions)
    for r, g in zip(regions, got, strict=True):
        np.testing.assert_array_equal(g, data[r])
        assert g.flags.c_contiguous and g.flags.writeable
    for i in range(0, len(got) - 1):
        assert not np.shares_memory(got[i], got[i + 1])
    got[0][...] = -1
    np.testing.assert_array_equal(got[9], data[regions[9]])  # the same region, untouched
    np.testing.assert_array_equal(got[1], data[regions[1]])  # the neighbour in the slab


def test_outputs_carve_aligned_views_only_for_small_plain_arrays(monkeypatch):
    from zarr3_backend import _slabs
    from zarr3_backend.core import read_outputs as array_mod

    monkeypatch.setattr(_slabs, "SLAB_BYTES", 64 * 1024)
    monkeypatch.setattr(_slabs, "POOL", _slabs.BufferPool(2**20))
    shapes = [(1000,)] * 100 + [(3,), (0,), (64 * 1024,), (2**18,)]
    outs = array_mod.outputs(shapes, np.dtype("f8"), "test")
    assert [o.shape for o in outs] == shapes
    assert all(o.ctypes.data % 64 == 0 for o in outs[:-4])
    assert outs[-2].base is None  # too big to share a slab, too small for the pool
    assert outs[-1].base is not None and outs[-1].base.nbytes >= 2 * 2**20  # a pooled buffer of its own
    assert outs[0].base is not None and outs[0].base is outs[5].base  # a shared slab
    assert outs[0].base.base is None  # the pooled slab itself, so pooled reuse can see its views
    objs = array_mod.outputs([(2,)] * 3, np.dtype(object), "test")
    assert all(o.dtype == object and o.base is None for o in objs)


def test_get_into_reads_only_as_much_as_a_shorter_buffer(tmp_path):
    store = LocalStore(str(tmp_path))
    store.set("k", b"abcdef")
    sizes = []
    buf = bytearray(b"xxxxxx")

    def alloc(n):
        sizes.append(n)
        return memoryview(buf)[:3]

    got = store.get_into("k", alloc, ByteRange(1, 5))
    assert sizes == [5] and bytes(got) == b"bcd" and buf == bytearray(b"bcdxxx")


def test_sharding_layout_follows_the_spec_it_is_given():
    from zarr3_backend.codecs.sharding import ShardingCodec

    codec = ShardingCodec((2, 2))
    s1 = ChunkSpec((4, 4), np.dtype("f4"), np.float32(0))
    s2 = ChunkSpec((4, 8), np.dtype("f4"), np.float32(0))
    l1 = codec.layout(s1)
    assert codec.layout(s1) is l1
    assert codec.layout(s2).grid == (2, 4)
    assert codec.layout(ChunkSpec((4, 4), np.dtype("f4"), np.float32(0))).grid == (2, 2)


# ---- one open file per shard, neighbouring inner chunks in one vectored read -------------------
class _CountingReader:
    """A PositionedReader over bytes that records each vectored read."""

    def __init__(self, data: bytes) -> None:
        self.data, self.size, self.calls = data, len(data), []

    def read_into(self, offset, buffers):
        self.calls.append((offset, [len(b) for b in buffers]))
        got = 0
        for b in buffers:
            piece = self.data[offset + got : offset + got + len(b)]
            b[: len(piece)] = piece
            got += len(piece)
            if len(piece) < len(b):
                break
        return got


def _reject_ranged_reads(ranges):
    raise AssertionError(f"raw inner chunk reads go through the positioned reader, not ranged reads {ranges}")


def test_read_many_into_merges_neighbouring_inner_chunks(tmp_path):
    data = _data((16, 16))
    a = _raw_sharded(tmp_path, data)  # shards 8x8 of 4x4 inner chunks, stored in C order
    codec, spec = a._pipeline.shard_codec, a._pipeline.chain.specs[-1]
    raw = (tmp_path / "r" / "c" / "0" / "0").read_bytes()
    index = shard_indexes(a._pipeline, ["c/0/0"])["c/0/0"]
    reader = _CountingReader(raw)
    outs = [np.empty((4, 4), "f4") for _ in range(4)]
    jobs = [
        ((slice(i, i + 4), slice(j, j + 4)), o)
        for (i, j), o in zip([(0, 0), (0, 4), (4, 0), (4, 4)], outs, strict=True)
    ]
    jobs.append(((slice(1, 7), slice(2, 3)), np.empty((6, 1), "f4")))  # partial: via scratch
    ShardView(codec.layout(spec), _reject_ranged_reads).read_raw_into(reader, jobs, index)
    for sel, out in jobs:
        np.testing.assert_array_equal(out, data[sel])
    whole = [c for c in reader.calls if len(c[1]) > 1]
    assert whole == [(0, [64, 64, 64, 64])]  # four back-to-back chunks: one read, four buffers
    assert len(reader.calls) == 1 + 2  # plus one scratch read per partly read inner chunk


def test_read_many_into_reports_a_shard_that_shrank_while_reading(tmp_path):
    data = _data((16, 16))
    a = _raw_sharded(tmp_path, data)
    codec, spec = a._pipeline.shard_codec, a._pipeline.chain.specs[-1]
    raw = (tmp_path / "r" / "c" / "0" / "0").read_bytes()
    index = shard_indexes(a._pipeline, ["c/0/0"])["c/0/0"]
    reader = _CountingReader(raw)
    reader.data = raw[:100]  # size still says whole: the file shrank after it was opened
    with pytest.raises(CorruptionError, match=r"past the end.*inner chunk \(0, 1\)"):
        ShardView(codec.layout(spec), _reject_ranged_reads).read_raw_into(
            reader, [((slice(0, 4), slice(0, 8)), np.empty((4, 8), "f4"))], index
        )


def test_file_reader_fills_buffers_across_short_reads(tmp_path, monkeypatch):
    store = LocalStore(str(tmp_path))
    store.set("k", bytes(range(200)))
    real = os.preadv

    def short(fd, buffers, offset):  # the kernel may return less than asked
        first = buffers[0]
        return real(fd, [first[: max(1, len(first) // 2)]], offset)

    monkeypatch.setattr(os, "preadv", short)
    with store.open_reader("k") as reader:
        assert reader.size == 200
        bufs = [memoryview(bytearray(7)), memoryview(bytearray(50)), memoryview(bytearray(3))]
        assert reader.read_into(10, bufs) == 60
        assert b"".join(bytes(b) for b in bufs) == bytes(range(10, 70))
        tail = [memoryview(bytearray(8)), memoryview(bytearray(8))]
        assert reader.read_into(195, tail) == 5  # end of file
        assert bytes(tail[0][:5]) == bytes(range(195, 200))
    assert store.open_reader("missing") is None
    store.set("d/inner", b"x")
    assert store.open_reader("d") is None  # a directory is not a key


def test_file_reader_refuses_symlinks_out_of_the_root(tmp_path):
    outside = tmp_path / "outside"
    outside.write_bytes(b"secret")
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(outside, root / "link")
    with pytest.raises(InvalidKeyError):
        LocalStore(str(root)).open_reader("link")


# ---- recycled result slabs ------------------------------------------------------------------------
def test_buffers_are_reused_only_when_no_view_is_left():
    from zarr3_backend._slabs import BufferPool

    pool = BufferPool(cap_bytes=10 * (4096 + 64))
    first = pool.take(4096)
    view = first[100:200].view("f4")
    del first
    second = pool.take(4096)
    assert not np.shares_memory(view, second)  # a view of the first buffer is alive
    mv = memoryview(view)
    del view
    third = pool.take(4096)
    assert not np.shares_memory(np.asarray(mv), third)  # a memoryview keeps it too
    del mv
    fourth = pool.take(4096)  # the first buffer: nothing refers to it now
    assert pool.pooled_bytes == 3 * (4096 + 64)
    assert fourth.ctypes.data % 64 == 0 and fourth.nbytes == 4096 and fourth.flags.writeable
    del second, third, fourth
    again = pool.take(4096)
    assert pool.pooled_bytes == 3 * (4096 + 64)  # reused, no new buffer
    other = pool.take(1000)  # another size: a buffer of its own
    assert other.nbytes == 1000 and pool.pooled_bytes == 3 * (4096 + 64) + 1064
    del again, other


def test_buffer_pool_is_bounded_and_can_be_switched_off():
    from zarr3_backend._slabs import BufferPool

    pool = BufferPool(cap_bytes=2 * (4096 + 64))
    held = [pool.take(4096) for _ in range(5)]  # three beyond the cap: plain allocations
    assert pool.pooled_bytes == 2 * (4096 + 64)
    assert len({h.ctypes.data for h in held}) == 5
    off = BufferPool(cap_bytes=0)
    a = off.take(4096)
    del a
    off.take(4096)
    assert off.pooled_bytes == 0
    pool.clear()
    assert pool.pooled_bytes == 0 and all(h.flags.writeable for h in held)


def test_buffer_pool_size_comes_from_the_environment():
    from zarr3_backend._slabs import default_cap_bytes

    assert default_cap_bytes({"ZARR3_BUFFER_POOL_MB": "0"}) == 0
    assert default_cap_bytes({"ZARR3_BUFFER_POOL_MB": "5", "MALLOC_TRIM_THRESHOLD_": "1"}) == 5 * 2**20
    assert default_cap_bytes({"MALLOC_TRIM_THRESHOLD_": "65536"}) == 64 * 2**20  # dask's workers
    assert 0 < default_cap_bytes({}) <= 1024 * 2**20
    assert default_cap_bytes({"ZARR3_BUFFER_POOL_MB": "0.5"}) == 2**19
    with pytest.warns(UserWarning, match="ZARR3_BUFFER_POOL_MB"):
        assert default_cap_bytes({"ZARR3_BUFFER_POOL_MB": "lots"}) == default_cap_bytes({})


def test_chunk_sized_reads_reuse_the_memory_of_results_that_are_gone(tmp_path, monkeypatch):
    from zarr3_backend import _slabs

    monkeypatch.setattr(_slabs, "POOL", _slabs.BufferPool(64 * 2**20))
    data = _data((4, 512, 512))  # 1 MiB per chunk: the pooled range
    a = _create(tmp_path, shape=data.shape, dtype="f4", chunks=(1, 512, 512), compressors=None)
    a[...] = data
    first = a[0]
    address = first.ctypes.data
    assert first.base is not None and _slabs.POOL.pooled_bytes > 0  # from the pool
    second = a[1]  # the first is alive: other memory
    assert second.ctypes.data != address
    np.testing.assert_array_equal(first, data[0])
    del first
    third = a[2]  # the first result's memory, handed out again
    assert third.ctypes.data == address
    np.testing.assert_array_equal(third, data[2])
    np.testing.assert_array_equal(second, data[1])
    third[...] = -1  # results are writable and independent
    np.testing.assert_array_equal(a[2], data[2])
    small = a[0, :4, :4]  # below the pooled range: a plain array
    assert small.base is None or small.base.nbytes == small.nbytes
    _slabs.release_memory()
    assert _slabs.POOL.pooled_bytes == 0


def test_get_regions_reuses_slabs_of_results_that_are_gone(tmp_path, monkeypatch):
    from zarr3_backend import _slabs

    monkeypatch.setattr(_slabs, "SLAB_BYTES", 64 * 1024)
    monkeypatch.setattr(_slabs, "POOL", _slabs.BufferPool(2**20))
    data = _data((64, 64, 32))
    a = _raw_sharded(tmp_path, data, chunks=(8, 8, 32), shards=(16, 16, 32))
    regions = [
        (slice(i, i + 8), slice(j, j + 8), slice(0, 32)) for i in range(0, 64, 8) for j in range(0, 64, 8)
    ]
    got = a.get_regions(regions)
    pooled = _slabs.POOL.pooled_bytes
    kept = got[5]  # one result survives: its slab must not be handed out again
    del got
    again = a.get_regions(regions[::-1])
    assert _slabs.POOL.pooled_bytes == pooled + (64 * 1024 + 64)  # only the kept slab was replaced
    np.testing.assert_array_equal(kept, data[regions[5]])
    for r, g in zip(regions[::-1], again, strict=True):
        np.testing.assert_array_equal(g, data[r])
        assert not np.shares_memory(g, kept)


# ---- whole shards of raw inner chunks assembled in place ------------------------------------------
@pytest.mark.parametrize("index_location", ["start", "end"])
@pytest.mark.parametrize("endian", ["little", "big"])
@pytest.mark.parametrize("wec", [False, True])
def test_sharding_encode_into_writes_the_bytes_of_encode(index_location, endian, wec):
    from zarr3_backend.codecs.sharding import ShardingCodec

    codec = ShardingCodec.from_config(
        {
            "chunk_shape": [4, 4],
            "codecs": [{"name": "bytes", "configuration": {"endian": endian}}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, CRC],
            "index_location": index_location,
        }
    )
    spec = ChunkSpec((8, 12), np.dtype("f4"), 0.0)
    codec = codec.evolve(spec)
    data = _data((8, 12))
    data[4:8, 0:4] = 0  # one inner chunk of fill: left out unless write_empty_chunks
    source = np.asfortranarray(data)  # a strided source: every inner chunk is gathered
    out = memoryview(bytearray(data.nbytes + 1000))
    got = codec.encode_into(source, spec, out, write_empty_chunks=wec)
    assert isinstance(got, memoryview) and got.obj is out.obj
    assert bytes(got) == bytes(codec.encode(source, spec, write_empty_chunks=wec))
    np.testing.assert_array_equal(codec.decode(got, spec), data)
    assert codec.encode_into(np.zeros((8, 12), "f4"), spec, out) is None  # all fill: nothing stored
    small = memoryview(bytearray(data.nbytes))  # no room for the index: the plain encode
    assert bytes(codec.encode_into(source, spec, small)) == bytes(codec.encode(source, spec))


def test_sharding_encode_into_leaves_compressed_inner_chunks_to_encode():
    from zarr3_backend.codecs.sharding import ShardingCodec

    codec = ShardingCodec.from_config({"chunk_shape": [4], "codecs": [{"name": "bytes"}, BLOSC]})
    spec = ChunkSpec((8,), np.dtype("f4"), 0.0)
    codec = codec.evolve(spec)
    data = _data(8)
    got = codec.encode_into(data, spec, memoryview(bytearray(4096)))
    assert not isinstance(got, memoryview) and bytes(got) == bytes(codec.encode(data, spec))


@pytest.mark.parametrize("index_location", ["start", "end"])
def test_inline_shard_writes_match_the_bytes_of_a_memory_store_write(tmp_path, index_location):
    data = _data((24, 16))
    data[8:16, 0:8] = 0  # a whole shard of fill: erased, not written
    data[0:4, 8:12] = 0  # one inner chunk of fill inside a stored shard
    kw = dict(
        shape=data.shape,
        dtype="f4",
        chunks=(4, 4),
        shards=(8, 8),
        compressors=None,
        fill_value=0,
        shard_index={"index_location": index_location},
    )
    a = z3.create_array(str(tmp_path / "a"), **kw)
    a[...] = data  # whole shards, assembled in per-thread scratch memory
    mem = z3.create_array(z3.MemoryStore(), **kw)
    mem[...] = data
    assert not (tmp_path / "a" / "c" / "1" / "0").exists()
    for key in ("c/0/0", "c/0/1", "c/2/1"):
        assert (tmp_path / "a" / key).read_bytes() == bytes(mem.store.get(key))
    np.testing.assert_array_equal(z3.open_array(str(tmp_path / "a"))[...], data)


@pytest.mark.parametrize(
    "codecs",
    [
        [{"name": "bytes", "configuration": {"endian": "little"}}],
        [{"name": "bytes", "configuration": {"endian": "big"}}, BLOSC],
        [{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes"}, ZSTD, CRC],
    ],
    ids=["raw", "big-blosc", "transpose-zstd-crc"],
)
def test_whole_chunk_writes_from_contiguous_blocks_leave_the_values_alone(tmp_path, codecs):
    kw = dict(shape=(8, 12), dtype="f4", chunks=(4, 6), codecs=codecs, fill_value=0)
    a = z3.create_array(str(tmp_path / "a"), **kw)
    mem = z3.create_array(z3.MemoryStore(), **kw)
    block = np.ascontiguousarray(_data((4, 6)))  # exactly one chunk, C-ordered: no staging copy
    before = block.copy()
    a[4:8, 6:12] = block
    mem[4:8, 6:12] = block
    np.testing.assert_array_equal(block, before)  # codecs never write into the caller's values
    assert (tmp_path / "a" / "c" / "1" / "1").read_bytes() == bytes(mem.store.get("c/1/1"))
    a[0:4, 0:6] = 2.5  # a broadcast scalar: read-only, not C-ordered: staged as before
    np.testing.assert_array_equal(a[...][:4, :6], 2.5)
    np.testing.assert_array_equal(z3.open_array(str(tmp_path / "a"))[4:8, 6:12], before)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_buffer_pool_works_in_a_child_forked_while_its_lock_was_held():
    from zarr3_backend import _slabs

    with _slabs.POOL._lock:  # as if another thread were taking a buffer when the fork happens
        pid = os.fork()
        if pid == 0:  # the child: the pool must not deadlock
            try:
                _slabs.POOL.take(2**20)
                os._exit(0)
            except BaseException:
                os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
