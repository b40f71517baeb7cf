"""Writing storage units: encode each unit a write touches and store it; units the write covers
partly are read first and merged (read-modify-write), compare-and-swapped on stores with
conditional writes so concurrent writers never lose each other's updates. Units equal to the
fill value are erased instead of written, unless ``write_empty_chunks``."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._threads import scratch_buffer, thread_map
from ..codecs.fill import is_fill
from ..errors import CorruptionError, WriteConflictError

if TYPE_CHECKING:
    from .pipeline import ChunkPipeline

#: A partial unit write that loses its compare-and-swap this often raises WriteConflictError.
_CAS_ATTEMPTS = 64
_CAS_PAUSE = 0.002  # seconds; doubled per lost attempt (capped at 64x), with random jitter


def whole_index(selection: Any) -> tuple:
    """``selection`` ending in ``...``: indexing or assigning through it never unwraps a 0-d
    object array into (or out of) its element."""
    sel = selection if isinstance(selection, tuple) else (selection,)
    return (*sel, Ellipsis)


def _part(value: np.ndarray, selection: Any) -> np.ndarray:
    """``value[selection]`` always as an array (a 0-d object array indexed by ``()`` would give
    its element, which the encoders cannot take)."""
    return value[whole_index(selection)]


class OneUnit:
    """The part of ``indexer`` that falls in the unit stored under ``key`` (same output shape)."""

    def __init__(self, indexer: Any, key: str, chunk_key: Callable[[tuple[int, ...]], str]) -> None:
        self.shape = indexer.shape
        self._parts = [p for p in indexer if chunk_key(p.chunk_coords) == key]

    def __iter__(self) -> Any:
        return iter(self._parts)


def write_units(pipe: ChunkPipeline, indexer: Any, value: np.ndarray, *, write_empty_chunks: bool) -> None:
    """Encode and store each unit ``indexer`` touches; ``value`` has ``indexer.shape`` and the
    array's dtype."""
    projections = list(indexer)
    if not projections:
        return
    meta, store, chain = pipe.metadata, pipe.store, pipe.chain
    grid = meta.chunk_grid
    shape, unit, dtype = meta.shape, grid.chunk_shape, meta.data_type.numpy
    keys = [pipe.key(p.chunk_coords) for p in projections]
    stale = [i for i, p in enumerate(projections) if not p.is_complete]
    old_list, version_list = read_stale(pipe, [keys[i] for i in stale])
    old, versions = dict(zip(stale, old_list, strict=True)), dict(zip(stale, version_list, strict=True))
    fill = meta.fill_value
    # Stores with cheap synchronous writes: each CPU worker encodes one unit into reused
    # scratch memory and writes it at once (bounded memory, encoding overlaps writing).
    # Only when no old unit must be decoded: a corrupt old unit must fail the call before
    # anything is written, so read-modify-writes encode everything first.
    inline = store.inline_io and not stale
    nbytes = int(np.prod(unit)) * dtype.itemsize
    out_bytes = nbytes + 64  # room for a compressor's worst-case overhead, or a shard index
    shard_codec, wec = pipe.shard_codec, write_empty_chunks
    if shard_codec is not None:
        out_bytes += shard_codec.layout(chain.specs[-1]).index_size

    def new_chunk() -> np.ndarray:
        if inline and not dtype.hasobject:
            return np.frombuffer(scratch_buffer(nbytes, 0), dtype=dtype).reshape(unit)
        return np.empty(unit, dtype=dtype)

    def encode_unit(unit_value: np.ndarray) -> Any:
        # inline: each unit is written before its thread encodes the next, so the encoded
        # bytes may live in that thread's scratch memory
        out = scratch_buffer(out_bytes, 2) if inline else None
        return chain.encode(unit_value, write_empty_chunks=wec, out=out)

    def encode(i: int) -> Any:
        p = projections[i]
        if shard_codec is not None and not p.is_complete:
            try:  # only the inner chunks the write touches are decoded and re-encoded
                return shard_codec.encode_partial(
                    old[i],
                    p.chunk_selection,
                    _part(value, p.out_selection),
                    chain.spec,
                    write_empty_chunks=wec,
                )
            except CorruptionError as e:
                raise type(e)(f"shard {keys[i]!r}: {e}") from e
        if p.is_complete:
            region = grid.chunk_region(p.chunk_coords, shape)
            edge = any(r.stop - r.start != c for r, c in zip(region, unit, strict=True))
            whole = _part(value, p.out_selection) if not edge else None
            # encoded straight from the caller's values, no staging copy, when the codec
            # copies each inner chunk out itself (sharding) or they are one C-ordered block
            direct = whole is not None and (
                shard_codec is not None or (whole.flags.c_contiguous and not dtype.hasobject)
            )
            if direct and whole.shape == tuple(unit):
                if not wec and is_fill(whole, fill):
                    return None
                return encode_unit(whole)
            chunk = chain.spec.fill_array() if edge else new_chunk()
        elif old[i] is None:
            chunk = chain.spec.fill_array()
        else:
            chunk = pipe.decode(keys[i], old[i])
            if not chunk.flags.writeable:
                chunk = chunk.copy()
        chunk[whole_index(p.chunk_selection)] = _part(value, p.out_selection)
        if not wec and is_fill(chunk, fill):
            return None
        return encode_unit(chunk)

    pipe.forget(keys)  # before and after: no reader may cache a unit or index from in between
    if inline:

        def encode_and_store(i: int) -> None:
            data = encode(i)
            if data is None:
                store.erase(keys[i])
            else:
                store.set(keys[i], data)

        thread_map(encode_and_store, range(len(projections)), kind="cpu")
        pipe.forget(keys)
        return
    encoded = thread_map(encode, range(len(projections)), kind="cpu")
    # partial units of conditional stores are compare-and-swapped below, the rest written
    cas = set(stale) if store.supports_conditional_writes else set()
    writes = {keys[i]: v for i, v in enumerate(encoded) if v is not None and i not in cas}
    erases = [keys[i] for i, v in enumerate(encoded) if v is None and i not in cas]
    if writes:
        store.set_many(writes)
    if erases:
        store.erase_many(erases)
    if cas:

        def swap(i: int) -> None:
            def again() -> tuple[Any, Any]:
                old[i], versions[i] = store.get_versioned(keys[i])
                return encode(i), versions[i]

            compare_and_swap(pipe, keys[i], encoded[i], versions[i], again)

        thread_map(swap, stale, kind="io")
    pipe.forget(keys)


