"""Public entry points: open_group, open_array, create_array, create_group, consolidate_metadata.

Every creating call validates everything (data type, fill value, codec chain, shapes) before it
writes a byte, so a failed call leaves the store as it was.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..codecs import Codec
from ..errors import (
    ArrayNotFoundError,
    CodecError,
    GroupNotFoundError,
    NodeExistsError,
    ShapeError,
    ZarrV2Error,
)
from ..stores import make_store
from ..stores.base import Store, StoreArgumentError
from ..stores.resolve import MODES
from .array import Array
from .chunk_grid import RegularChunkGrid, rectilinear_from_arg
from .chunk_key_encoding import DefaultChunkKeyEncoding, parse_chunk_key_encoding
from .codec_specs import build_codecs
from .commit import Transaction, replace_document, wait_for_commits
from .commit import repair as repair_writes
from .consolidate import consolidated
from .dtypes import DataType, as_data_type, default_fill_value, parse_fill_value
from .group import Group, node_from_metadata, open_existing_group, read_node_metadata, v2_ancestor
from .metadata import ArrayMetadata, GroupMetadata, parse_node, to_bytes
from .paths import ancestor_paths, join_prefix, metadata_key, normalize_path, validate_new_node_path
from .rectilinear import check_codecs


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise StoreArgumentError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")


def _resolve_store(store: Any, mode: str, storage_options: dict | None) -> Store:
    return make_store(store, mode=mode, storage_options=storage_options)


def guess_chunks(shape: tuple[int, ...], itemsize: int, target: int = 4 * 2**20) -> tuple[int, ...]:
    """A C-order-friendly chunk shape of about ``target`` bytes: halve the largest leading axes."""
    chunks = [max(int(s), 1) for s in shape]
    while math.prod(chunks) * itemsize > target:
        i = max(range(len(chunks)), key=lambda k: (chunks[k], -k))
        if chunks[i] == 1:
            break
        chunks[i] = math.ceil(chunks[i] / 2)
    return tuple(chunks)


def _as_shape(name: str, value: Any, ndim: int | None = None) -> tuple[int, ...]:
    if isinstance(value, int | np.integer):
        value = (int(value),)
    try:
        shape = tuple(operator.index(v) for v in value)
    except TypeError as e:
        raise ShapeError(f"{name} must be a sequence of integers, got {value!r}") from e
    if any(v < 0 for v in shape):
        raise ShapeError(f"{name} must not be negative, got {shape}")
    if ndim is not None and len(shape) != ndim:
        raise ShapeError(f"{name} {shape} has {len(shape)} dimensions, the array has {ndim}")
    return shape


def missing_parent_documents(store: Store, path: str) -> dict[str, bytes]:
    """zarr.json documents for missing ancestor groups; refuses an array ancestor."""
    ancestors = ancestor_paths(path)
    docs = store.get_many([metadata_key(a) for a in ancestors]) if ancestors else []
    missing = {}
    for a, doc in zip(ancestors, docs, strict=True):
        if doc is None:
            missing[metadata_key(a)] = to_bytes(GroupMetadata(attributes={}))
            continue
        if isinstance(parse_node(doc, a), ArrayMetadata):
            raise NodeExistsError(f"cannot create {path!r}: ancestor {a or '/'!r} is an array")
    # only an ancestor without zarr.json can be a v2 node (one with it is read as v3)
    refuse_inside_v2(store, path, [a for a in ancestors if metadata_key(a) in missing])
    return missing


def refuse_inside_v2(store: Store, path: str, ancestors: Sequence[str] | None = None) -> None:
    """Raise ``ZarrV2Error`` when ``path`` lies inside a Zarr v2 hierarchy (``v2_ancestor``)."""
    key = v2_ancestor(store, ancestor_paths(path) if ancestors is None else ancestors)
    if key is not None:
        raise ZarrV2Error(
            f"cannot create {path!r} in {store!r}: it would lie inside the Zarr v2 node of {key!r}, "
            "and zarr3_backend reads v2 but writes only v3"
        )


def _clear_for_create(store: Store, path: str, overwrite: bool) -> bool:
    """Refuse whatever node is at ``path``, or with overwrite say whether one is to be erased."""
    exists = (
        store.exists(metadata_key(path)) or next(iter(store.list_dir(join_prefix(path))), None) is not None
    )
    if exists:
        if not overwrite:
            raise NodeExistsError(
                f"a node already exists at {path or '/'!r} in {store!r} (use overwrite=True or mode='w')"
            )
    return exists


def _write_new_node(store: Store, path: str, doc: bytes, overwrite: bool) -> None:
    """Write a validated ``zarr.json`` at ``path``: refuse (or clear) what is there, add any
    missing parent groups, then the document itself. Replacing a node is one transaction: a
    reader (or a crash) never finds it half erased."""
    store.check_writable()
    parents = missing_parent_documents(store, path)
    if _clear_for_create(store, path, overwrite):
        documents = {**parents, metadata_key(path): doc}
        with Transaction(
            store, guard=(path,), documents=documents, erase_prefixes=[join_prefix(path)]
        ) as txn:
            txn.commit()
        return
    if parents:
        store.set_many(parents)
    store.set(metadata_key(path), doc)


def repair(store: Any, *, storage_options: dict | None = None, all_writers: bool = False) -> list[str]:
    """Finish (roll forward) or drop the writes that dead writers left unfinished in ``store``, and
    remove dead writers' temporary files; returns the writes' ids. ``all_writers=True`` also takes over writes whose writer cannot be judged
    (another host), for when the caller knows that nothing else writes."""
    store = _resolve_store(store, "r+", storage_options)
    done = repair_writes(store, only_dead=not all_writers)
    store.remove_dead_temporaries()  # what a killed writer left beside the keys
    return done


def array_metadata(
    *,
    shape: Any,
    dtype: Any,
    chunks: Any = None,
    shards: Any = None,
    codecs: Sequence[Any] | None = None,
    compressors: Any = "auto",
    filters: Any = None,
    serializer: Any = "auto",
    fill_value: Any = None,
    chunk_key_encoding: Any = None,
    dimension_names: Sequence[str | None] | None = None,
    attributes: dict | None = None,
    path: str = "",
    shard_index: dict | None = None,
) -> ArrayMetadata:
    """Validated metadata for a new array (pure: touches no store)."""
    shape = _as_shape("shape", shape)
    dt = as_data_type(dtype)
    if fill_value is None:
        fill = default_fill_value(dt)
    elif isinstance(fill_value, np.generic | np.ndarray) or not isinstance(fill_value, str | list):
        fill = parse_fill_value(_fill_to_json_input(fill_value, dt), dt)
    else:
        fill = parse_fill_value(fill_value, dt)
    # rectilinear chunks (per-axis edge lists): the first chunk's shape builds the codecs
    rect = rectilinear_from_arg(shards if shards is not None else chunks, len(shape))
    if rect is not None and shards is not None:
        shards = rect.codec_shape((0,) * len(shape))
    elif rect is not None:
        chunks = rect.codec_shape((0,) * len(shape))
    if codecs is not None:
        if shards is not None:
            raise ShapeError(
                "give either a full `codecs` chain or `shards`, not both (put sharding_indexed in `codecs`)"
            )
        conflicts = [
            name
            for name, value, default in (
                ("compressors", compressors, "auto"),
                ("filters", filters, None),
                ("serializer", serializer, "auto"),
            )
            if not (value is default or (isinstance(value, str) and value == default))
        ]
        if conflicts:
            raise CodecError(f"give either a full `codecs` chain or {', '.join(conflicts)}, not both")
        grid_shape = (
            _as_shape("chunks", chunks, len(shape))
            if chunks is not None
            else guess_chunks(shape, dt.itemsize)
        )
        codec_list = list(codecs)
    else:
        inner = _as_shape("chunks", chunks, len(shape)) if chunks is not None else None
        outer = _as_shape("shards", shards, len(shape)) if shards is not None else None
        if inner is None:
            inner = guess_chunks(outer or shape, dt.itemsize)
        grid_shape, codec_list = build_codecs(
            dt,
            inner,
            outer,
            compressors=compressors,
            filters=filters,
            serializer=serializer,
            shard_index=shard_index,
        )
    if any(c <= 0 for c in grid_shape):
        raise ShapeError(f"chunk shape {grid_shape} must be positive on every axis")
    if dimension_names is not None:
        dimension_names = tuple(dimension_names)
    if chunk_key_encoding is None:
        encoding = DefaultChunkKeyEncoding()
    elif isinstance(chunk_key_encoding, str | dict):
        if isinstance(chunk_key_encoding, dict) and "separator" in chunk_key_encoding:
            # zarr-python's flat spelling {"name": "v2", "separator": "."}
            flat = dict(chunk_key_encoding)
            chunk_key_encoding = {"name": flat.pop("name", "default"), "configuration": flat}
        encoding = parse_chunk_key_encoding(chunk_key_encoding)
    else:
        encoding = chunk_key_encoding
    meta = ArrayMetadata(
        shape=shape,
        data_type=dt,
        chunk_grid=rect or RegularChunkGrid(tuple(grid_shape)),
        chunk_key_encoding=encoding,
        fill_value=fill,
        codecs=tuple(codec_list),
        attributes=dict(attributes or {}),
        dimension_names=dimension_names,
    )
    check_codecs(meta)  # a rectilinear grid's codecs must suit every chunk shape
    # ArrayMetadata holds the evolved codecs (endian, blosc typesize); the JSON round trip
    # validates the document exactly as a reader will see it
    return ArrayMetadata.from_json(meta.to_json(), path)


def _fill_to_json_input(value: Any, dt: DataType) -> Any:
    """Turn a Python/numpy fill value into a JSON form ``parse_fill_value`` accepts."""
    from .dtypes import fill_value_to_json

    try:
        if dt.numpy.fields is not None:  # a record: the data type parses its own fill forms
            return fill_value_to_json(value, dt)
        arr = np.asarray(value)
        if dt.numpy.kind not in "OTUS":
            with np.errstate(invalid="ignore", over="ignore"):  # checked just below, as a typed error
                arr = arr.astype(dt.numpy, casting="unsafe" if arr.dtype.kind in "biufc" else "same_kind")
            if (
                dt.numpy.kind in "iub"
                and np.asarray(value).dtype.kind == "f"
                and not float(value).is_integer()
            ):
                raise ValueError("not an integer")
            if dt.numpy.kind in "iu" and arr != value:
                raise ValueError("out of range")
        return fill_value_to_json(arr[()], dt)
    except (TypeError, ValueError, OverflowError) as e:
        from ..errors import DataTypeError

        raise DataTypeError(f"fill_value {value!r} is not valid for data type {dt.name!r}: {e}") from e


def create_array(
    store: Any,
    path: str = "",
    *,
    shape: Any,
    dtype: Any,
    chunks: Any = None,
    shards: Any = None,
    codecs: Sequence[Any] | None = None,
    compressors: Any = "auto",
    filters: Any = None,
    serializer: Any = "auto",
    fill_value: Any = None,
    chunk_key_encoding: Any = None,
    dimension_names: Sequence[str | None] | None = None,
    attributes: dict | None = None,
    overwrite: bool = False,
    storage_options: dict | None = None,
    write_empty_chunks: bool = False,
    shard_index: dict | None = None,
) -> Array:
    """Create an array and write its ``zarr.json`` (and any missing parent groups).

    ``chunks`` is the read chunk (the inner chunk when ``shards`` is given). With a full
    ``codecs`` chain, ``chunks`` is the chunk grid's shape and ``shards`` must be None.
    """
    path = validate_new_node_path(normalize_path(path))
    store = _resolve_store(store, "w" if overwrite else "a", storage_options)
    meta = array_metadata(
        shape=shape,
        dtype=dtype,
        chunks=chunks,
        shards=shards,
        codecs=codecs,
        compressors=compressors,
        filters=filters,
        serializer=serializer,
        fill_value=fill_value,
        chunk_key_encoding=chunk_key_encoding,
        shard_index=shard_index,
        dimension_names=dimension_names,
        attributes=attributes,
        path=path,
    )
    doc = to_bytes(meta)
    _write_new_node(store, path, doc, overwrite)
    return Array(store, path, meta, write_empty_chunks=write_empty_chunks)


def create_group(
    store: Any,
    path: str = "",
    *,
    attributes: dict | None = None,
    overwrite: bool = False,
    storage_options: dict | None = None,
) -> Group:
    """Create a group and write its ``zarr.json`` (and any missing parent groups)."""
    path = validate_new_node_path(normalize_path(path))
    store = _resolve_store(store, "w" if overwrite else "a", storage_options)
    meta = GroupMetadata(attributes=dict(attributes or {}))
    doc = to_bytes(meta)
    _write_new_node(store, path, doc, overwrite)
    return Group(store, path, meta)


def open_group(
    store: Any = None,
    path: str = "",
    mode: str = "a",
    *,
    storage_options: dict | None = None,
    use_consolidated: bool | None = None,
    attributes: dict | None = None,
) -> Group:
    """Open (or with modes ``a``/``w``/``w-`` create) the group at ``path``.

    ``use_consolidated``: None uses consolidated metadata when present, True requires it,
    False ignores it.
    """
    _check_mode(mode)
    path = normalize_path(path)
    store = _resolve_store(store if store is not None else {}, mode, storage_options)
    return wait_for_commits(store, lambda: _open_group(store, path, mode, use_consolidated, attributes))


def _open_group(
    store: Store, path: str, mode: str, use_consolidated: bool | None, attributes: dict | None
) -> Group:
    if mode in ("w", "w-"):
        return create_group(store, path, attributes=attributes, overwrite=mode == "w")
    try:
        return open_existing_group(store, path, read_only=mode == "r", use_consolidated=use_consolidated)
    except GroupNotFoundError:
        if mode != "a" or read_node_metadata(store, path) is not None:
            raise
        return create_group(store, path, attributes=attributes)


def open_array(
    store: Any,
    path: str = "",
    mode: str = "r",
    *,
    storage_options: dict | None = None,
    write_empty_chunks: bool = False,
    **create_kwargs: Any,
) -> Array:
    """Open the array at ``path``; modes ``w``/``w-`` (and ``a`` when missing) create it from
    ``create_kwargs`` (shape, dtype, chunks, ...)."""
    _check_mode(mode)
    path = normalize_path(path)
    store = _resolve_store(store, mode, storage_options)
    return wait_for_commits(store, lambda: _open_array(store, path, mode, write_empty_chunks, create_kwargs))


def _open_array(
    store: Store, path: str, mode: str, write_empty_chunks: bool, create_kwargs: dict[str, Any]
) -> Array:
    if mode in ("w", "w-") or (mode == "a" and create_kwargs and read_node_metadata(store, path) is None):
        return create_array(
            store, path, overwrite=mode == "w", write_empty_chunks=write_empty_chunks, **create_kwargs
        )
    meta = read_node_metadata(store, path)
    if meta is None:
        raise ArrayNotFoundError(f"no array at {path or '/'!r} in {store!r}")
    if not isinstance(meta, ArrayMetadata):
        raise ArrayNotFoundError(f"{path or '/'!r} is a group, not an array")
    return Array(store, path, meta, read_only=mode == "r", write_empty_chunks=write_empty_chunks)


def open_node(
    store: Any, path: str = "", mode: str = "r", *, storage_options: dict | None = None
) -> Array | Group:
    """The array or group at ``path``."""
    path = normalize_path(path)
    store = _resolve_store(store, mode, storage_options)

    def open_it() -> Array | Group:
        meta = read_node_metadata(store, path)
        if meta is None:
            return open_existing_group(store, path, read_only=mode == "r", use_consolidated=None)
        return node_from_metadata(store, path, meta, read_only=mode == "r")

    return wait_for_commits(store, open_it)


def consolidate_metadata(store: Any, path: str = "", *, storage_options: dict | None = None) -> Group:
    """Write every descendant's ``zarr.json`` into the group's inline consolidated metadata
    (waiting for other writers' commits to land; their markers are kept)."""
    path = normalize_path(path)
    store = _resolve_store(store, "r+", storage_options)

    def build() -> GroupMetadata:
        group = open_existing_group(store, path, read_only=False, use_consolidated=False)
        if group.zarr_format == 2:
            raise ZarrV2Error(
                f"group {path or '/'!r} in {store!r} is Zarr v2: zarr3_backend reads v2 but writes only v3 "
                "(its .zmetadata is left as it is)"
            )
        return consolidated(group)

    meta = wait_for_commits(store, build)
    replace_document(store, metadata_key(path), to_bytes(meta))
    return Group(store, path, meta)


__all__ = [
    "Codec",
    "consolidate_metadata",
    "repair",
    "create_array",
    "create_group",
    "guess_chunks",
    "open_array",
    "open_group",
    "open_node",
]
