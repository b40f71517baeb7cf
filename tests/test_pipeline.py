"""The chunk pipeline: streamed reads with a bounded window, one stream for the shard indexes and
the inner chunks of regions in many shards, and the opt-in decoded-chunk cache."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import zarr3_backend as z3
from zarr3_backend import settings
from zarr3_backend.stores import MemoryStore


class StreamingStore(MemoryStore):
    """A MemoryStore with costly requests that streams values one by one and records, for each
    value handed out, how many bytes had been handed out and not yet decoded (the pipeline's
    window), and every batched read call."""

    costly_requests = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, int]] = []
        self.requested: list[tuple[str, object]] = []  # (key, byte range) of every streamed request
        self.lock = threading.Lock()

    @property
    def streamed(self) -> list[str]:
        return [key for key, _ in self.requested]

    def get_many(self, keys):
        self.calls.append(("get_many", len(keys)))
        return super().get_many(keys)

    def get_partial_values(self, key_ranges):
        self.calls.append(("get_partial_values", len(key_ranges)))
        return super().get_partial_values(key_ranges)

    def stream_partial_values(self, key_ranges, *, in_flight=None):
        self.calls.append(("stream", len(key_ranges)))
        self.lengths = []  # the requests known when each value was handed out
        for i, (key, r) in enumerate(key_ranges):  # a RequestFeed grows while it is iterated
            self.requested.append((key, r))
            self.lengths.append(len(key_ranges))
            yield i, MemoryStore.get(self, key, r)


def _array(store, **kw):
    data = np.arange(64 * 64, dtype="f8").reshape(64, 64)
    a = z3.create_array(store, shape=data.shape, dtype=data.dtype, **kw)
    a[...] = data
    return a, data


def test_whole_units_on_a_costly_store_are_streamed_in_one_call():
    store = StreamingStore()
    _, data = _array(store, chunks=(8, 8), compressors=[{"name": "zstd"}])
    store.calls.clear()
    np.testing.assert_array_equal(z3.open_array(store, mode="r+")[...], data)
    assert [c for c in store.calls if c[0] == "stream"] == [("stream", 64)]
    assert not [c for c in store.calls if c[0] == "get_many"]


@pytest.mark.parametrize("holds_half", [False, True])
def test_the_window_bounds_the_undecoded_bytes(monkeypatch, holds_half):
    """With a window smaller than two chunks, intake waits for decoding: never more than one
    landed value beyond the window is undecoded at once. A store that holds back answers of its
    own within half the window (``holds_half_window``) leaves the decoders the other half."""
    from zarr3_backend import _threads

    store = StreamingStore()
    store.holds_half_window = holds_half
    _, data = _array(store, chunks=(8, 8))  # 512-byte chunks, uncompressed
    held, peak, limits = 0, 0, []
    lock = threading.Lock()
    real = _threads.map_bounded

    def watching(fn, items, weight, limit, kind="cpu"):
        limits.append(limit)

        def counted():
            nonlocal held, peak
            for item in items:
                with lock:
                    held += weight(item)
                    peak = max(peak, held)
                yield item

        def run(item):
            nonlocal held
            try:
                fn(item)
            finally:
                with lock:
                    held -= weight(item)

        real(run, counted(), weight, limit, kind)

    monkeypatch.setattr("zarr3_backend.core.unit_reads.map_bounded", watching)
    window = 600 if holds_half else 1200
    with settings.using(window_bytes=1200):
        np.testing.assert_array_equal(z3.open_array(store, mode="r+")[...], data)
    assert limits == [window]
    assert 0 < peak <= window + 512


def test_a_decoding_error_stops_the_stream_and_is_raised():
    store = StreamingStore()
    _array(store, chunks=(8, 8), compressors=[{"name": "zstd"}])
    store.set("c/3/3", b"not zstd")
    with pytest.raises(z3.errors.CorruptionError, match="c/3/3"):
        z3.open_array(store, mode="r+")[...]


def test_regions_in_many_shards_stream_their_inner_chunks_as_each_index_lands():
    store = StreamingStore()
    _, data = _array(store, chunks=(4, 4), shards=(16, 16), compressors=[{"name": "zstd"}])
    store.calls.clear()
    reopened = z3.open_array(store, mode="r+")
    regions = [
        (slice(i * 16 + 1, i * 16 + 3), slice(j * 16 + 5, j * 16 + 7)) for i in range(4) for j in range(4)
    ]
    with settings.using(round_trip_bytes=0):  # index first, never the whole shard
        got = reopened.get_regions(regions)
    for g, r in zip(got, regions, strict=True):
        np.testing.assert_array_equal(g, data[r])
    # one stream: the 16 shard indexes, then each shard's inner chunks as soon as its index
    # is in (the consumer adds them while the other indexes are still being streamed)
    assert store.calls == [("stream", 16)]
    assert store.lengths == [16 + i for i in range(16)] + [32] * 16
    assert all(k.endswith(f"c/{n // 4}/{n % 4}") for n, k in enumerate(store.streamed[:16]))


def test_regions_of_one_shard_share_requests_closer_than_the_coalescing_gap():
    """Ranges of different regions in one shard are merged by the store's coalescing gap into
    one request; each region still gets exactly its own bytes."""
    store = StreamingStore()
    _, data = _array(store, chunks=(8, 8), shards=(32, 32), compressors=None)  # 512-byte inner chunks
    reopened = z3.open_array(store, mode="r+")
    # inner chunks (0, 0), (2, 2) and (3, 0) of shard (0, 0): stored 1st, 11th and 13th, so
    # about 4.3 KiB, then 0.25 KiB apart (each region's last range reads on over the 260-byte index)
    regions = [(slice(0, 8), slice(0, 8)), (slice(16, 24), slice(16, 24)), (slice(24, 32), slice(2, 6))]
    reopened.get_regions(regions)  # the shard index is cached from now on: streams carry data only
    for gap, requests in [(8192, 1), (1024, 2), (0, 3)]:
        with settings.using(coalesce_gap=gap):
            store.calls.clear()
            got = reopened.get_regions(regions)
        assert [c for c in store.calls if c[0] == "stream"] == [("stream", requests)], gap
        for g, r in zip(got, regions, strict=True):
            np.testing.assert_array_equal(g, data[r])


def test_merge_shard_ranges_answers_each_range_from_its_request():
    from zarr3_backend.byte_range import ByteRange
    from zarr3_backend.core.shard_reads import merge_shard_ranges

    ranges = [
        ByteRange(100, 10),
        ByteRange(0, 10),
        ByteRange(15, 10),  # 5 bytes after the one before: merged by a gap of 5
        ByteRange(5, 3),  # inside another range
        ByteRange(190, 20),  # runs past the end of the value: a short piece
    ]
    requests, pieces = merge_shard_ranges("a", ranges, 5)
    value = bytes(range(200))
    answered = {}
    for (key, r), ps in zip(requests, pieces, strict=True):
        assert key == "a"
        got = memoryview(r.apply(value))
        for pos, start, length in ps:
            answered[pos] = bytes(got[start : start + length])
    assert answered == {i: r.apply(value) for i, r in enumerate(ranges)}
    assert sorted((r.offset, r.length) for _, r in requests) == [(0, 25), (100, 10), (190, 20)]


class _ReadsOnceStore(StreamingStore):
    """A store written to the old contract: it reads the requests it is given once."""

    def stream_partial_values(self, key_ranges, *, in_flight=None):
        return super().stream_partial_values(list(key_ranges), in_flight=in_flight)


def test_a_store_that_reads_the_feed_once_is_an_error_not_unread_regions():
    store = _ReadsOnceStore()
    _array(store, chunks=(4, 4), shards=(16, 16), compressors=[{"name": "zstd"}])
    reopened = z3.open_array(store, mode="r+")
    regions = [(slice(i * 16, i * 16 + 4), slice(0, 4)) for i in range(4)]
    with (
        settings.using(round_trip_bytes=0),
        pytest.raises(RuntimeError, match=r"_ReadsOnceStore\.stream_partial_values ended before"),
    ):
        reopened.get_regions(regions)


class _ClosableStore(StreamingStore):
    """Streams in order and records how many values it handed out when the stream was closed."""

    closed_after: int | None = None

    def stream_partial_values(self, key_ranges, *, in_flight=None):
        handed = 0
        try:
            for i, (key, r) in enumerate(key_ranges):
                handed += 1
                yield i, MemoryStore.get(self, key, r)
        finally:
            self.closed_after = handed


@pytest.mark.parametrize("round_trip", [0, 1 << 20], ids=["index-first", "whole-shard"])
def test_a_corrupt_index_mid_stream_names_its_shard_and_closes_the_stream(round_trip):
    store = _ClosableStore()
    _array(store, chunks=(4, 4), shards=(16, 16), compressors=[{"name": "zstd"}])
    raw = bytearray(store.get("c/1/0"))
    raw[-3] ^= 0xFF  # the index's checksum no longer matches
    store.set("c/1/0", bytes(raw))
    reopened = z3.open_array(store, mode="r+")
    regions = [(slice(i * 16, i * 16 + 4), slice(0, 4)) for i in range(4)]
    with settings.using(round_trip_bytes=round_trip), pytest.raises(z3.errors.CorruptionError, match="c/1/0"):
        reopened.get_regions(regions)
    # the second index was the last value taken: the stream (and what it had outstanding)
    # was closed then, not drained
    assert store.closed_after == 2


@pytest.mark.parametrize("location", ["end", "start"])
def test_regions_in_small_shards_read_each_shard_whole_in_one_round_trip(location):
    """Shards small enough (``round_trip_bytes``) whose index is not cached are read whole, one
    request each and no index request first; the regions are cut from them, their indexes are
    cached, and later reads of those shards ask only for the inner chunks' ranges."""
    store = StreamingStore()
    _, data = _array(
        store,
        chunks=(4, 4),
        shards=(16, 16),
        compressors=[{"name": "zstd"}],
        shard_index={"index_location": location},
    )
    store.erase("c/3/3")  # a missing shard read whole is fill
    data[48:, 48:] = 0
    reopened = z3.open_array(store, mode="r+")
    regions = [
        (slice(i * 16 + 1, i * 16 + 6), slice(j * 16 + 5, j * 16 + 7)) for i in range(4) for j in range(4)
    ]
    store.calls.clear()
    got = reopened.get_regions(regions)
    for g, r in zip(got, regions, strict=True):
        np.testing.assert_array_equal(g, data[r])
    assert store.calls == [("stream", 16)]
    assert store.lengths == [16] * 16  # nothing added: every region's bytes were in its shard
    assert all(r is None for _, r in store.requested)
    # the second read: each stored shard's index is cached, its two inner chunks come in one
    # bounded range; the missing shard (no index to cache) is asked for again
    store.calls.clear()
    store.requested.clear()
    got = reopened.get_regions(regions)
    for g, r in zip(got, regions, strict=True):
        np.testing.assert_array_equal(g, data[r])
    assert store.calls == [("stream", 16)]
    by_key = dict(store.requested)
    assert by_key.pop("c/3/3") is None
    assert len(by_key) == 15 and all(r is not None and r.length is not None for r in by_key.values())