def read_stale(pipe: ChunkPipeline, keys: list[str]) -> tuple[list[Any], list[Any]]:
    """Old values of the units a write covers partly, with their versions when the store has
    conditional writes; a store without them that refuses unguarded partial writes (concurrent
    writers could lose updates) raises WriteConflictError before any write."""
    if not keys:
        return [], []
    store = pipe.store
    if store.supports_conditional_writes:
        pairs = thread_map(store.get_versioned, keys, kind="io")
        return [v for v, _ in pairs], [g for _, g in pairs]
    if store.refuses_unguarded_partial_writes:
        raise WriteConflictError(
            f"array {pipe.path or '/'!r}: writing part of {pipe.unit_name} {keys[0]!r} needs "
            f"a read-modify-write, and {store!r} has no conditional writes to keep concurrent "
            "writers from losing updates; write whole units, or open the store with "
            "unguarded partial writes allowed (see the store's documentation)"
        )
    return store.get_many(keys), [None] * len(keys)


def compare_and_swap(
    pipe: ChunkPipeline, key: str, data: Any, version: Any, again: Callable[[], tuple[Any, Any]]
) -> None:
    """Store ``data`` (None: erase) under ``key`` only if it is still at ``version``; when
    another writer got there first, ``again()`` re-reads and re-merges this unit (returning the
    new encoding and version), and the swap is retried with a growing, jittered pause."""
    store = pipe.store
    for attempt in range(_CAS_ATTEMPTS):
        if data is None:
            done = version is None or store.erase_if(key, version)  # missing already: done
        else:
            done = store.set_if(key, data, version)
        if done:
            return
        time.sleep(random.uniform(0.5, 1.5) * _CAS_PAUSE * 2 ** min(attempt, 6))
        data, version = again()
    raise WriteConflictError(
        f"array {pipe.path or '/'!r}: {pipe.unit_name} {key!r} was changed by concurrent "
        f"writers {_CAS_ATTEMPTS} times while this write merged into it; nothing of it was written"
    )
