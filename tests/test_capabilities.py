"""Capabilities are declared on the base classes and asked for, never sniffed with getattr/hasattr.

A store that implements only the abstract methods gets working defaults for every capability the
core uses; LocalStore's declared fast paths (inline reads and writes, zero-copy ``get_into``,
the positioned shard reader, read-ahead hints) are still the ones taken.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import zarr3_backend as z3
from zarr3_backend.byte_range import ByteRange
from zarr3_backend.codecs import CodecChain
from zarr3_backend.codecs.base import ArrayBytesCodec, BytesBytesCodec, ChunkSpec
from zarr3_backend.codecs.blosc import BloscCodec
from zarr3_backend.codecs.bytes import BytesCodec
from zarr3_backend.codecs.crc32c import Crc32cCodec
from zarr3_backend.codecs.gzip import GzipCodec
from zarr3_backend.codecs.sharding import ShardingCodec
from zarr3_backend.codecs.zstd import ZstdCodec
from zarr3_backend.core.shard_reads import raw_shard_reads
from zarr3_backend.core.staging_store import StagingStore
from zarr3_backend.errors import CorruptionError
from zarr3_backend.stores.base import Store, ValueReader
from zarr3_backend.stores.local import LocalStore

PACKAGE = Path(z3.__file__).parent

#: The getattr/hasattr calls left in core/ and codecs/, each with why it is not a capability probe.
ALLOWED = {
    ("core/dtypes_text.py", 'hasattr(np.dtypes, "StringDType")'): "numpy version (StringDType is numpy >= 2)",
    ("core/metadata.py", "getattr(self, f.name)"): "a dataclass field read by name (equality key)",
    ("codecs/scale_offset.py", "getattr(self, key)"): "a dataclass field read by name (validation)",
}


def _probes() -> Iterator[tuple[str, str, int]]:
    """Every ``getattr(...)``/``hasattr(...)`` call in core/ and codecs/: (file, source, line)."""
    for sub in ("core", "codecs"):
        for path in sorted((PACKAGE / sub).rglob("*.py")):
            text = path.read_text()
            for node in ast.walk(ast.parse(text)):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr")
                ):
                    yield str(path.relative_to(PACKAGE)), ast.get_source_segment(text, node), node.lineno


def test_no_capability_probes_in_core_or_codecs():
    found = list(_probes())
    unexpected = [f"{f}:{line}: {src}" for f, src, line in found if (f, src) not in ALLOWED]
    assert not unexpected, (
        "capability probes by getattr/hasattr (declare them on a base class):\n" + "\n".join(unexpected)
    )
    assert {(f, src) for f, src, _ in found} == set(ALLOWED), "an allow-list entry is stale: remove it"


# ---- a store with only the abstract methods gets every capability by default -------------------
class DictStore(Store):
    """Only the abstract methods: get, set, erase, list."""

    def __init__(self) -> None:
        super().__init__()
        self.data: dict[str, bytes] = {}

    def get(self, key, byte_range=None):
        value = self.data.get(key)
        return value if value is None or byte_range is None else byte_range.apply(value)

    def set(self, key, value):
        self.data[key] = bytes(value)

    def erase(self, key):
        self.data.pop(key, None)

    def list(self):
        return iter(list(self.data))


class InlineDictStore(DictStore):
    """Declares cheap per-key calls, so the core takes the inline paths on the defaults."""

    inline_io = True


LAYOUTS = {
    "plain": {"chunks": (4, 6), "compressors": None},
    "blosc": {"chunks": (4, 6), "compressors": [BloscCodec(cname="lz4")]},
    "zstd+crc32c": {"chunks": (4, 6), "compressors": [ZstdCodec(), Crc32cCodec()]},
    "sharded raw": {"chunks": (4, 3), "shards": (8, 6), "compressors": None},
    "sharded gzip": {"chunks": (4, 3), "shards": (8, 6), "compressors": [GzipCodec()]},
}


@pytest.mark.parametrize("store_cls", [DictStore, InlineDictStore])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_store_with_only_the_abstract_methods_reads_and_writes(store_cls, layout):
    store = store_cls()
    data = np.arange(16 * 18, dtype="f4").reshape(16, 18)
    a = z3.create_array(store, shape=data.shape, dtype=data.dtype, fill_value=-1, **LAYOUTS[layout])
    a[...] = data
    a[1:7, 2:5] = 7  # partial units: read, merge, write back
    data[1:7, 2:5] = 7
    a[9, :] = -1  # fill parts of units
    data[9, :] = -1
    reopened = z3.open_array(store, mode="r+")  # "r" would need with_read_only, not abstract
    np.testing.assert_array_equal(reopened[...], data)
    for sel in [(slice(2, 11), slice(3, 17)), (slice(5, 6), slice(None, None, 4)), (3, 4)]:
        np.testing.assert_array_equal(reopened[sel], data[sel])
    got = reopened.get_regions([(slice(0, 4), slice(0, 3)), (slice(6, 14), slice(1, 18))])
    np.testing.assert_array_equal(got[0], data[0:4, 0:3])
    np.testing.assert_array_equal(got[1], data[6:14, 1:18])
    # the inline paths (get_into, open_reader, will_need) run on the defaults when declared
    assert raw_shard_reads(reopened._pipeline) == (store_cls is InlineDictStore and layout == "sharded raw")


def test_default_get_into_copies_into_the_callers_buffer():
    store = DictStore()
    store.set("k", b"0123456789")
    buffers = []

    def alloc(n):
        buffers.append(memoryview(bytearray(n)))
        return buffers[-1]

    assert bytes(store.get_into("k", alloc)) == b"0123456789"
    assert bytes(buffers[-1]) == b"0123456789"  # the result is the caller's buffer
    assert bytes(store.get_into("k", alloc, ByteRange(2, 3))) == b"234"
    assert bytes(store.get_into("k", alloc, ByteRange.suffix(4))) == b"6789"
    assert bytes(store.get_into("k", lambda n: memoryview(bytearray(4)))) == b"0123"  # shorter buffer
    assert store.get_into("missing", alloc) is None


def test_default_open_reader_gives_positioned_reads():
    store = DictStore()
    store.set("k", b"0123456789")
    assert store.open_reader("missing") is None
    with store.open_reader("k") as reader:
        assert reader.size == 10
        a, b = memoryview(bytearray(3)), memoryview(bytearray(4))
        assert reader.read_into(2, [a, b]) == 7
        assert (bytes(a), bytes(b)) == (b"234", b"5678")
        c = memoryview(bytearray(5))
        assert reader.read_into(8, [c]) == 2  # short only at the end
        assert bytes(c[:2]) == b"89"
    store.will_need(["k", "missing"])  # the default hint does nothing, and never fails


def test_memory_store_overrides_read_like_the_defaults():
    store = z3.MemoryStore()
    store.set("k", b"0123456789")
    for r in [None, ByteRange(2, 3), ByteRange(8, 10), ByteRange.suffix(4)]:
        assert bytes(store.get_into("k", lambda n: memoryview(bytearray(n)), r)) == store.get("k", r)
    assert store.get_into("missing", lambda n: memoryview(bytearray(n))) is None
    with store.open_reader("k") as reader:
        buf = memoryview(bytearray(4))
        assert (reader.size, reader.read_into(3, [buf]), bytes(buf)) == (10, 4, b"3456")
    assert store.open_reader("missing") is None


# ---- StagingStore declares the capabilities of its base, staged values first -------------------
@pytest.mark.parametrize("base_cls", [DictStore, InlineDictStore, z3.MemoryStore])
def test_staging_store_delegates_capabilities_to_its_base(base_cls):
    base = base_cls()
    base.set("a", b"committed-a")
    base.set("b", b"committed-b")
    base.set("c", b"committed-c")
    staging = StagingStore(base, "t1")
    assert staging.inline_io is base.inline_io
    staging.set("a", b"staged-a")
    staging.erase("b")

    def alloc(n):
        return memoryview(bytearray(n))

    assert bytes(staging.get_into("a", alloc)) == b"staged-a"
    assert staging.get_into("b", alloc) is None  # erased in the transaction
    assert bytes(staging.get_into("c", alloc, ByteRange(0, 9))) == b"committed"
    for key, want in [("a", b"staged-a"), ("c", b"committed-c")]:
        with staging.open_reader(key) as reader:
            buf = memoryview(bytearray(reader.size))
            reader.read_into(0, [buf])
            assert bytes(buf) == want
    assert staging.open_reader("b") is None
    staging.will_need(["a", "c"])


def test_staging_store_over_local_files_is_inline(tmp_path):
    assert StagingStore(LocalStore(str(tmp_path)), "t1").inline_io


# ---- LocalStore: the declared fast paths are still the ones taken -------------------------------
class SpyLocalStore(LocalStore):
    """Counts the calls of each read and write path by name."""

    def __init__(self, root, **kw):
        super().__init__(root, **kw)
        self.calls: dict[str, list] = {}

    def _note(self, name, arg):
        self.calls.setdefault(name, []).append(arg)

    def get_into(self, key, alloc, byte_range=None):
        self._note("get_into", key)
        return super().get_into(key, alloc, byte_range)

    def open_reader(self, key):
        self._note("open_reader", key)
        return super().open_reader(key)

    def will_need(self, keys):
        self._note("will_need", list(keys))
        return super().will_need(keys)

    def get_many(self, keys):
        self._note("get_many", list(keys))
        return super().get_many(keys)

    def set(self, key, value):
        self._note("set", key)
        return super().set(key, value)

    def set_many(self, items):
        self._note("set_many", list(items))
        return super().set_many(items)

    def with_read_only(self, read_only=True):
        return SpyLocalStore(self.root, read_only=read_only)


def _chunk_keys(keys):
    return [k for k in keys if "/c/" in k or k.startswith("c/")]


def test_local_reads_and_writes_take_the_inline_paths(tmp_path):
    store = SpyLocalStore(str(tmp_path / "r"))
    data = np.arange(12 * 12, dtype="f8").reshape(12, 12)
    a = z3.create_array(
        store, shape=data.shape, dtype=data.dtype, chunks=(4, 4), compressors=None, fill_value=0
    )
    a[...] = data
    written = store.calls.get("set", [])
    assert len(_chunk_keys(written)) == 9  # each chunk written as it is encoded (maybe staged)
    assert not _chunk_keys(k for keys in store.calls.get("set_many", []) for k in keys)
    store.calls.clear()
    np.testing.assert_array_equal(a[...], data)
    assert sorted(store.calls["get_into"]) == sorted(f"c/{i}/{j}" for i in range(3) for j in range(3))
    assert not _chunk_keys(k for keys in store.calls.get("get_many", []) for k in keys)
    assert "will_need" not in store.calls  # chunks too small to be worth a read-ahead hint


def test_local_reads_of_big_chunks_hint_read_ahead(tmp_path):
    store = SpyLocalStore(str(tmp_path / "r"))
    data = np.arange(4 * 512 * 256, dtype="f8").reshape(4 * 512, 256)  # 1 MiB chunks
    a = z3.create_array(
        store, shape=data.shape, dtype=data.dtype, chunks=(512, 256), compressors=None, fill_value=0
    )
    a[...] = data
    store.calls.clear()
    np.testing.assert_array_equal(a[...], data)
    hinted = [k for keys in store.calls["will_need"] for k in keys]
    assert sorted(hinted) == sorted(f"c/{i}/0" for i in range(4))


def test_local_shard_regions_go_through_one_positioned_reader_per_shard(tmp_path):
    store = SpyLocalStore(str(tmp_path / "r"))
    data = np.arange(16 * 16, dtype="i4").reshape(16, 16)
    a = z3.create_array(
        store,
        shape=data.shape,
        dtype=data.dtype,
        chunks=(4, 4),
        shards=(8, 8),
        compressors=None,
        fill_value=0,
    )
    a[...] = data
    a = z3.open_array(store)
    assert raw_shard_reads(a._pipeline)
    spy = a.store  # the read-only copy open_array made
    np.testing.assert_array_equal(a[2:14, 3:13], data[2:14, 3:13])  # a region in each of 4 shards
    assert sorted(spy.calls["open_reader"]) == ["c/0/0", "c/0/1", "c/1/0", "c/1/1"]
    assert "get_many" not in spy.calls


# ---- codecs: declared capabilities and their defaults ------------------------------------------
SPEC = ChunkSpec((8, 8), np.dtype("<u2"), np.uint16(0))


@pytest.mark.parametrize("codec", [GzipCodec(), Crc32cCodec(), BloscCodec(cname="lz4"), ZstdCodec()])
def test_bytes_codecs_decode_into_and_encode_into(codec):
    raw = np.arange(64, dtype="<u2").tobytes()
    codec = codec.evolve(SPEC)
    frame = codec.encode(raw, SPEC)
    dest = memoryview(bytearray(len(raw)))
    assert codec.decode_into(frame, SPEC, dest) is dest and bytes(dest) == raw
    with pytest.raises(CorruptionError, match=codec.name):
        codec.decode_into(frame, SPEC, memoryview(bytearray(len(raw) + 1)))
    out = memoryview(bytearray(len(raw) + 1024))
    assert bytes(codec.decode(codec.encode_into(raw, SPEC, out), SPEC)) == raw


def test_only_compressors_that_decode_in_place_declare_it():
    assert BloscCodec.decodes_into and ZstdCodec.decodes_into
    assert not GzipCodec.decodes_into and not Crc32cCodec.decodes_into
    assert not BytesBytesCodec.decodes_into


def test_raw_dtype_and_partial_decoding_are_declared():
    assert BytesCodec(endian="big").raw_dtype(SPEC) == np.dtype(">u2")
    sharding = ShardingCodec(chunk_shape=(4, 4))
    assert sharding.raw_dtype(SPEC) is None  # a shard is no plain block of elements
    assert ShardingCodec.partial_decodable and ShardingCodec.takes_write_empty_chunks
    assert not ArrayBytesCodec.partial_decodable and not BytesCodec.partial_decodable
    assert CodecChain.build([BytesCodec(endian="little")], SPEC).raw_dtype == np.dtype("<u2")
    assert CodecChain.build([BytesCodec(endian="little"), GzipCodec()], SPEC).raw_dtype is None
    assert CodecChain.build([sharding], SPEC).is_partial_decodable
    assert not CodecChain.build([BytesCodec(endian="little")], SPEC).is_partial_decodable


@pytest.mark.parametrize(
    ("compressors", "direct"),
    [
        (None, True),
        ([ZstdCodec(), Crc32cCodec()], True),  # the innermost decodes in place, crc32c outside it
        ([Crc32cCodec(), ZstdCodec()], False),  # crc32c innermost: the generic chain
        ([GzipCodec()], False),
    ],
)
def test_direct_chunk_decoding_only_when_the_innermost_codec_declares_it(compressors, direct):
    a = z3.create_array(z3.MemoryStore(), shape=(8,), dtype="u2", chunks=(4,), compressors=compressors)
    a[...] = np.arange(8)
    assert a._pipeline.chain.decodes_into_target == direct
    np.testing.assert_array_equal(a[...], np.arange(8))


def test_default_value_reader_reads_any_buffer():
    reader = ValueReader(np.arange(4, dtype="u2"))
    buf = memoryview(bytearray(8))
    assert reader.read_into(0, [buf]) == 8
    assert np.frombuffer(buf, dtype="u2").tolist() == [0, 1, 2, 3]