@pytest.mark.parametrize("location", ["end", "start"])
def test_a_truncated_shard_read_whole_is_a_corruption_error_naming_it(location):
    store = StreamingStore()
    _array(
        store,
        chunks=(4, 4),
        shards=(16, 16),
        compressors=[{"name": "zstd"}],
        shard_index={"index_location": location},
    )
    store.set("c/2/1", store.get("c/2/1")[:-40])
    reopened = z3.open_array(store, mode="r+")
    # the index at the end is cut into (its checksum fails); at the start it is whole, and the
    # last inner chunk it names ends past the end of the value
    message = "c/2/1" if location == "end" else r"c/2/1.*past the end"
    with pytest.raises(z3.errors.CorruptionError, match=message):
        reopened.get_regions([(slice(32, 48), slice(16, 32)), (slice(0, 4), slice(0, 4))])
    assert store.requested and all(r is None for _, r in store.requested)  # read whole


def test_shards_are_read_whole_all_or_none_within_the_round_trip_budget():
    """The inner chunks a read does not touch are summed over all its shards: within
    ``round_trip_bytes`` every shard is read whole; past it every shard goes index first (one
    shard by its index would make the call wait two round trips anyway)."""
    from zarr3_backend.core.shard_reads import _layout

    store = StreamingStore()
    _, data = _array(store, chunks=(4, 4), shards=(16, 16), compressors=None)
    most = _layout(z3.open_array(store, mode="r+")._pipeline).max_inner_nbytes
    regions = [
        (slice(0, 4), slice(0, 4)),
        (slice(16, 20), slice(16, 20)),
    ]  # 1 of 16 inner chunks, in 2 shards
    for budget, whole in [(2 * 15 * most, True), (2 * 15 * most - 1, False)]:
        store.requested.clear()
        with settings.using(round_trip_bytes=budget):
            got = z3.open_array(store, mode="r+").get_regions(regions)
        for g, r in zip(got, regions, strict=True):
            np.testing.assert_array_equal(g, data[r])
        kinds = [r is None for _, r in store.requested]
        assert kinds == ([True, True] if whole else [False, False, False, False]), budget


