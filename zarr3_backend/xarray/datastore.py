"""xarray's view of one Zarr group: its arrays as lazy, still CF-encoded variables.

A small ``AbstractDataStore`` so that xarray's own ``StoreBackendEntrypoint`` (and through it
``xarray.conventions.decode_cf_variables``) does every bit of CF decoding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

import numpy as np
from xarray.backends.common import AbstractDataStore
from xarray.core import indexing
from xarray.core.utils import FrozenDict
from xarray.core.variable import Variable

from ..core import dtypes_text  # noqa: F401  (registers string, bytes, fixed_length_utf32 types)
from ..core.array import Array
from ..core.group import Group
from ..core.metadata_v2 import v2_fill_value_is_null
from .backend_array import Zarr3BackendArray
from .encoding import (
    array_dimensions,
    check_dimension_sizes,
    decode_fill_value_attr,
    split_codecs,
    visible_attributes,
)
from .index_prefetch import IndexBatch, is_index_coordinate
from .task_chunks import task_block


def array_encoding(array: Array, dims: tuple[str, ...], task_bytes: int = 0) -> dict[str, Any]:
    """The encoding keys of an array that let a writer keep its layout.

    ``chunks`` is the read chunk (inner chunk when sharded), ``shards`` the shard shape or
    ``None``, ``shard_index`` the shard index settings, the codecs split as ``split_codecs``
    says, ``chunk_key_encoding`` as in ``zarr.json``, and ``preferred_chunks`` the dask chunk
    the engine prefers: the unit of storage (shard, else chunk), or with ``task_bytes`` > 0
    a block of whole units up to that many bytes (``task_chunks.task_block``). A rectilinear
    grid gives, per axis, the lengths of its chunks (or shards) inside the array instead.
    """
    grid = array.metadata.chunk_grid
    storage = grid.chunk_shape if grid.is_regular else _compact(grid.axis_chunks(array.shape))
    layout = split_codecs(array.codecs, storage)
    preferred = storage
    if grid.is_regular and task_bytes > 0:
        preferred = task_block(storage, array.shape, array.dtype.itemsize, task_bytes)
    encoding: dict[str, Any] = {
        "chunks": layout.pop("chunks"),
        "preferred_chunks": dict(zip(dims, preferred, strict=True)),
        "shards": layout.pop("shards"),
        **layout,
        "chunk_key_encoding": array.metadata.chunk_key_encoding.to_json(),
    }
    if array.dtype.kind == "T":  # numpy StringDType: tell CF encoding not to make it bytes
        encoding["dtype"] = array.dtype
    return encoding


def _compact(axis_chunks: tuple[tuple[int, ...], ...]) -> tuple[int | tuple[int, ...], ...]:
    """Per axis, one chunk length where the lengths are regular (all equal, the last one maybe
    shorter), else the lengths: the form xarray's zarr engine gives a rectilinear grid."""
    return tuple(
        sizes[0] if len(set(sizes[:-1])) <= 1 and sizes[-1] <= sizes[0] else sizes for sizes in axis_chunks
    )


