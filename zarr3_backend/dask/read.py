"""``from_array``: a lazy dask array over a zarr3_backend Array, one task per block.

The graph is one Blockwise layer built by ``dask.array.from_array`` over a small array-like
(:class:`BlockReader`), so a 10^6-block array costs no per-block Python objects at build time
and touches no store key beyond the metadata already loaded. Each task reads its block with one
``Array.get_region`` call: one batched store request, decoded concurrently.
"""

from __future__ import annotations

import uuid
from typing import Any

import dask.array as da
import numpy as np
from dask.array.core import normalize_chunks
from dask.base import tokenize

from ..core.array import Array
from ..errors import ShapeError
from .alignment import split_sizes

ChunksArg = str | int | tuple | dict | None


class BlockReader:
    """Array-like that dask slices: a box of step-1 slices becomes one ``get_region`` call.

    Anything else (integers, steps, produced when dask fuses a later slice into the read) falls
    back to the Array's basic indexing, still one batched call.
    """

    def __init__(self, array: Array) -> None:
        self.array = array
        self.shape = array.shape
        self.dtype = array.dtype
        self.ndim = array.ndim

    def __getitem__(self, key: Any) -> np.ndarray:
        key = key if isinstance(key, tuple) else (key,)
        if len(key) == self.ndim and all(isinstance(k, slice) and k.step in (None, 1) for k in key):
            region = tuple(slice(*k.indices(n)[:2]) for k, n in zip(key, self.shape, strict=True))
            return self.array.get_region(region)
        return np.asarray(self.array[key])

    def __dask_tokenize__(self) -> Any:
        return array_token(self.array)

    def __repr__(self) -> str:
        return f"BlockReader({self.array!r})"


def store_token(store: Any) -> Any:
    """A deterministic identity for a store: its own ``__dask_tokenize__``, else its type and
    the repr of its read-only twin (stores name their location in repr: the root, the URL,
    the id of a memory store's dict), so two views of one store share dask keys."""
    own = getattr(store, "__dask_tokenize__", None)
    if callable(own):
        return own()
    try:
        twin = store if store.read_only else store.with_read_only(True)
    except (AttributeError, NotImplementedError):
        twin = store
    return (type(store).__module__, type(store).__qualname__, repr(twin))


def array_token(array: Array) -> str:
    """Token of an array's identity and layout (store, path, metadata), never of its data."""
    meta = array.metadata
    doc = meta.to_json() if hasattr(meta, "to_json") else repr(meta)
    return tokenize(store_token(array.store), array.path, doc)


def resolve_chunks(array: Array, chunks: ChunksArg = "shards") -> tuple[tuple[int, ...], ...]:
    """dask chunks for ``array``: ``"shards"`` (one block per stored object), ``"chunks"``
    (one per inner chunk), ``"auto"`` (multiples of the stored object) or explicit sizes."""
    shape, dtype = array.shape, array.dtype
    grid = array.metadata.chunk_grid
    stored = grid.axis_chunks(shape)  # the stored objects' extents, regular or rectilinear
    if chunks is None or chunks == "shards":
        chunks = stored
    elif chunks == "chunks":
        chunks = array.chunks if grid.is_regular else _inner_blocks(array, stored)
    try:
        return normalize_chunks(chunks, shape, dtype=dtype, previous_chunks=stored)
    except (ValueError, TypeError) as e:
        raise ShapeError(
            f"array {array.path or '/'!r}: invalid dask chunks {chunks!r} for shape {shape}: {e}"
        ) from e


def _inner_blocks(array: Array, stored: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
    """The inner chunks of a sharded rectilinear array (each shard cut by the inner chunk
    shape), or the stored objects when it is not sharded."""
    try:
        inner = array.chunks  # the inner chunk shape in the array's axes (transposes undone)
    except ShapeError:  # not sharded, or another array->array codec comes first
        return stored
    return tuple(
        tuple(p for n in sizes for p in split_sizes(n, c)) for sizes, c in zip(stored, inner, strict=True)
    )


def from_array(
    a: Array,
    chunks: ChunksArg = "shards",
    *,
    name: str | None = None,
    inline_array: bool = False,
) -> da.Array:
    """A dask array reading ``a``; ``chunks="shards"`` gives exactly one task per stored object.

    ``chunks`` also takes ``"chunks"`` (inner chunks), ``"auto"`` or anything dask's
    ``normalize_chunks`` understands (ints, tuples, dicts, -1). The default ``name`` is new on
    every call: the keys say nothing of the data, so a cluster holding the results of an
    earlier read must not hand them out after the array was rewritten. Pass ``name=`` for
    deterministic keys when the data is known not to change.
    """
    normalized = resolve_chunks(a, chunks)
    if name is None:
        name = "zarr3-read-" + tokenize(array_token(a), normalized, uuid.uuid4().hex)
    meta = np.empty((0,) * a.ndim, dtype=a.dtype)
    return da.from_array(
        BlockReader(a),
        chunks=normalized,
        name=name,
        lock=False,
        asarray=False,
        fancy=False,
        meta=meta,
        inline_array=inline_array,
    )