def test_regions_cut_from_a_whole_shard_weigh_all_of_it_in_the_decode_window(monkeypatch):
    """Each region cut from a shard read whole keeps the whole value alive: the regions that
    were cut from it weigh its bytes between them, even when most of the shard's regions fall on
    empty inner chunks (weight 0), so the decode window still bounds what is held."""
    from zarr3_backend.core import shard_reads

    weighed: list[int] = []
    real = shard_reads.map_bounded

    def watching(fn, items, weight, limit, kind="cpu"):
        def counted():
            for item in items:
                weighed.append(weight(item))
                yield item

        real(fn, counted(), weight, limit, kind)

    monkeypatch.setattr(shard_reads, "map_bounded", watching)
    store = StreamingStore()
    a = z3.create_array(store, shape=(64, 64), dtype="f8", chunks=(4, 4), shards=(64, 64), compressors=None)
    a[0:4, 0:4] = 1.0  # one stored inner chunk of 256
    regions = [(slice(i * 4, i * 4 + 2), slice(j * 4, j * 4 + 2)) for i in range(16) for j in range(16)]
    got = z3.open_array(store, mode="r+").get_regions(regions)
    assert got[0].tolist() == [[1.0, 1.0], [1.0, 1.0]] and not any(g.any() for g in got[1:])
    assert [r is None for _, r in store.requested] == [True]
    assert sum(weighed) >= len(store.get("c/0/0"))


