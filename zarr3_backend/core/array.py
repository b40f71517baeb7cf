"""The Array: numpy-style reads and writes of one Zarr v3 array.

The Array holds metadata and turns selections into projections (which storage unit, which part
of it, where in the result); the chunk pipeline (``core/pipeline.py``) fetches, decodes and
scatters them, and encodes and stores writes. Writes that touch several storage units, and
every change of shape, are one transaction (``core/commit.py``): all of it or none of it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import indexing
from ..errors import ReadOnlyError, ShapeError
from ..stores.base import Store
from . import rectilinear, shape_changes
from .attributes import Attributes
from .commit import Transaction
from .metadata import ArrayMetadata
from .metadata_v2 import V2_MARKER, v2_fill_value_is_null
from .metadata_v2_store import shape_documents, update_node_metadata
from .node_claims import retry_shape_change
from .paths import node_name
from .pipeline import ChunkPipeline
from .read_outputs import output
from .selection import OIndex, VIndex, fancy_kind, flatten_nd
from .unit_writes import OneUnit
from .values import coerce_value


def _spans_units(indexer: Any) -> bool:
    """Whether a selection touches more than one storage unit (chunk or shard)."""
    units = iter(indexer)
    return next(units, None) is not None and next(units, None) is not None


def _region_key(region: Any, shape: tuple[int, ...]) -> tuple:
    """A hashable form of a normalized basic selection: equal keys select the same elements."""
    return tuple(
        (s.start, s.stop, s.step) if isinstance(s, slice) else s
        for s in indexing.normalize_selection(tuple(region), shape)
    )


class Array:
    """One Zarr v3 array in a store, addressed numpy-style.

    ``store`` and ``path`` locate it; ``metadata`` is its parsed ``zarr.json``
    (``ArrayMetadata``). Made by ``open_array``/``create_array`` or a Group, not directly.
    """

    def __init__(
        self,
        store: Store,
        path: str,
        metadata: ArrayMetadata,
        *,
        read_only: bool = False,
        write_empty_chunks: bool = False,
    ) -> None:
        self.store = store
        self.path = path
        self.metadata = metadata
        self.read_only = read_only or store.read_only
        # v2 without a fill value: every chunk is stored (none equals "no value"), as zarr-python does
        self.write_empty_chunks = write_empty_chunks or v2_fill_value_is_null(metadata)

    def __getstate__(self) -> dict:  # a pickled Array (a dask task) makes its pipeline afresh
        state = self.__dict__.copy()
        state.pop("_pipe", None)
        return state

    # ---- description -----------------------------------------------------------------------
    @property
    def zarr_format(self) -> int:
        """2 for an array stored as Zarr v2 (``.zarray``), else 3."""
        return 2 if V2_MARKER in self.metadata.extra_fields else 3

    @property
    def name(self) -> str:
        """The last segment of the array's path ("" for a root array)."""
        return node_name(self.path)

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape."""
        return self.metadata.shape

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def dtype(self) -> np.dtype:
        """The numpy data type of the values (native byte order)."""
        return self.metadata.data_type.numpy

    @property
    def nbytes(self) -> int:
        """Size of the whole array in bytes, uncompressed."""
        return self.size * self.dtype.itemsize

    @property
    def fill_value(self) -> Any:
        """The value of never-written elements (a numpy scalar of ``dtype``)."""
        return self.metadata.fill_value

    @property
    def dimension_names(self) -> tuple[str | None, ...] | None:
        """The ``dimension_names`` of ``zarr.json``, or ``None``."""
        return self.metadata.dimension_names

    @property
    def storage_chunks(self) -> tuple[int, ...]:
        """The shape of one stored object (shard or chunk): the unit a writer must own."""
        return self.metadata.chunk_grid.chunk_shape

    @property
    def shards(self) -> tuple[int, ...] | None:
        """The shard shape, or ``None`` when the array is not sharded."""
        return self.storage_chunks if self._pipeline.sharding is not None else None

    @property
    def chunks(self) -> tuple[int, ...]:
        """The read chunk: the inner chunk shape when sharded (in the array's axis order, also
        when transposes come before the sharding codec), else the chunk grid's shape."""
        return self._pipeline.read_chunk_shape

    @property
    def codecs(self) -> list[dict]:
        """The codec chain as written in ``zarr.json``."""
        return [c.to_json() for c in self.metadata.codecs]

    @property
    def attrs(self) -> Attributes:
        """The attributes, as a mutable mapping whose changes are written at once."""
        return Attributes(self)

    @property
    def nchunks(self) -> int:
        """Number of storage units (chunks or shards) in the grid."""
        return int(np.prod(self.metadata.chunk_grid.grid_shape(self.shape), dtype=np.int64))

    @property
    def info(self) -> Any:
        """What zarr-python's ``.info`` shows, as a ``core.info.ArrayInfo`` (print it)."""
        from .info import array_info

        return array_info(self)

    def __repr__(self) -> str:
        return f"<zarr3_backend.Array {self.path or '/'!r} shape={self.shape} dtype={self.dtype}>"

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self[...]
        return out if dtype is None else out.astype(dtype)

    # ---- codec plumbing (the pipeline) -------------------------------------------------------
    @property
    def _pipeline(self) -> ChunkPipeline:
        """The chunk pipeline of this array as it is now (made anew when the metadata changed)."""
        pipe = self.__dict__.get("_pipe")
        if pipe is None or pipe.metadata is not self.metadata:
            pipe = self.__dict__["_pipe"] = ChunkPipeline(self.store, self.path, self.metadata)
        return pipe

    def _chunk_key(self, coords: tuple[int, ...]) -> str:
        return self._pipeline.key(coords)

    # ---- reading ---------------------------------------------------------------------------
    def _read(self, indexer: Any) -> np.ndarray:
        out = output(indexer.shape, self.dtype, f"array {self.path or '/'!r}")
        self._pipeline.read([(out, p) for p in indexer])
        return out

    def __getitem__(self, selection: Any) -> Any:
        if not self.metadata.chunk_grid.is_regular:
            result = rectilinear.read(self, selection)
            return result[()] if result.ndim == 0 else result
        kind = fancy_kind(selection, self.shape)
        if kind == "nd-array":
            flat, pos, index_shape = flatten_nd(selection)
            result = self.oindex[flat]
            return result.reshape(result.shape[:pos] + index_shape + result.shape[pos + 1 :])
        if kind is not None:
            return self.vindex[selection] if kind == "vectorized" else self.oindex[selection]
        result = self._read(indexing.basic_indexer(selection, self.shape, self.storage_chunks))
        return result[()] if result.ndim == 0 else result

    def get_region(self, region: tuple[slice, ...]) -> np.ndarray:
        """The values of a box of step-1 slices (what a dask task reads), in one batched call."""
        if not self.metadata.chunk_grid.is_regular:  # chunk by chunk, through chunk views
            return rectilinear.read(self, tuple(region))
        return self._read(indexing.basic_indexer(tuple(region), self.shape, self.storage_chunks))

    def get_regions(self, regions: Sequence[tuple[slice, ...]]) -> list[np.ndarray]:
        """The values of many boxes of step-1 slices in one call: every storage unit and shard
        index they touch is fetched once, in batched store calls, and decoded concurrently."""
        if not self.metadata.chunk_grid.is_regular:
            return [self.get_region(r) for r in regions]
        indexers = [indexing.basic_indexer(tuple(r), self.shape, self.storage_chunks) for r in regions]
        keys = [_region_key(r, self.shape) for r in regions]
        return self._pipeline.read_boxes(indexers, keys)

    @property
    def oindex(self) -> OIndex:
        """Orthogonal indexing: integer arrays and boolean masks apply per axis."""
        return OIndex(self)

    @property
    def vindex(self) -> VIndex:
        """Vectorized (numpy fancy) indexing: coordinate arrays broadcast together."""
        return VIndex(self)

    # ---- writing ---------------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyError(f"array {self.path or '/'!r} is read-only")

    def _coerce_value(self, value: Any, shape: tuple[int, ...]) -> np.ndarray:
        return coerce_value(value, self.dtype, shape, f"array {self.path or '/'!r}")

    def _write(self, indexer: Any, value: Any) -> None:
        if _spans_units(indexer) and not self.store.commits_externally:
            self._write_atomically(indexer, value)
        else:
            self._write_units(indexer, value)
            self.store.barrier()  # one unit, no commit: kept once this returns (``durable``)

    def _write_units(self, indexer: Any, value: Any) -> None:
        """Encode and store each unit ``indexer`` touches (read-modify-write for partial ones)."""
        self._check_writable()
        value = self._coerce_value(value, indexer.shape)
        self._pipeline.write(indexer, value, write_empty_chunks=self.write_empty_chunks)

    def write_unit_of(self, region: tuple[slice, ...], value: Any, key: str) -> None:
        """Write the part of ``value`` (the values of ``region``) that falls in the storage unit
        ``key``, as a conditional read-modify-write: how a commit redoes a unit that another
        writer changed while this one was staged."""
        indexer = indexing.basic_indexer(tuple(region), self.shape, self.storage_chunks)
        self._write_units(OneUnit(indexer, key, self._chunk_key), self._coerce_value(value, indexer.shape))

    def _write_atomically(self, indexer: Any, value: Any) -> None:
        """A write of several storage units, staged and committed as one (see core/commit.py):
        readers see all of it or none of it, also after a crash."""
        self._check_writable()
        self._commit_write(self.metadata, indexer, self._coerce_value(value, indexer.shape))

    def _commit_write(self, meta: ArrayMetadata, indexer: Any, value: np.ndarray) -> None:
        """Write ``value`` into ``indexer``'s units of the array described by ``meta`` in one
        transaction; ``meta`` becomes the stored document if it differs from today's (a change
        of shape from today's, which the commit claims: ShapeMovedError when another writer
        changed the shape first)."""
        documents = {} if meta == self.metadata else shape_documents(self.path, meta)
        shape_from = {key: self.shape for key in documents}
        planned = shape_documents(self.path, self.metadata)  # the array as read: checked at the commit
        # values planned at this shape: left outside a smaller one a shrink stored meanwhile, erased
        within = {} if documents else {key: self.shape for key in shape_documents(self.path, meta)}
        target = Array(self.store, self.path, meta, write_empty_chunks=self.write_empty_chunks)
        with Transaction(
            self.store,
            guard=(self.path,),
            documents=documents,
            shape_from=shape_from,
            within=within,
            planned=planned,
        ) as txn:
            target._with_store(txn.staging)._write_units(indexer, value)

            def redo(key: str) -> None:  # another writer changed a shared unit meanwhile
                target._write_units(OneUnit(indexer, key, target._chunk_key), value)

            txn.commit(redo=redo)
        self.metadata = meta
        self._pipeline.forget()

    def _with_store(self, store: Store) -> Array:
        """This array (same metadata and options) seen through another store."""
        return Array(store, self.path, self.metadata, write_empty_chunks=self.write_empty_chunks)

    def __setitem__(self, selection: Any, value: Any) -> None:
        if not self.metadata.chunk_grid.is_regular:  # chunk by chunk, committed as one write
            self._check_writable()
            with Transaction(self.store, guard=(self.path,)) as txn:
                rectilinear.write(self._with_store(txn.staging), selection, value)
                txn.commit()
            return
        kind = fancy_kind(selection, self.shape)
        if kind == "nd-array":
            flat, pos, index_shape = flatten_nd(selection)
            indexer = indexing.orthogonal_indexer(flat, self.shape, self.storage_chunks)
            nd_shape = (*indexer.shape[:pos], *index_shape, *indexer.shape[pos + 1 :])
            self._write(indexer, self._coerce_value(value, nd_shape).reshape(indexer.shape))
            return
        if kind == "vectorized":
            self.vindex[selection] = value
            return
        if kind == "orthogonal":
            self.oindex[selection] = value
            return
        self._write(indexing.basic_indexer(selection, self.shape, self.storage_chunks), value)

    def set_region(self, region: tuple[slice, ...], value: Any) -> None:
        """Write a box of step-1 slices; only storage units it covers partly are read first."""
        if not self.metadata.chunk_grid.is_regular:
            self[tuple(region)] = value
            return
        self._write(indexing.basic_indexer(tuple(region), self.shape, self.storage_chunks), value)

    # ---- metadata changes ------------------------------------------------------------------
    def _change_attributes(self, change: Callable[[dict], dict]) -> None:
        """Replace the stored attributes ``a`` by ``change(a)``, keeping every other part of the
        stored document (another writer's shape or attributes)."""
        self._check_writable()
        # validated (e.g. NaN in attributes) before anything is written; kept in memory exactly
        # as a reader of the stored documents will see it
        self.metadata = update_node_metadata(
            self.store, self.path, lambda m: m.evolve(attributes=change(dict(m.attributes))), self.metadata
        )

    def invalidate_cache(self) -> None:
        """Forget cached shard indexes and decoded chunks of this array, e.g. after other
        processes rewrote it."""
        self._pipeline.forget()

    def resize(self, *shape: Any) -> None:
        """Change the shape; stored units wholly outside the new shape are deleted, and the part
        of a unit the new end cuts through that falls outside is reset to the fill value (a
        later growth shows fill there, not the old values)."""
        self._check_writable()
        raw = shape[0] if len(shape) == 1 and not isinstance(shape[0], int | np.integer) else shape
        try:
            new_shape = tuple(operator.index(s) for s in raw)
        except TypeError as e:
            raise ShapeError(f"array {self.path or '/'!r}: new shape must be integers, got {raw!r}") from e
        if len(new_shape) != self.ndim or any(s < 0 for s in new_shape):
            raise ShapeError(f"array {self.path or '/'!r}: cannot resize shape {self.shape} to {new_shape}")
        retry_shape_change(lambda: shape_changes.resize_once(self, new_shape))

    def append(self, data: Any, axis: int = 0) -> None:
        """Grow along ``axis`` and write ``data`` into the new part: validated first, then the
        data, then ``zarr.json``; made again after the rows of a writer that got in first."""
        data = np.asarray(data)
        retry_shape_change(lambda: shape_changes.append_once(self, data, axis))