class Zarr3DataStore(AbstractDataStore):
    """The arrays directly inside one group, as xarray variables (lazy, CF-encoded).

    ``members`` may be given when the caller already read the hierarchy (``open_datatree``),
    so no store call is repeated. ``drop_variables`` are skipped before their metadata is parsed
    (when the members are listed here, or by a caller that lists with ``skip_arrays``).
    The zarr ``fill_value`` masks with ``use_zarr_fill_value_as_mask=True``, and by default for
    Zarr v2 arrays; otherwise (the default for v3, as in xarray's zarr engine) it means "never
    written" and goes to the encoding.

    The index coordinates (``index_arrays``) are read together the first time xarray asks for
    any of them (``index_prefetch.IndexBatch``; shared between groups: ``read_indexes_with``).
    On a store with costly requests, ``preferred_chunks`` is a block of whole stored units of up to
    ``settings.remote_task_bytes`` (see ``array_encoding``).
    """

    __slots__ = ("_batch", "_close_store", "_dims", "_drop", "_members", "_use_fill_as_mask", "group")

    def __init__(
        self,
        group: Group,
        members: Mapping[str, Any] | None = None,
        *,
        use_zarr_fill_value_as_mask: bool | None = None,
        drop_variables: Iterable[str] = (),
        close_store: bool = False,
    ) -> None:
        self.group = group
        self._drop = frozenset(drop_variables)
        if members is None:
            members = group.members(max_depth=1, skip_arrays=self._drop)
        self._members = dict(members)
        self._use_fill_as_mask = use_zarr_fill_value_as_mask
        self._close_store = close_store
        self._dims: dict[str, tuple[str, ...]] = {}
        self._batch: IndexBatch | None = None

    # ---- reading ---------------------------------------------------------------------------
    def arrays(self) -> list[tuple[str, Array]]:
        """The group's direct child arrays, sorted by name, without dropped variables."""
        return [(k, v) for k, v in self._members.items() if isinstance(v, Array) and k not in self._drop]

    def _describe(self, name: str) -> str:
        return "/".join(p for p in (self.group.path, name) if p)

    def dimensions_of(self, name: str, array: Array) -> tuple[str, ...]:
        """The dimension names of member ``name`` (worked out once: a made-up name warns once)."""
        dims = self._dims.get(name)
        if dims is None:
            dims = array_dimensions(
                self._describe(name), array.shape, array.dimension_names, dict(array.attrs)
            )
            self._dims[name] = dims
        return dims

    def index_arrays(self) -> dict[tuple[str, str], Array]:
        """The arrays xarray loads to build its default indexes (1-D, named as their dimension),
        by ``(group path, name)``: the keys of an ``IndexBatch`` that several groups share."""
        return {
            (self.group.path, name): a
            for name, a in self.arrays()
            if is_index_coordinate(name, self.dimensions_of(name, a))
        }

    def read_indexes_with(self, batch: IndexBatch) -> None:
        """Serve the index coordinates from ``batch``, which a caller that opens several groups
        shares between them, instead of from a batch of this group's own."""
        self._batch = batch

    def open_store_variable(
        self, name: str, array: Array, values: Callable[[], np.ndarray] | None = None
    ) -> Variable:
        """One lazy variable: dimensions resolved, ``_ARRAY_DIMENSIONS`` hidden, fill value handled
        the way xarray's zarr engine does for Zarr v3. ``values``: returns its stored values, read
        together with others' (served without a request of its own)."""
        raw_attrs = dict(array.attrs)
        dims = self.dimensions_of(name, array)
        attributes = visible_attributes(raw_attrs)
        data = indexing.LazilyIndexedArray(Zarr3BackendArray(array, values))
        store = array.store
        encoding = array_encoding(
            array, dims, store.settings.remote_task_bytes if store.costly_requests else 0
        )
        as_mask = self._use_fill_as_mask
        if as_mask is None:  # xarray's default: the fill value masks in v2, not in v3
            as_mask = array.zarr_format == 2
        if as_mask and array.dtype.fields is not None:
            as_mask = False  # a record has no missing-value form: keep the dtype, fill in encoding
        if as_mask:
            if not v2_fill_value_is_null(array.metadata):  # v2's null: no fill value at all
                attributes["_FillValue"] = _hashable(array.fill_value)
        else:
            encoding["fill_value"] = array.fill_value
            where = f"array {self._describe(name)!r} attribute"
            if "_FillValue" in attributes:
                attributes["_FillValue"] = decode_fill_value_attr(
                    attributes["_FillValue"], array.dtype, where=f"{where} '_FillValue'"
                )
            if _has_text(attributes.get("missing_value")) and array.dtype.kind in "fc":
                attributes["missing_value"] = decode_fill_value_attr(
                    attributes["missing_value"], array.dtype, where=f"{where} 'missing_value'"
                )
        return Variable(dims, data, attributes, encoding)

    def get_variables(self) -> FrozenDict:
        self.get_dimensions()  # ShapeError when two arrays disagree on a dimension's size
        batch = self._batch or IndexBatch(self.index_arrays())
        self._batch = None  # the variables hold it now (the dataset keeps this store until closed)

        def values_of(name: str) -> Callable[[], np.ndarray] | None:
            key = (self.group.path, name)
            return partial(batch.values, key) if key in batch else None

        return FrozenDict(
            (name, self.open_store_variable(name, array, values_of(name))) for name, array in self.arrays()
        )

    def get_attrs(self) -> dict[str, Any]:
        return visible_attributes(dict(self.group.attrs))

    def get_dimensions(self) -> dict[str, int]:
        return check_dimension_sizes(
            (self._describe(name), self.dimensions_of(name, a), a.shape) for name, a in self.arrays()
        )

    def close(self) -> None:
        if self._close_store:
            self.group.store.close()


def _hashable(fill: Any) -> Any:
    """The fill value as xarray's CF decoding can hold it (it puts fill values in a set): raw
    bytes (``np.void``, which does not hash) as ``bytes``, masking like an ``S`` fill value."""
    return fill.tobytes() if isinstance(fill, np.void) else fill


def _has_text(value: Any) -> bool:
    """A base64-style attribute value (a string, or a list holding one)."""
    if isinstance(value, str):
        return True
    return isinstance(value, list | tuple) and any(isinstance(v, str) for v in value)