def test_reads_shards_whole_weighs_the_untouched_inner_chunks_of_every_shard():
    """Whole when the inner chunks no selection touches, summed over the shards at their
    largest, fit the budget; never for a zero budget."""
    from zarr3_backend.core.shard_reads import _layout, reads_shards_whole

    store = MemoryStore()
    a = z3.create_array(store, shape=(64, 64), chunks=(4, 4), shards=(16, 16), dtype="f8", compressors=None)
    layout = _layout(a._pipeline)
    inner = layout.max_inner_nbytes
    assert inner == 128 and layout.max_shard_nbytes == 16 * 128 + layout.index_size
    one = [(slice(0, 4), slice(0, 4))]  # touches 1 of the 16 inner chunks
    half = [(slice(0, 8), slice(0, 16))]  # touches 8 of them
    assert reads_shards_whole(layout, [one], 15 * inner)
    assert not reads_shards_whole(layout, [one], 15 * inner - 1)
    assert reads_shards_whole(layout, [half + one], 8 * inner)
    assert not reads_shards_whole(layout, [half, half], 16 * inner - 1)
    assert reads_shards_whole(layout, [half, one], 23 * inner)
    assert not reads_shards_whole(layout, [half], 0)


class _DecodeWatchingStore(StreamingStore):
    """Streams ranges one by one; after the first it waits until an inner chunk was decoded."""

    def __init__(self, decoded: threading.Event):
        super().__init__()
        self.decoded = decoded
        self.decoded_before_last: bool | None = None

    def stream_partial_values(self, key_ranges, *, in_flight=None):
        from zarr3_backend.stores.base import is_open_feed

        for i, (key, r) in enumerate(key_ranges):
            if i == len(key_ranges) - 1 and not is_open_feed(key_ranges):
                self.decoded_before_last = self.decoded.wait(timeout=10)
            yield i, MemoryStore.get(self, key, r)


