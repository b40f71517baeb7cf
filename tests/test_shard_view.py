"""ShardView: one stored shard's inner chunks read over a store (nested shards by recursion), the
byte ranges a selection needs, and shard indexes read in one batched call through a cache/memo."""

from __future__ import annotations

import numpy as np
import pytest

from zarr3_backend.codecs import ChunkSpec
from zarr3_backend.codecs.shard_index import EMPTY
from zarr3_backend.codecs.sharding import ShardingCodec
from zarr3_backend.core.shard_index_cache import ShardIndexCache
from zarr3_backend.core.shard_view import ShardView, read_indexes
from zarr3_backend.errors import CodecError, CorruptionError
from zarr3_backend.stores import MemoryStore

BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
ZSTD = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}


class CountingStore(MemoryStore):
    """A MemoryStore recording every batched ranged read and the bytes it returned."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list] = []
        self.bytes_read = 0

    def get_partial_values(self, key_ranges):
        self.calls.append(list(key_ranges))
        values = super().get_partial_values(key_ranges)
        self.bytes_read += sum(len(v) for v in values if v is not None)
        return values


def _codec(shard_shape, chunk_shape, codecs=None, location="end"):
    spec = ChunkSpec(tuple(shard_shape), np.dtype("float64"), np.float64(0))
    codec = ShardingCodec(chunk_shape, codecs=codecs, index_location=location).evolve(spec)
    return codec, spec


def _nested(location="end"):
    """Shards of 8x8 whose 4x4 inner chunks are shards of 2x2 zstd chunks."""
    inner = {
        "name": "sharding_indexed",
        "configuration": {"chunk_shape": [2, 2], "codecs": [BYTES, ZSTD], "index_location": location},
    }
    return _codec((8, 8), (4, 4), codecs=[inner], location=location)


def _data(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def test_layout_names_its_nested_layout():
    codec, spec = _nested()
    layout = codec.layout(spec)
    assert layout.nested is not None
    assert layout.nested.shard_shape == (4, 4) and layout.nested.chunk_shape == (2, 2)
    assert layout.nested.nested is None
    plain, plain_spec = _codec((8, 8), (4, 4))
    assert plain.layout(plain_spec).nested is None


@pytest.mark.parametrize("location", ["start", "end"])
def test_nested_region_read_fetches_only_what_it_needs(location):
    codec, spec = _nested(location)
    shard = _data((8, 8))
    data = codec.encode(shard, spec)
    store = CountingStore()
    store.set("s", data)
    view = ShardView.in_store(store, "s", codec.layout(spec))
    got = view.read((slice(1, 3), slice(5, 6)))  # two 2x2 chunks of one inner shard, read in part
    np.testing.assert_array_equal(got, shard[1:3, 5:6])
    # the outer index, the inner shard's index, then its two touched chunks (one merged range)
    assert len(store.calls) == 3
    assert all(len(c) == 1 for c in store.calls)
    assert store.bytes_read < len(data) // 2
    np.testing.assert_array_equal(view.read((slice(None), slice(None))), shard)


def test_nested_view_of_a_plain_layout_is_refused():
    codec, spec = _codec((8, 8), (4, 4))
    view = ShardView(codec.layout(spec), lambda ranges: [None for _ in ranges])
    with pytest.raises(CodecError, match="inner shard"):
        view.nested(0, 16, "inner shard (0, 0)")


def test_plan_names_the_ranges_read_takes_from_fetched():
    codec, spec = _codec((8, 8), (2, 2), codecs=[BYTES, ZSTD])
    shard = _data((8, 8))
    shard[0:2, 2:4] = 0  # one empty inner chunk: not stored, not read
    data = codec.encode(shard, spec)
    store = CountingStore()
    store.set("s", data)
    layout = codec.layout(spec)
    index = ShardView.in_store(store, "s", layout).read_index()
    assert index[0, 1, 0] == EMPTY
    sel = (slice(0, 4), slice(1, 7))
    ranges = ShardView.in_store(store, "s", layout).plan(sel, index)
    assert ranges and all(r.length is not None for r in ranges)
    fetched = [store.get("s", r) for r in ranges]

    def no_reads(ranges):
        raise AssertionError(f"read {ranges} although every value was fetched")

    np.testing.assert_array_equal(ShardView(layout, no_reads).read(sel, index, fetched), shard[sel])
    assert ShardView(layout, no_reads).plan((slice(0, 2), slice(2, 4)), index) == []  # only the empty chunk


def test_plan_is_none_for_nested_shards_covered_partly():
    codec, spec = _nested()
    data = codec.encode(_data((8, 8)), spec)
    store = MemoryStore()
    store.set("s", data)
    view = ShardView.in_store(store, "s", codec.layout(spec))
    index = view.read_index()
    assert view.plan((slice(0, 1), slice(0, 1)), index) is None
    assert len(view.plan((slice(0, 4), slice(0, 4)), index)) == 1  # a whole inner shard: one range


def test_read_indexes_batches_memoises_and_caches():
    codec, spec = _codec((4, 4), (2, 2))
    layout = codec.layout(spec)
    store = CountingStore()
    same = np.arange(16.0).reshape(4, 4)
    store.set("a", codec.encode(same, spec))
    store.set("b", codec.encode(same + 1, spec))  # raw inner chunks: the same index bytes as "a"
    memo: dict = {}
    cache = ShardIndexCache()
    found = read_indexes(store, ["a", "b", "missing", "a"], layout, cache=cache, memo=memo)
    assert len(store.calls) == 1 and len(store.calls[0]) == 3  # one batched call, each key once
    assert found["missing"] is None
    assert found["a"] is found["b"] and len(memo) == 1  # decoded once per distinct encoding
    assert not found["a"].flags.writeable
    assert read_indexes(store, ["a", "b"], layout, cache=cache, memo=memo)["a"] is found["a"]
    assert len(store.calls) == 1  # served by the cache
    read_indexes(store, ["a"], layout, cache=cache, memo=memo, refresh=True)
    assert len(store.calls) == 2


def test_read_indexes_names_the_corrupt_shard():
    codec, spec = _codec((4, 4), (2, 2))
    store = MemoryStore()
    data = bytearray(codec.encode(_data((4, 4)), spec))
    data[-1] ^= 0xFF  # the index checksum no longer matches
    store.set("x/c/0/0", bytes(data))
    with pytest.raises(CorruptionError, match=r"^shard 'x/c/0/0': "):
        read_indexes(store, ["x/c/0/0"], codec.layout(spec), cache=None, memo={})


def test_read_into_out_decodes_whole_inner_chunks_in_place(monkeypatch):
    """With ``out=``, the region is written into the caller's array and returned; an inner chunk
    that fills a contiguous block of it is decompressed there (the codec gets that block as its
    destination), the others go through scratch memory and are copied."""
    from zarr3_backend.codecs.chain import CodecChain

    codec, spec = _codec((8, 8), (2, 8), codecs=[BYTES, ZSTD])  # inner chunks: 2 whole rows
    shard = _data((8, 8))
    store = MemoryStore()
    store.set("s", codec.encode(shard, spec))
    view = ShardView.in_store(store, "s", codec.layout(spec))
    index = view.read_index()
    targets: list[np.ndarray | None] = []
    decode_to = CodecChain.decode_to

    def watched(self, data, target=None, scratch=None):
        targets.append(target)
        return decode_to(self, data, target, scratch)

    monkeypatch.setattr(CodecChain, "decode_to", watched)
    out = np.full((10, 8), -1.0)
    place = out[1:9]
    assert view.read((slice(0, 8), slice(0, 8)), index, out=place) is place
    np.testing.assert_array_equal(out[1:9], shard)
    assert (out[0] == -1).all() and (out[9] == -1).all()
    assert len(targets) == 4 and all(t is not None and np.shares_memory(t, out) for t in targets)

    targets.clear()
    cols = np.full((8, 4), -1.0)
    view.read((slice(0, 8), slice(2, 6)), index, out=cols)  # a part of each row: not in place
    np.testing.assert_array_equal(cols, shard[:, 2:6])
    assert len(targets) == 4 and all(t is None for t in targets)
    with pytest.raises(CodecError, match="output of shape"):
        view.read((slice(0, 8), slice(2, 6)), index, out=np.empty((8, 5)))
