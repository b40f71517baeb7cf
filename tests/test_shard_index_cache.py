"""The shard-index cache: one ranged request per repeated inner-chunk read; writes invalidate."""

from __future__ import annotations

import numpy as np
import pytest

import zarr3_backend as z3
from zarr3_backend.core.shard_index_cache import SHARD_INDEX_CACHE, ShardIndexCache, clear_shard_index_cache


class RemoteLikeStore(z3.MemoryStore):
    """A memory store that behaves like an object store: counts requests, caches indexes."""

    cache_shard_index = True

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.ranged = 0

    def get_partial_values(self, key_ranges):
        self.ranged += len(key_ranges)
        return super().get_partial_values(key_ranges)


@pytest.fixture(autouse=True)
def _clean_cache():
    clear_shard_index_cache()
    yield
    clear_shard_index_cache()


def make(store):
    a = z3.create_array(store, "x", shape=(16, 16), dtype="i4", chunks=(4, 4), shards=(8, 8))
    data = np.arange(256, dtype="i4").reshape(16, 16)
    a[...] = data
    return a, data


def test_second_read_of_a_shard_costs_one_request():
    store = RemoteLikeStore()
    a, data = make(store)
    store.ranged = 0
    assert a[0, 0] == data[0, 0]
    assert store.ranged == 2  # index + inner chunk
    store.ranged = 0
    assert a[5, 6] == data[5, 6]  # another inner chunk of the same shard
    assert store.ranged == 1


def test_write_invalidates_cached_index():
    store = RemoteLikeStore()
    a, data = make(store)
    a[0, 0]  # caches the index of shard (0, 0)
    a[0:4, 0:4] = 0  # inner chunk (0, 0) becomes fill: the shard layout changes
    a[4, 4] = -5
    data[0:4, 0:4] = 0
    data[4, 4] = -5
    b = z3.open_array(store, "x")  # another Array object on the same data
    np.testing.assert_array_equal([[b[i, j] for j in range(8)] for i in range(8)], data[:8, :8])


def test_stores_without_the_flag_do_not_cache():
    store = z3.MemoryStore()
    a, _ = make(store)
    a[0, 0]
    assert len(SHARD_INDEX_CACHE) == 0


def test_lru_is_bounded_in_bytes():
    cache = ShardIndexCache(max_bytes=3 * 64)
    for i in range(10):
        cache.put("t", f"k{i}", np.zeros((4, 2), "u8"))  # 64 bytes each
    assert len(cache) == 3
    assert cache.get("t", "k0") is None and cache.get("t", "k9") is not None
    cache.invalidate_prefix("t", "k")
    assert len(cache) == 0


def _external_rewrite(store, data):
    """Rewrite the array as another process would: through a store that shares the data but
    does not touch this process's cache."""
    other = z3.MemoryStore(store._data)
    b = z3.open_array(other, "x", mode="r+")
    b[...] = data


def test_reopening_sees_shards_rewritten_elsewhere():
    store = RemoteLikeStore()
    a, data = make(store)
    a[0, 0]  # index of shard (0, 0) cached
    new = data * 1000 + 7  # different compressed sizes: new offsets in the index
    new[0:4, 0:4] = 0  # and an inner chunk that is now empty
    _external_rewrite(store, new)
    again = z3.open_array(store, "x")
    np.testing.assert_array_equal(again[0:8, 0:8], new[0:8, 0:8])
    np.testing.assert_array_equal(again.oindex[[0, 5], [1, 6]], new[np.ix_([0, 5], [1, 6])])


def test_stale_cached_index_is_detected_and_reread():
    store = RemoteLikeStore()
    a = z3.create_array(
        store,
        "x",
        shape=(16, 16),
        dtype="f8",
        chunks=(4, 4),
        shards=(8, 8),
        compressors=[{"name": "zstd", "configuration": {"level": 1, "checksum": True}}],
    )
    rng = np.random.default_rng(0)
    a[...] = rng.random((16, 16))
    a[1, 1]  # caches the index
    (token_key,) = [k for k in list(SHARD_INDEX_CACHE._items) if k[1] == "x/c/0/0"]
    stale = SHARD_INDEX_CACHE.get(*token_key).copy()
    new = np.zeros((16, 16))
    new[5, 6] = 42.0  # compresses to other sizes: the shard's offsets move
    _external_rewrite(store, new)
    codec, spec = a._chain.array_bytes, a._chain.specs[-1]
    fresh = codec.read_index(lambda ranges: [z3.MemoryStore.get(store, "x/c/0/0", r) for r in ranges], spec)
    assert not np.array_equal(stale, fresh)
    assert a[5, 6] == 42.0  # same Array object: the stale index fails its checks, then is re-read
    np.testing.assert_array_equal(SHARD_INDEX_CACHE.get(*token_key), fresh)