def test_regions_inside_shards_decode_as_their_bytes_land(monkeypatch):
    """A region is decoded once its own ranges are in, while other regions' bytes are still to
    come (not after the whole batch has landed), straight into its place in the result."""
    from zarr3_backend.codecs.shard_index import ShardLayout

    decoded = threading.Event()
    place = ShardLayout.place_inner

    def watched(self, *args):
        place(self, *args)
        decoded.set()

    monkeypatch.setattr(ShardLayout, "place_inner", watched)
    store = _DecodeWatchingStore(decoded)
    _, data = _array(store, chunks=(4, 4), shards=(16, 16), compressors=[{"name": "zstd"}])
    reopened = z3.open_array(store, mode="r+")  # "r" would read through a read-only copy of the store
    regions = [(slice(i * 16, i * 16 + 4), slice(0, 4)) for i in range(4)]  # an inner chunk each
    with settings.using(round_trip_bytes=0):
        got = reopened.get_regions(regions)
    assert store.decoded_before_last is True
    for g, r in zip(got, regions, strict=True):
        np.testing.assert_array_equal(g, data[r])


def test_chunk_cache_is_off_by_default_and_serves_repeated_reads_when_on():
    store = StreamingStore()
    _, data = _array(store, chunks=(8, 8), compressors=[{"name": "zstd"}])
    reopened = z3.open_array(store, mode="r+")
    store.requested.clear()
    reopened[0:16, 0:16]
    reopened[0:16, 0:16]
    assert len(store.streamed) == 8  # no cache: every read fetches again
    with settings.using(chunk_cache_bytes=1 << 20):
        store.requested.clear()
        np.testing.assert_array_equal(reopened[0:16, 0:16], data[0:16, 0:16])
        np.testing.assert_array_equal(reopened[8:24, 0:16], data[8:24, 0:16])  # a sliding window
        assert len(store.streamed) == 6  # 4, then only the 2 new chunks
        # another Array of the same store shares the cache
        other = z3.open_array(store, mode="r+")
        store.requested.clear()
        np.testing.assert_array_equal(other[0:16, 0:16], data[0:16, 0:16])
        assert store.streamed == []


def test_chunk_cache_is_invalidated_by_writes_and_bounded():
    store = StreamingStore()
    _, data = _array(store, chunks=(8, 8), compressors=[{"name": "zstd"}])
    with settings.using(chunk_cache_bytes=4 * 512):
        reader = z3.open_array(store, mode="r")  # a read-only view of the same data
        writer = z3.open_array(store, mode="r+")
        np.testing.assert_array_equal(reader[0:8, 0:16], data[0:8, 0:16])
        writer[0:8, 0:8] = -1  # one unit: written in place
        writer[0:16, 8:16] = -2  # two units: one transaction
        data[0:8, 0:8] = -1
        data[0:16, 8:16] = -2
        np.testing.assert_array_equal(reader[0:16, 0:16], data[0:16, 0:16])
        reader[...]  # 64 chunks through a 4-chunk cache
        from zarr3_backend.core.chunk_cache import chunk_cache_of

        cache = chunk_cache_of(store)
        assert 0 < len(cache) <= 4 and cache.nbytes <= 4 * 512
        np.testing.assert_array_equal(reader[...], data)


