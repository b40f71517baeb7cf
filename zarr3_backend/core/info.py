"""What ``Array.info`` / ``Group.info`` and ``zarr3 info`` show: frozen descriptions with a text
and a JSON rendering, and the storage figures of an array (measured by reading its objects).

The descriptions are pure (built from metadata); ``storage_info`` and ``classify_keys`` are the
I/O edge: they list the array's prefix and read each stored object once.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..codecs.shard_index import EMPTY, whole_shard_index
from ..errors import CorruptionError
from .array import Array
from .group import Group
from .paths import join_prefix
from .rectilinear import chunk_view  # the one owner of a rectilinear unit's own metadata

#: Objects are read in batches of this many to measure them (bounded memory).
READ_BATCH = 64


def _codec_docs(codecs: Iterable[Any]) -> tuple[dict, ...]:
    return tuple(c.to_json() for c in codecs)


def _order(array: Array) -> str:
    """``"F"`` when the chain starts with a transpose reversing the axes (v2 ``order: "F"``)."""
    chain = array.metadata.codec_chain()
    first = chain.array_array[0].to_json() if chain.array_array else None
    reverse = list(range(array.ndim))[::-1]
    if first and first.get("name") == "transpose" and array.ndim > 1:
        if list(first.get("configuration", {}).get("order", [])) == reverse:
            return "F"
    return "C"


def _size(n: int) -> str:
    """A byte count as zarr-python shows it: ``1234 (1.2K)``."""
    value, unit = float(n), ""
    for u in ("K", "M", "G", "T", "P"):
        if value < 1024:
            break
        value, unit = value / 1024, u
    return f"{n}" if not unit else f"{n} ({value:.1f}{unit})"


@dataclass(frozen=True)
class StorageInfo:
    """What an array holds in its store: objects, bytes and the units and inner chunks present."""

    stored_objects: int
    stored_bytes: int
    units_present: int
    units_total: int
    inner_chunks_present: int | None
    inner_chunks_total: int | None
    nbytes: int
    other_keys: tuple[str, ...] = ()

    @property
    def compression_ratio(self) -> float | None:
        """Uncompressed bytes of the whole array over stored bytes (``None`` when nothing is stored)."""
        return self.nbytes / self.stored_bytes if self.stored_bytes else None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of the figures."""
        out = asdict(self)
        out["other_keys"] = list(self.other_keys)
        out["compression_ratio"] = self.compression_ratio
        return out


@dataclass(frozen=True)
class ArrayInfo:
    """The description ``Array.info`` gives (the fields of zarr-python's ``.info``)."""

    path: str
    zarr_format: int
    data_type: Any
    shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    shard_shape: tuple[int, ...] | None
    order: str
    read_only: bool
    store_type: str
    filters: tuple[dict, ...]
    serializer: dict
    compressors: tuple[dict, ...]
    nbytes: int
    fill_value: Any = None
    dimension_names: tuple[str | None, ...] | None = None
    storage: StorageInfo | None = field(default=None)

    def with_storage(self, storage: StorageInfo) -> ArrayInfo:
        """This description with the measured storage figures."""
        return ArrayInfo(**{**self.__dict__, "storage": storage})

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``storage`` is ``null`` until measured)."""
        out = {k: v for k, v in self.__dict__.items() if k != "storage"}
        out["type"] = "Array"
        for k in ("shape", "chunk_shape", "shard_shape", "dimension_names", "filters", "compressors"):
            out[k] = None if out[k] is None else list(out[k])
        out["fill_value"] = _json_scalar(self.fill_value)
        out["storage"] = None if self.storage is None else self.storage.to_json()
        return out

    def to_text(self) -> str:
        """Aligned ``Name : value`` lines, as zarr-python's ``.info`` prints them."""
        rows: list[tuple[str, Any]] = [
            ("Type", "Array"),
            ("Path", self.path or "/"),
            ("Zarr format", self.zarr_format),
            (
                "Data type",
                json.dumps(self.data_type) if not isinstance(self.data_type, str) else self.data_type,
            ),
            ("Fill value", _json_scalar(self.fill_value)),
            ("Shape", self.shape),
            ("Chunk shape", self.chunk_shape),
        ]
        if self.shard_shape is not None:
            rows.append(("Shard shape", self.shard_shape))
        if self.dimension_names is not None:
            rows.append(("Dimension names", self.dimension_names))
        rows += [
            ("Order", self.order),
            ("Read-only", self.read_only),
            ("Store type", self.store_type),
            ("Filters", _codecs_text(self.filters)),
            ("Serializer", _codecs_text((self.serializer,))),
            ("Compressors", _codecs_text(self.compressors)),
            ("No. bytes", _size(self.nbytes)),
        ]
        s = self.storage
        if s is not None:
            unit = "Shards" if self.shard_shape is not None else "Chunks"
            rows += [
                ("No. bytes stored", _size(s.stored_bytes)),
                ("Storage ratio", "-" if s.compression_ratio is None else f"{s.compression_ratio:.1f}"),
                ("Stored objects", s.stored_objects),
                (f"{unit} present", f"{s.units_present}/{s.units_total}"),
            ]
            if s.inner_chunks_total is not None:
                rows.append(("Inner chunks present", f"{s.inner_chunks_present}/{s.inner_chunks_total}"))
            if s.other_keys:
                rows.append(("Other keys", len(s.other_keys)))
        return _align(rows)

    def __str__(self) -> str:
        return self.to_text()


