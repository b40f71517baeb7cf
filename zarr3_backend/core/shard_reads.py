"""Reading regions inside shards: each shard's index (from the shard-index cache, or fetched),
then only the inner chunks each region needs.

Local files read every index first (cheap system calls), then the regions. Stores with costly
requests stream it all in one store call: the uncached indexes go out at once, and a shard's
inner chunks are requested as soon as its own index has landed (``RequestFeed``), not after the
slowest of all the indexes; each region is decoded as soon as its own bytes are in. When the
inner chunks the read leaves untouched are few (``reads_shards_whole``), the uncached shards are
read whole instead, one round trip in all, and the regions cut from them.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .._threads import map_bounded, pool_size, thread_map
from ..byte_range import ByteRange
from ..codecs.base import as_bytes_view
from ..codecs.shard_index import ShardLayout, merge_ranges
from ..codecs.shard_selection import inner_indexer
from ..errors import CodecError, CorruptionError
from ..stores.base import RequestFeed
from .shard_view import ShardView, read_indexes, settle_index

if TYPE_CHECKING:
    from .pipeline import ChunkPipeline

Item = tuple[np.ndarray, Any]  # (output array, chunk projection)


def _place(out: np.ndarray, p: Any) -> np.ndarray | None:
    """The region of ``out`` that projection ``p`` fills, as a view, when its place is slices."""
    return out[(*p.out_selection, ...)] if all(isinstance(s, slice) for s in p.out_selection) else None


def _layout(pipe: ChunkPipeline) -> ShardLayout:
    """The layout of the array's shards; regions inside shards are read only when the sharding
    codec is the whole chain (``pipe.shard_codec``)."""
    codec = pipe.shard_codec
    if codec is None:
        raise CodecError(f"array {pipe.path or '/'!r}: its codec chain does not read regions inside shards")
    return codec.layout(pipe.chain.specs[-1])


def shard_indexes(
    pipe: ChunkPipeline, keys: list[str], refresh: bool = False
) -> dict[str, np.ndarray | None]:
    """The decoded index of each shard in ``keys`` (``None`` when missing), the uncached ones
    (all with ``refresh``) fetched with one batched ranged store call."""
    layout = _layout(pipe)
    return read_indexes(
        pipe.store, keys, layout, cache=pipe.index_cache, memo=pipe.index_memo, refresh=refresh
    )


def raw_shard_reads(pipe: ChunkPipeline) -> bool:
    """Whether regions inside shards are read with ``ShardView.read_raw_into``: a store with
    cheap per-key calls (``inline_io``, its ``open_reader``), no shard-index cache, inner chunks
    stored as raw elements."""
    codec = pipe.shard_codec
    return (
        codec is not None
        and pipe.store.inline_io
        and pipe.index_cache is None
        and codec.raw_inner_dtype(pipe.chain.specs[-1]) is not None
    )


def read_regions(pipe: ChunkPipeline, parts: list[Item]) -> None:
    """Fill ``out[p.out_selection]`` for every ``(out, p)``: a region inside a shard."""
    store = pipe.store
    layout = _layout(pipe)
    keys = [pipe.key(p.chunk_coords) for _, p in parts]
    # local files: every index first (cheap); stores with costly requests: as they land (below)
    indexes = shard_indexes(pipe, keys) if store.inline_io else {}
    fill = pipe.metadata.fill_value

    by_shard: dict[str, list[tuple[Any, np.ndarray]]] = {}
    if raw_shard_reads(pipe):  # raw inner chunks: one task per shard reads them all through one open file
        rest = []
        for i, (out, p) in enumerate(parts):
            place = _place(out, p) if indexes[keys[i]] is not None else None
            if place is not None:
                by_shard.setdefault(keys[i], []).append((p.chunk_selection, place))
            else:
                rest.append(i)
    else:
        rest = list(range(len(parts)))
    gap = functools.cache(lambda: store.coalesce_gap)  # resolved once per call, and only if ranges merge
    views = {key: ShardView.in_store(store, key, layout, gap) for key in dict.fromkeys(keys)}

    def read_shard(key: str) -> None:
        reader = store.open_reader(key)
        if reader is None:
            raise CorruptionError(f"shard {key!r} vanished while being read")
        try:
            with reader:
                views[key].read_raw_into(reader, by_shard[key], indexes[key])
        except CorruptionError as e:
            raise type(e)(f"shard {key!r}: {e}") from e

    def read_part(i: int, fetched: list[Any] | None = None) -> None:
        (out, p), key = parts[i], keys[i]
        index, view = indexes[key], views[key]
        if index is None:
            out[p.out_selection] = fill
            return
        place = _place(out, p)  # inner chunks decode straight into it
        try:
            try:
                sub = view.read(p.chunk_selection, index, fetched, out=place)
            except CorruptionError:
                if pipe.index_cache is None:
                    raise
                # the cached index may predate a rewrite by another process: read it afresh
                pipe.index_cache.invalidate([key])
                index = shard_indexes(pipe, [key], refresh=True)[key]
                sub = None if index is None else view.read(p.chunk_selection, index, out=place)
        except CorruptionError as e:
            raise type(e)(f"shard {key!r}: {e}") from e
        if sub is None:
            out[p.out_selection] = fill
        elif place is None:
            out[p.out_selection] = sub

    if not store.inline_io:
        # stores with costly requests: every shard index goes out at once, the inner chunks of
        # a shard's regions as soon as its index is in (requests_in_flight at a time), and each
        # region is decoded as soon as its bytes are in
        rest = _stream_regions(pipe, parts, keys, indexes, views, read_part, gap())
    # local files: reads are cheap system calls, so CPU-many threads beat a GIL convoy of 32
    kind = "cpu" if store.inline_io else "io"
    tasks: list[Callable[[], None]] = [lambda k=k: read_shard(k) for k in by_shard]
    tasks += [lambda i=i: read_part(i) for i in rest]
    thread_map(lambda task: task(), tasks, kind=kind)


def _stream_regions(
    pipe: ChunkPipeline,
    parts: list[Item],
    keys: list[str],
    indexes: dict[str, np.ndarray | None],
    views: dict[str, ShardView],
    read_part: Callable[[int, list[Any]], None],
    gap: int,
) -> list[int]:
    """Read the regions ``parts`` (inside the shards ``keys``) in one store stream: the shard
    indexes not cached are requested first, and the byte ranges of a shard's regions
    (``ShardView.plan``) go out as soon as its index has landed (stored in ``indexes``), merged
    across regions by ``gap`` (``merge_shard_ranges``); each region is handed to ``read_part`` on
    a pool worker once its last range has landed (at most the decode window of landed bytes
    waiting). Returns the regions left to read one by one (nested reads, bad indexes)."""
    layout = _layout(pipe)
    cache, memo = pipe.index_cache, pipe.index_memo
    generation = cache.generation if cache is not None else 0
    regions_of: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        regions_of.setdefault(key, []).append(i)
    fetching = []  # shards whose index (or whole value) is requested: positions 0.. of the feed
    for key in regions_of:
        index = cache.get(key) if cache is not None else None
        if index is None:
            fetching.append(key)
        else:
            indexes[key] = index
    # the uncached shards read whole, or all by their index first (``reads_shards_whole``);
    # only where indexes are cached (stores with costly requests): elsewhere every read would
    # fetch whole shards again
    whole = cache is not None and reads_shards_whole(
        layout,
        [[parts[i][1].chunk_selection for i in regions_of[key]] for key in fetching],
        pipe.settings.round_trip_bytes,
    )
    feed = RequestFeed((key, None if whole else layout.index_range()) for key in fetching)
    pieces: list[list[Piece]] = [[] for _ in fetching]  # the ranges each request answers
    owner: list[int] = []  # the region of each range
    first: dict[int, int] = {}  # a region's first position in owner
    count: dict[int, int] = {}  # ranges a region still waits for
    left: list[int] = []
    # regions whose bytes are all in: nothing to fetch (a missing shard, empty inner chunks), or
    # cut from a shard read whole (with their share of its bytes, for the decode window)
    ready: list[Region] = []

    def plan_shard(key: str, value: memoryview | None = None) -> None:
        """Plan the regions of shard ``key`` (its index known) and add their requests; or, with
        the shard's whole ``value``, cut their bytes from it."""
        index = indexes[key]
        ranges_of_shard: list[ByteRange] = []
        cut: list[tuple[int, list[Any]]] = []  # regions cut from the whole value
        for i in regions_of[key]:
            try:
                ranges = None if index is None else views[key].plan(parts[i][1].chunk_selection, index)
            except CorruptionError:
                ranges = None  # read_part meets it again and reports it (or re-reads a stale cached index)
            if index is None or ranges == []:
                ready.append((i, [], 0))
            elif ranges is None:
                left.append(i)
            elif value is not None:
                cut.append((i, [value[r.offset : r.offset + r.length] for r in ranges]))
            else:
                first[i], count[i] = len(owner), len(ranges)
                owner.extend([i] * len(ranges))
                ranges_of_shard.extend(ranges)
        if cut:  # each slice keeps the whole value alive: the cut regions weigh all of it
            share = -(-len(value) // len(cut))  # type: ignore[arg-type]
            ready.extend((i, values, share) for i, values in cut)
        requests, answers = merge_shard_ranges(key, ranges_of_shard, gap)
        base = len(owner) - len(ranges_of_shard)  # the positions in owner of these ranges
        feed.extend(requests)
        pieces.extend([(base + pos, start, length) for pos, start, length in a] for a in answers)

    for key in regions_of:
        if key in indexes:
            plan_shard(key)
    if not fetching:
        feed.close()

    def regions() -> Iterator[Region]:
        held: dict[int, list[Any]] = {}
        waiting = len(fetching)  # indexes not yet landed
        while ready:
            yield ready.pop()
        with contextlib.closing(pipe.store.stream_partial_values(feed)) as landed:
            for pos, value in landed:
                if pos < len(fetching):  # a shard index: its regions' ranges go out now
                    key = fetching[pos]
                    # the whole shard holds its regions' bytes; its index is checked as a
                    # fetched one (as far as the read goes), so an entry no region touches
                    # fails no read, as with ranged reads
                    shard = None if value is None or not whole else as_bytes_view(value)
                    raw = value if shard is None else layout.index_range().apply(shard)
                    indexes[key] = settle_index(
                        key, raw, layout, cache=cache, memo=memo, generation=generation
                    )
                    plan_shard(key, shard)
                    waiting -= 1
                    if waiting == 0:
                        feed.close()
                    while ready:
                        yield ready.pop()
                    continue
                view = None if value is None else as_bytes_view(value)
                for at, start, length in pieces[pos]:
                    i = owner[at]
                    values = held.setdefault(i, [None] * count[i])
                    values[at - first[i]] = None if view is None else view[start : start + length]
                    count[i] -= 1
                    if count[i] == 0:
                        values = held.pop(i)
                        yield i, values, sum(len(v) for v in values if v is not None)
        if waiting or any(count.values()):  # a store that read the feed once, as a plain list
            raise RuntimeError(
                f"{type(pipe.store).__name__}.stream_partial_values ended before answering the "
                "requests added to its RequestFeed"
            )

    # a region per CPU worker, its inner chunks decoded there one by one; fewer regions than
    # workers are decoded from I/O threads, each spreading its inner chunks over the CPU pool
    kind = "cpu" if len(parts) >= pool_size("cpu") else "io"
    map_bounded(lambda r: read_part(r[0], r[1]), regions(), lambda r: r[2], pipe.decode_window(), kind=kind)
    return left


#: A region ready to decode: its position, the values of its ranges, the landed bytes it holds.
Region = tuple[int, list[Any], int]


def reads_shards_whole(layout: ShardLayout, selections: list[list[Any]], round_trip_bytes: int) -> bool:
    """Whether shards whose indexes are not known, ``selections`` of each, are all read whole
    (one request each) rather than all by their index first, then their inner chunks: one
    round trip less for the call, worth it when the inner chunks no selection touches hold at
    most ``round_trip_bytes`` (``Settings.round_trip_bytes``) over all the shards, at their
    largest encoded size. All or none: one shard read by its index first makes the call wait
    the two round trips anyway. Not for inner codecs of unbounded size, nor nested shards
    (read in steps). A shard written by another library may hold unused bytes as well: they
    are fetched, not read."""
    most = layout.max_inner_nbytes
    if most is None or layout.nested is not None or round_trip_bytes <= 0:
        return False
    per_shard = math.prod(layout.grid)
    untouched_bytes = 0
    for shard_selections in selections:
        touched: set[tuple[int, ...]] = set()
        for selection in shard_selections:
            indexer = inner_indexer(selection, layout.shard_shape, layout.chunk_shape)
            touched.update(q.chunk_coords for q in indexer)
        untouched_bytes += (per_shard - len(touched)) * most
        if untouched_bytes > round_trip_bytes:
            return False
    return True


#: (position of a range, where it starts in its request's value, its length)
Piece = tuple[int, int, int]


def merge_shard_ranges(
    key: str, ranges: list[ByteRange], gap: int
) -> tuple[list[tuple[str, ByteRange]], list[list[Piece]]]:
    """One request for each run of the bounded ``ranges`` of shard ``key`` closer than ``gap``
    bytes (the store's ``coalesce_gap``: a request costs more than the bytes between), and for
    each request the ranges it answers. Ranges of different regions of one shard share a
    request this way; a short answer (the value ends early) gives short pieces, as the ranges
    would get alone."""
    bounded = [(r.offset, r.length) for r in ranges]
    spans, placement = merge_ranges(bounded, gap)  # type: ignore[arg-type]
    pieces: list[list[Piece]] = [[] for _ in spans]
    for pos, ((_, n), (span, start)) in enumerate(zip(bounded, placement, strict=True)):
        pieces[span].append((pos, start, n))  # type: ignore[arg-type]
    return [(key, ByteRange(off, n)) for off, n in spans], pieces