def test_cached_units_are_not_views_of_reused_scratch_memory(tmp_path):
    """Inline stores read into per-thread scratch memory; a cached unit must own its bytes."""
    _, data = _array(str(tmp_path / "a"), chunks=(8, 8))
    reopened = z3.open_array(str(tmp_path / "a"), mode="r")
    with settings.using(chunk_cache_bytes=1 << 20):
        first = reopened[0:8, 0:8].copy()
        reopened[8:64, 8:64]  # reuses the threads' scratch memory many times over
        np.testing.assert_array_equal(reopened[0:8, 0:8], first)
        np.testing.assert_array_equal(first, data[0:8, 0:8])


def test_forgetting_one_array_keeps_what_a_sibling_with_a_longer_name_cached():
    """An array's writes drop its own cached units, not those of "a" + more letters."""
    store = StreamingStore()
    data = np.arange(16, dtype="f8").reshape(4, 4)
    for name in ("a", "ab"):
        z3.create_array(store, name, shape=(4, 4), chunks=(2, 2), dtype="f8")[...] = data
    with settings.using(chunk_cache_bytes=1 << 20):
        ab = z3.open_array(store, path="ab", mode="r+")
        ab[...]
        store.requested.clear()
        z3.open_array(store, path="a", mode="r+")[...] = 0  # a transaction: forgets all of "a"
        np.testing.assert_array_equal(ab[...], data)
        assert store.streamed == []  # "ab" still served from the cache


def test_one_region_inside_a_shard_decodes_its_inner_chunks_on_every_cpu_worker(monkeypatch):
    """A read of one region (the commonest remote read) spreads that region's inner chunks over
    the CPU pool; it is not decoded by one worker alone."""
    from zarr3_backend.codecs.shard_index import ShardLayout

    threads: set[int] = set()
    place = ShardLayout.place_inner
    both = threading.Barrier(2, timeout=10)

    def watched(self, *args):
        threads.add(threading.get_ident())
        try:
            both.wait()  # returns once two threads decode at the same time
        except threading.BrokenBarrierError:
            pass
        place(self, *args)

    store = StreamingStore()
    _, data = _array(store, chunks=(4, 4), shards=(32, 32), compressors=[{"name": "zstd"}])
    reopened = z3.open_array(store, mode="r+")
    monkeypatch.setattr(ShardLayout, "place_inner", watched)
    with settings.using(cpu_threads=2):
        np.testing.assert_array_equal(reopened[1:31, 1:31], data[1:31, 1:31])
    assert len(threads) >= 2


def test_map_bounded_runs_every_item_within_the_limit_and_stops_at_the_first_error():
    """The pool behind every streamed read: all items run, the weight handed out and not yet
    finished stays within the limit (one item always goes), and a failing call closes the
    producer and is raised after the running calls finished."""
    from zarr3_backend import _threads

    lock = threading.Lock()
    held, peak, done = 0, 0, []

    def run(x):
        nonlocal held
        with lock:
            done.append(x)
        threading.Event().wait(0.001 * (x % 3))
        with lock:
            held -= x

    def produce(n):
        nonlocal held, peak
        for x in range(1, n + 1):
            with lock:  # counted from when it is handed out (it may wait for room, then run)
                held += x
                peak = max(peak, held)
            yield x

    with settings.using(cpu_threads=2):
        _threads.map_bounded(run, produce(60), lambda x: x, 100, kind="cpu")
    assert sorted(done) == list(range(1, 61))
    assert held == 0 and peak <= 100 + 60  # the item waiting for room is counted too

    closed = threading.Event()

    def failing():
        try:
            yield from range(1000)
        finally:
            closed.set()

    def boom(x):
        if x == 5:
            raise ValueError("item 5")

    with settings.using(cpu_threads=2), pytest.raises(ValueError, match="item 5"):
        _threads.map_bounded(boom, failing(), lambda x: 1, 4, kind="cpu")
    assert closed.is_set()