@dataclass(frozen=True)
class GroupInfo:
    """The description ``Group.info`` gives: the group and how many members it has."""

    path: str
    zarr_format: int
    read_only: bool
    store_type: str
    n_arrays: int
    n_groups: int
    consolidated: bool

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"type": "Group", **self.__dict__}

    def to_text(self) -> str:
        """Aligned ``Name : value`` lines."""
        return _align(
            [
                ("Type", "Group"),
                ("Path", self.path or "/"),
                ("Zarr format", self.zarr_format),
                ("Read-only", self.read_only),
                ("Store type", self.store_type),
                ("Consolidated", self.consolidated),
                ("No. members", self.n_arrays + self.n_groups),
                ("No. arrays", self.n_arrays),
                ("No. groups", self.n_groups),
            ]
        )

    def __str__(self) -> str:
        return self.to_text()


def _json_scalar(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    if isinstance(value, bytes):
        return list(value)
    if isinstance(value, complex):
        return [value.real, value.imag]
    return value


def _codecs_text(codecs: Sequence[dict]) -> str:
    if not codecs:
        return "()"
    return ", ".join(json.dumps(c, separators=(",", ":")) for c in codecs)


def _align(rows: Sequence[tuple[str, Any]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}} : {v}" for k, v in rows)


def chunk_layout(array: Array) -> tuple[Any, Any]:
    """``(chunk shape, shard shape or None)`` as ``info`` and ``tree`` show them. On a
    rectilinear grid the stored units differ in shape: the grid's edges per axis (as
    ``zarr.json`` writes them) stand for the units', and the inner chunk shape of a sharded
    one is the one every unit shares, in array axis order (also behind ``transpose`` codecs)."""
    grid = array.metadata.chunk_grid
    if grid.is_regular:
        return array.chunks, array.shards
    edges = tuple(grid.to_json()["configuration"]["chunk_shapes"])
    first = _first_unit(array)  # a regular one-unit array: the pipeline's own rules apply
    return (edges, None) if first.shards is None else (first.chunks, edges)


def _first_unit(array: Array) -> Array:
    """The view of the stored unit at the grid's origin of a rectilinear ``array``."""
    return chunk_view(array, (0,) * array.ndim)


def _shard_layout(chain: Any) -> Any:
    """The shard layout of a chain whose array->bytes codec is the sharding codec."""
    return chain.array_bytes.layout(chain.specs[-1])


def _chosen_codecs(array: Array, sharded: bool) -> tuple[tuple[dict, ...], dict, tuple[dict, ...]]:
    """``(filters, serializer, compressors)`` a user chose: of a sharded array, the sharding
    codec's inner chain's (as zarr-python reports them), its filters led by the array->array
    codecs before the sharding codec (a ``transpose`` there is shown, not lost); else the
    array's own."""
    chain = array.metadata.codec_chain()
    filters = _codec_docs(chain.array_array)
    if sharded:
        chain = _shard_layout(chain).inner
        filters += _codec_docs(chain.array_array)
    return filters, chain.array_bytes.to_json(), _codec_docs(chain.bytes_bytes)


def _inner_chunks_total(array: Array, chunks: Sequence[int]) -> int | None:
    """How many inner chunks the shards of the whole grid of a sharded ``array`` hold, stored or
    not (``chunks``: the inner chunk shape ``chunk_layout`` gives). ``None`` on a rectilinear grid
    whose inner chunk has no shape in array axes (array->array codecs other than transposes
    before the sharding codec), where units of different shapes cannot be counted per axis."""
    grid = array.metadata.chunk_grid
    per_shard = math.prod(_shard_layout(array.metadata.codec_chain()).grid)  # the origin unit's
    if grid.is_regular:  # every shard has the origin unit's layout
        return math.prod(grid.grid_shape(array.shape)) * per_shard
    origin = grid.codec_shape((0,) * array.ndim)
    if math.prod(u // c for u, c in zip(origin, chunks, strict=True)) != per_shard:
        return None
    # shard shapes are multiples of the inner chunk, so the count factors over the axes
    return math.prod(
        sum(e // c for e in grid.edges(axis, size))
        for axis, (size, c) in enumerate(zip(array.shape, chunks, strict=True))
    )


def array_info(array: Array) -> ArrayInfo:
    """The description of ``array`` from its metadata (no store access)."""
    chunks, shards = chunk_layout(array)
    filters, serializer, compressors = _chosen_codecs(array, sharded=shards is not None)
    return ArrayInfo(
        path=array.path,
        zarr_format=array.zarr_format,
        data_type=array.metadata.data_type.to_json(),
        shape=array.shape,
        chunk_shape=chunks,
        shard_shape=shards,
        order=_order(array),
        read_only=array.read_only,
        store_type=type(array.store).__name__,
        filters=filters,
        serializer=serializer,
        compressors=compressors,
        nbytes=array.nbytes,
        fill_value=array.fill_value,
        dimension_names=array.dimension_names,
    )


def group_info(group: Group) -> GroupInfo:
    """The description of ``group``: lists its direct members (one level)."""
    members = group.members(max_depth=1)
    n_arrays = sum(isinstance(m, Array) for m in members.values())
    return GroupInfo(
        path=group.path,
        zarr_format=group.zarr_format,
        read_only=group.read_only,
        store_type=type(group.store).__name__,
        n_arrays=n_arrays,
        n_groups=len(members) - n_arrays,
        consolidated=group.metadata.consolidated_metadata is not None,
    )


@dataclass(frozen=True)
class KeyMap:
    """An array's stored keys sorted out: storage units of its grid by key, and the rest."""

    units: dict[str, tuple[int, ...]]
    other: tuple[str, ...]


def _is_metadata(rel: str) -> bool:
    return rel in ("zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata")


def classify_keys(array: Array, keys: Iterable[str]) -> KeyMap:
    """Sort ``keys`` (full keys under the array's prefix) into storage units of the array's grid
    and other keys (stray files, units outside the grid); metadata documents are left out."""
    prefix = join_prefix(array.path)
    encoding = array.metadata.chunk_key_encoding
    grid = array.metadata.chunk_grid.grid_shape(array.shape)
    units: dict[str, tuple[int, ...]] = {}
    other: list[str] = []
    for key in keys:
        rel = key[len(prefix) :]
        if _is_metadata(rel):
            continue
        try:
            coords = encoding.decode_chunk_key(rel, array.ndim)
        except Exception:  # any key the encoding does not produce is not a unit
            other.append(key)
            continue
        if len(coords) == array.ndim and all(0 <= c < n for c, n in zip(coords, grid, strict=True)):
            units[key] = coords
        else:
            other.append(key)
    return KeyMap(units, tuple(sorted(other)))


def array_keys(array: Array) -> list[str]:
    """Every stored key under the array's prefix (one listing)."""
    return sorted(array.store.list_prefix(join_prefix(array.path)))


def unit_chain(array: Array, coords: Sequence[int]) -> Any:
    """The codec chain of the stored unit (chunk or shard) at grid ``coords``: the array's own
    on a regular grid, else the one bound to that unit's shape (rectilinear units differ)."""
    if array.metadata.chunk_grid.is_regular:
        return array.metadata.codec_chain()
    return chunk_view(array, coords).metadata.codec_chain()


def shard_index(
    array: Array, data: Any, coords: Sequence[int] | None = None, chain: Any = None
) -> np.ndarray:
    """The checked index of one whole stored shard of ``array`` (offset, nbytes per inner chunk)
    at grid ``coords`` (needed on a rectilinear grid only; or pass that unit's ``chain``); raises
    ``CorruptionError`` when it is truncated or points outside the shard."""
    if chain is None:
        chain = unit_chain(array, coords if coords is not None else (0,) * array.ndim)
    # the sharding codec's own whole-shard index reader (one owner of the index rules)
    return whole_shard_index(_shard_layout(chain), memoryview(data))


def read_batches(array: Array, keys: Sequence[str]) -> Iterator[tuple[str, bytes | None]]:
    """``(key, bytes)`` of each key, read ``READ_BATCH`` at a time in batched store calls."""
    for i in range(0, len(keys), READ_BATCH):
        batch = keys[i : i + READ_BATCH]
        yield from zip(batch, array.store.get_many(batch), strict=True)


def storage_info(array: Array, keys: Sequence[str] | None = None) -> StorageInfo:
    """Measure what ``array`` holds: lists its prefix and reads every stored unit once (shards
    are measured from their index). ``keys`` saves the listing when the caller has it."""
    keymap = classify_keys(array, array_keys(array) if keys is None else keys)
    grid = array.metadata.chunk_grid.grid_shape(array.shape)
    total = int(np.prod(grid, dtype=np.int64))
    chunks, shards = chunk_layout(array)
    inner_total = None if shards is None else _inner_chunks_total(array, chunks)
    inner_present = None if inner_total is None else 0
    stored_bytes = 0
    for key, data in read_batches(array, list(keymap.units)):
        if data is None:  # erased since the listing
            continue
        stored_bytes += len(data)
        if inner_present is not None:
            try:
                index = shard_index(array, data, keymap.units[key])
            except CorruptionError as e:  # named as the reads name a shard
                raise type(e)(f"shard {key!r}: {e}") from e
            inner_present += int((index[..., 0] != EMPTY).sum())
    return StorageInfo(
        stored_objects=len(keymap.units),
        stored_bytes=stored_bytes,
        units_present=len(keymap.units),
        units_total=total,
        inner_chunks_present=inner_present,
        inner_chunks_total=inner_total,
        nbytes=array.nbytes,
        other_keys=keymap.other,
    )
