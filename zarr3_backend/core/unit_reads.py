"""Reading whole storage units (chunks, or shards read whole): fetch, decode, scatter.

Two ways, by what the store declares. Stores with cheap synchronous reads (``inline_io``: local
files, memory) are read unit by unit from the CPU workers into reused scratch memory (or straight
into the output), so reading overlaps decoding with no batch held in memory. Other stores stream:
all requests go out (``requests_in_flight`` at a time), each value is decoded as it lands, and
at most ``window_bytes`` of landed, undecoded bytes are held before intake pauses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._threads import map_bounded, scratch_buffer, thread_map
from ..errors import CorruptionError
from ..indexing import whole_chunk_target

if TYPE_CHECKING:
    from .chunk_cache import ChunkCache
    from .pipeline import ChunkPipeline

#: Inline reads of chunks at least this big ask the store to read ahead ``_AHEAD`` chunks.
_HINT_MIN_BYTES = 1 << 20
_AHEAD = 4

Item = tuple[np.ndarray, Any]  # (output array, chunk projection)


def read_whole(pipe: ChunkPipeline, whole: list[Item]) -> None:
    """Fill ``out[p.out_selection]`` for every ``(out, p)`` whose unit is read whole."""
    keys = [pipe.key(p.chunk_coords) for _, p in whole]
    cache = pipe.chunk_cache
    if cache is not None:
        whole, keys = _serve_cached(cache, whole, keys)
        if not whole:
            return
    if pipe.store.inline_io:
        _read_inline(pipe, whole, keys, cache)
    else:
        _read_streamed(pipe, whole, keys, cache)


def scatter(
    pipe: ChunkPipeline,
    key: str,
    data: Any,
    p: Any,
    out: np.ndarray,
    keep: Callable[[np.ndarray], None] | None = None,
) -> None:
    """Decode unit bytes ``data`` into ``out`` for projection ``p``: straight into its place
    when the chain allows (``CodecChain.decode_to``), else through per-thread scratch memory.
    ``keep`` (the chunk cache) takes the whole decoded unit first, in memory of its own."""
    codec = pipe.shard_codec
    if keep is None and codec is not None and all(isinstance(s, slice) for s in p.out_selection):
        try:  # inner chunks decode straight into their place in ``out``
            codec.decode_into(data, p.chunk_selection, pipe.chain.spec, out[(*p.out_selection, ...)])
        except CorruptionError as e:
            raise type(e)(f"shard {key!r}: {e}") from e
        return
    chain = pipe.chain
    direct = keep is None and chain.decodes_into_target
    target = whole_chunk_target(p, out, chain.spec.shape) if direct else None
    scratch = _scratch if direct else None
    try:
        chunk = chain.decode_to(data, target, scratch)
    except CorruptionError as e:
        raise type(e)(f"{pipe.unit_name} {key!r}: {e}") from e
    if chunk is None:
        return
    if keep is not None:
        keep(chunk)
    out[p.out_selection] = chunk[p.chunk_selection]


def _scratch(nbytes: int) -> memoryview:
    return scratch_buffer(nbytes, 1)


def _serve_cached(cache: ChunkCache, whole: list[Item], keys: list[str]) -> tuple[list[Item], list[str]]:
    """Scatter the units the chunk cache holds; the rest, still to be read."""
    missing, missing_keys = [], []
    for item, key in zip(whole, keys, strict=True):
        chunk = cache.get(key)
        if chunk is None:
            missing.append(item)
            missing_keys.append(key)
        else:
            out, p = item
            out[p.out_selection] = chunk[p.chunk_selection]
    return missing, missing_keys


def _keeper(cache: ChunkCache | None, key: str, generation: int) -> Callable[[np.ndarray], None] | None:
    if cache is None:
        return None
    return lambda chunk: cache.put(key, chunk, generation)


def _read_streamed(pipe: ChunkPipeline, whole: list[Item], keys: list[str], cache: ChunkCache | None) -> None:
    """Every unit requested at once (``requests_in_flight`` outstanding), each decoded by a CPU
    worker as it lands, with at most ``window_bytes`` of landed bytes waiting to be decoded."""
    settings = pipe.settings
    fill = pipe.metadata.fill_value
    generation = cache.generation if cache is not None else 0
    stream = pipe.store.stream_partial_values(
        [(k, None) for k in keys], in_flight=settings.requests_in_flight
    )

    def decode(landed: tuple[int, Any]) -> None:
        i, data = landed
        out, p = whole[i]
        if data is None:
            out[p.out_selection] = fill
        else:
            scatter(pipe, keys[i], data, p, out, _keeper(cache, keys[i], generation))

    def weight(landed: tuple[int, Any]) -> int:
        return 0 if landed[1] is None else len(landed[1])

    map_bounded(decode, stream, weight, pipe.decode_window(settings), kind="cpu")


def _read_inline(pipe: ChunkPipeline, whole: list[Item], keys: list[str], cache: ChunkCache | None) -> None:
    """Each CPU worker reads one unit into reused scratch memory (or, for an uncompressed whole
    chunk whose output region is contiguous, straight into ``out``), decodes and scatters it."""
    store = pipe.store
    fill = pipe.metadata.fill_value
    chain = pipe.chain
    wire = chain.raw_dtype if cache is None else None  # the file's bytes are the elements
    shape = chain.spec.shape
    generation = cache.generation if cache is not None else 0
    # read-ahead: while chunk i is decoded, the kernel already fetches chunk i + AHEAD
    hint = chain.spec.nbytes >= _HINT_MIN_BYTES
    if hint and len(keys) > 1:
        store.will_need(keys[:_AHEAD])

    def read_one(i: int) -> None:
        if hint and i + _AHEAD < len(keys):
            store.will_need([keys[i + _AHEAD]])
        out, p = whole[i]
        target = whole_chunk_target(p, out, shape) if wire is not None else None
        placed = False

        def alloc(n: int) -> memoryview:
            nonlocal placed
            if target is not None and wire == out.dtype and n == target.nbytes:
                placed = True
                return memoryview(target.reshape(-1).view(np.uint8))
            # a cached unit may be a view of the bytes read: those must then be its own
            return scratch_buffer(n, 0) if cache is None else memoryview(bytearray(n))

        data = store.get_into(keys[i], alloc)
        if data is None:
            out[p.out_selection] = fill
        elif placed and len(data) == target.nbytes:
            return  # the file's bytes are the chunk's elements, already in place
        else:
            scatter(pipe, keys[i], data, p, out, _keeper(cache, keys[i], generation))

    thread_map(read_one, range(len(whole)), kind="cpu")
