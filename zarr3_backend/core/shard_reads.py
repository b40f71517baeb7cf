"""Reading regions inside shards: every shard index first (one batched ranged request, or the
shard-index cache), then only the inner chunks each region needs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._threads import thread_map
from ..byte_range import ByteRange
from ..codecs.shard_index import ShardLayout
from ..errors import CodecError, CorruptionError
from .shard_view import ShardView, read_indexes

if TYPE_CHECKING:
    from .pipeline import ChunkPipeline

Item = tuple[np.ndarray, Any]  # (output array, chunk projection)


def _in_order(selection: Any, shape: tuple[int, ...]) -> bool:
    """Whether ``selection`` is the whole of an array of ``shape``, in order (step-1 slices)."""
    return (
        isinstance(selection, tuple)
        and len(selection) == len(shape)
        and all(
            isinstance(s, slice) and s.indices(n) == (0, n, 1) for s, n in zip(selection, shape, strict=True)
        )
    )


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


def read_regions(pipe: ChunkPipeline, parts: list[Item], adopt: Any = False) -> dict[int, np.ndarray]:
    """Read regions inside shards (``adopt``: see ``ChunkPipeline.read``)."""
    store = pipe.store
    layout = _layout(pipe)
    keys = [pipe.key(p.chunk_coords) for _, p in parts]
    indexes = shard_indexes(pipe, keys)
    fill = pipe.metadata.fill_value
    adopted: dict[int, np.ndarray] = {}

    by_shard: dict[str, list[tuple[Any, np.ndarray]]] = {}
    if raw_shard_reads(pipe):  # raw inner chunks: one task per shard reads them all through one open file
        rest = []
        for i, (out, p) in enumerate(parts):
            if indexes[keys[i]] is not None and all(isinstance(s, slice) for s in p.out_selection):
                by_shard.setdefault(keys[i], []).append((p.chunk_selection, out[(*p.out_selection, ...)]))
            else:
                rest.append(i)
    else:
        rest = list(range(len(parts)))
    gap = functools.cache(lambda: store.coalesce_gap)  # resolved once per call, and only if ranges merge
    views = {key: ShardView.in_store(store, key, layout, gap) for key in dict.fromkeys(keys)}

    # stores with costly requests: the inner chunks of every region go out in one batched call
    # (requests_in_flight at once) instead of one call per region from a thread each
    prefetched = {} if store.inline_io else _prefetch(pipe, parts, keys, indexes, views, rest)

    def read_shard(key: str) -> None:
        reader = store.open_reader(key)
        if reader is None:
            raise CorruptionError(f"shard {key!r} vanished while being read")
        try:
            with reader:
                views[key].read_raw_into(reader, by_shard[key], indexes[key])
        except CorruptionError as e:
            raise type(e)(f"shard {key!r}: {e}") from e

    def read_part(i: int) -> None:
        (out, p), key = parts[i], keys[i]
        index, view = indexes[key], views[key]
        if index is None:
            out[p.out_selection] = fill
            return
        try:
            try:
                sub = view.read(p.chunk_selection, index, prefetched.pop(i, None))
            except CorruptionError:
                if pipe.index_cache is None:
                    raise
                # the cached index may predate a rewrite by another process: read it afresh
                pipe.index_cache.invalidate([key])
                index = shard_indexes(pipe, [key], refresh=True)[key]
                sub = None if index is None else view.read(p.chunk_selection, index)
        except CorruptionError as e:
            raise type(e)(f"shard {key!r}: {e}") from e
        if sub is None:
            out[p.out_selection] = fill
        elif (
            (adopt is True or (adopt and id(out) in adopt))
            and sub.shape == out.shape
            and _in_order(p.out_selection, out.shape)
        ):
            adopted[id(out)] = sub
        else:
            out[p.out_selection] = sub

    # local files: reads are cheap system calls, so CPU-many threads beat a GIL convoy of 32;
    # prefetched regions only decode
    kind = "cpu" if store.inline_io or len(prefetched) == len(rest) else "io"
    tasks: list[Callable[[], None]] = [lambda k=k: read_shard(k) for k in by_shard]
    tasks += [lambda i=i: read_part(i) for i in rest]
    thread_map(lambda task: task(), tasks, kind=kind)
    return adopted


def _prefetch(
    pipe: ChunkPipeline,
    parts: list[Item],
    keys: list[str],
    indexes: dict[str, np.ndarray | None],
    views: dict[str, ShardView],
    which: list[int],
) -> dict[int, list[Any]]:
    """For each region in ``which`` whose shard read is one step (``ShardView.plan``): the
    values of the ranges it will read, all fetched in one batched store call."""
    plans: list[tuple[int, list[ByteRange]]] = []
    for i in which:
        index = indexes[keys[i]]
        if index is None:
            continue
        try:
            ranges = views[keys[i]].plan(parts[i][1].chunk_selection, index)
        except CorruptionError:
            continue  # read_part meets it again and reports it (or re-reads a stale cached index)
        if ranges:
            plans.append((i, ranges))
    values = pipe.store.get_partial_values([(keys[i], r) for i, ranges in plans for r in ranges])
    out: dict[int, list[Any]] = {}
    pos = 0
    for i, ranges in plans:
        out[i] = values[pos : pos + len(ranges)]
        pos += len(ranges)
    return out
