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
    ArgumentError,
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
from .codec_specs import build_codecs, coerce_codec
from .commit import Transaction, update_document, wait_for_commits
from .commit import repair as repair_writes
from .consolidate import consolidated, consolidated_v2, members_table_into, refresh_v2_consolidated
from .dtypes import DataType, as_data_type, default_fill_value, parse_fill_value
from .group import Group, node_from_metadata, open_existing_group, read_node_metadata, v2_ancestor
from .metadata import ArrayMetadata, GroupMetadata, parse_node, to_bytes
from .metadata_v2 import ARRAY_KEY, CONSOLIDATED_KEY, GROUP_KEY
from .metadata_v2_write import is_v2, node_documents, v2_group_metadata, zarray_document
from .metadata_v2_write import v2_array_metadata as to_v2_metadata
from .paths import (
    ancestor_paths,
    join_path,
    join_prefix,
    metadata_key,
    normalize_path,
    validate_new_node_path,
)
from .rectilinear import check_codecs
from .txn_records import is_reserved_key, unmarked_node


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


def missing_parent_documents(store: Store, path: str, zarr_format: int = 3) -> dict[str, bytes]:
    """Documents for missing ancestor groups (``zarr.json``, or with ``zarr_format=2`` the
    ``.zattrs`` and ``.zgroup``); refuses an array ancestor, and a node of the other format."""
    ancestors = ancestor_paths(path)
    if zarr_format == 2:
        return _missing_v2_parents(store, path, ancestors)
    docs = store.get_many([metadata_key(a) for a in ancestors]) if ancestors else []
    missing = {}
    for a, doc in zip(ancestors, docs, strict=True):
        if doc is None:
            missing[metadata_key(a)] = to_bytes(GroupMetadata(attributes={}))
            continue
        # what the ancestor is, whatever writes are in flight on it (a concurrent commit's
        # marker on the root refused this write at once, where readers wait for that commit)
        if isinstance(unmarked_node(doc, metadata_key(a), a), ArrayMetadata):
            raise NodeExistsError(f"cannot create {path!r}: ancestor {a or '/'!r} is an array")
    # only an ancestor without zarr.json can be a v2 node (one with it is read as v3)
    refuse_inside_v2(store, path, [a for a in ancestors if metadata_key(a) in missing])
    return missing


def _missing_v2_parents(store: Store, path: str, ancestors: Sequence[str]) -> dict[str, bytes]:
    """``.zattrs`` + ``.zgroup`` of the ancestors of a new v2 node that have neither; an array
    ancestor, or a v3 one (whose listings would leave the v2 node out), is refused."""
    keys = [join_path(a, name) for a in ancestors for name in (GROUP_KEY, ARRAY_KEY, "zarr.json")]
    found = store.exists_many(keys) if keys else []
    missing: dict[str, bytes] = {}
    for i, a in enumerate(ancestors):
        is_group, is_array, is_v3 = found[3 * i : 3 * i + 3]
        if is_array:
            raise NodeExistsError(f"cannot create {path!r}: ancestor {a or '/'!r} is an array")
        if is_v3:
            raise ZarrV2Error(
                f"cannot create the Zarr v2 node {path!r} in {store!r}: ancestor {a or '/'!r} is a Zarr v3 "
                "node (zarr.json), whose readers would not list it; use zarr_format=3"
            )
        if not is_group:
            missing.update(node_documents(a, v2_group_metadata({}, a)))
    return missing


def refuse_inside_v2(store: Store, path: str, ancestors: Sequence[str] | None = None) -> None:
    """Raise ``ZarrV2Error`` when a v3 node at ``path`` would lie inside a Zarr v2 hierarchy
    (``v2_ancestor``): its ``zarr.json`` would hide the v2 node from v2 readers."""
    key = v2_ancestor(store, ancestor_paths(path) if ancestors is None else ancestors)
    if key is not None:
        raise ZarrV2Error(
            f"cannot create the Zarr v3 node {path!r} in {store!r}: it would lie inside the Zarr v2 node "
            f"of {key!r}; create it with zarr_format=2"
        )


def _clear_for_create(store: Store, path: str, overwrite: bool) -> bool:
    """Refuse whatever node is at ``path``, or with overwrite say whether one is to be erased."""
    # the protocol's own records (another writer's staged values under the root) are no node
    exists = store.exists(metadata_key(path)) or any(
        not is_reserved_key(join_path(path, name)) for name in store.list_dir(join_prefix(path))
    )
    if exists:
        if not overwrite:
            raise NodeExistsError(
                f"a node already exists at {path or '/'!r} in {store!r} (use overwrite=True or mode='w')"
            )
    return exists


def _write_new_node(store: Store, path: str, meta: ArrayMetadata | GroupMetadata, overwrite: bool) -> None:
    """Write validated metadata as the documents of a new node at ``path`` (``zarr.json``, or a
    v2 node's ``.zattrs`` and ``.zarray``/``.zgroup``): refuse (or clear) what is there, add
    any missing parent groups, then the documents themselves (and a v2 hierarchy's ``.zmetadata``
    is brought up to date). Replacing a node is one transaction: a reader (or a crash) never
    finds it half erased."""
    store.check_writable()
    zarr_format = 2 if is_v2(meta) else 3
    parents = missing_parent_documents(store, path, zarr_format)
    docs = node_documents(path, meta)
    if _clear_for_create(store, path, overwrite):
        documents = {**parents, **docs}
        with Transaction(
            store, guard=(path,), documents=documents, erase_prefixes=[join_prefix(path)]
        ) as txn:
            txn.commit()
        return
    _write_documents(store, parents, docs, zarr_format, new_at=path)


def write_node_documents(store: Store, path: str, meta: ArrayMetadata | GroupMetadata) -> None:
    """Write the documents of a node at ``path`` where there is none yet, and of its missing
    parent groups, without looking below ``path``: how a node whose data is already in place
    (a copy's, written first so that it is never seen with holes) is made visible."""
    store.check_writable()
    zarr_format = 2 if is_v2(meta) else 3
    _write_documents(
        store, missing_parent_documents(store, path, zarr_format), node_documents(path, meta), zarr_format
    )


def _write_documents(
    store: Store,
    parents: dict[str, bytes],
    docs: dict[str, bytes],
    zarr_format: int,
    new_at: str | None = None,
) -> None:
    """Write ``parents`` then ``docs``; with ``new_at`` (the path of a node created without
    overwrite), the node's first document only where none is stored, on stores with conditional
    writes: of two writers creating one node at once, one gets NodeExistsError instead of both
    going on (and writing their data into one array under the other's metadata)."""
    if parents:
        store.set_many(parents)
        store.barrier()  # a node is never kept (power loss) without the groups above it
    exclusive = new_at is not None and store.supports_conditional_writes
    for key, doc in docs.items():  # in order: a v2 node's .zattrs before its .zarray/.zgroup
        if exclusive:
            exclusive = False
            if not store.set_if(key, doc, None):
                raise NodeExistsError(
                    f"a node already exists at {new_at or '/'!r} in {store!r}: another writer created "
                    f"{key!r} meanwhile (use overwrite=True or mode='w')"
                )
            continue
        store.set(key, doc)
    if zarr_format == 2:
        refresh_v2_consolidated(store, {**parents, **docs}, rebuild=False)
    store.barrier()  # kept once the creation returns (``durable``)


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


def check_zarr_format(zarr_format: Any) -> None:
    """Refuse a ``zarr_format`` other than 2 or 3."""
    if isinstance(zarr_format, bool) or zarr_format not in (2, 3):
        raise ArgumentError(f"zarr_format must be 2 or 3, got {zarr_format!r}")


#: What each codec argument of a v2 array may name (numcodecs ids pass as ``numcodecs.<id>``).
_V2_CODECS = {
    "compressors": ("blosc", "zstd", "gzip"),
    "filters": ("blosc", "zstd", "gzip"),
    "serializer": ("auto", "bytes", "vlen-utf8", "vlen-bytes"),
    "codecs": ("transpose", "bytes", "vlen-utf8", "vlen-bytes", "blosc", "zstd", "gzip"),
}


def _check_v2_codecs(field: str, value: Any) -> None:
    """Refuse, naming the argument, a codec that Zarr v2 cannot express."""
    if value is None or (isinstance(value, str) and value == "auto"):
        return
    items = list(value) if isinstance(value, list | tuple) else [value]
    for item in items:
        codec = coerce_codec(item)
        name = (
            codec if isinstance(codec, str) else codec.get("name") if isinstance(codec, dict) else codec.name
        )
        if not (isinstance(name, str) and (name in _V2_CODECS[field] or name.startswith("numcodecs."))):
            raise CodecError(
                f"{field}: codec {name!r} has no Zarr v2 form (zarr_format=2 takes numcodecs codecs, "
                f"and {', '.join(_V2_CODECS[field])})"
            )


def v2_array_metadata(
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
    order: str = "C",
    dimension_separator: str | None = None,
    path: str = "",
    shard_index: dict | None = None,
) -> ArrayMetadata:
    """Validated metadata of a new Zarr v2 array (pure): the arguments of ``array_metadata``
    turned into a ``.zarray`` (``fill_value=None``: v2's "no fill value"; ``dimension_names``
    become xarray's ``_ARRAY_DIMENSIONS`` attribute; ``dimension_separator`` "." by default, or
    the ``separator`` of a ``v2`` ``chunk_key_encoding``), read back as a reader will see it."""
    if shards is not None or shard_index is not None:
        given = "shards" if shards is not None else "shard_index"
        raise CodecError(f"{given}: Zarr v2 has no sharding (zarr_format=2 takes shards=None)")
    for field, value in (("compressors", compressors), ("filters", filters), ("serializer", serializer)):
        _check_v2_codecs(field, value)
    if codecs is not None:
        _check_v2_codecs("codecs", list(codecs))
    if order not in ("C", "F"):
        raise ArgumentError(f"order must be 'C' or 'F', got {order!r}")
    separator = dimension_separator
    if chunk_key_encoding is not None:
        encoding = chunk_key_encoding
        if isinstance(encoding, dict) and "separator" in encoding:
            encoding = {
                "name": encoding.get("name", "default"),
                "configuration": {"separator": encoding["separator"]},
            }
        encoding = parse_chunk_key_encoding(encoding) if isinstance(encoding, str | dict) else encoding
        if encoding.name != "v2":
            raise ArgumentError(
                f"chunk_key_encoding: Zarr v2 arrays use the 'v2' key encoding, got {encoding.name!r}"
            )
        if separator is not None and separator != encoding.separator:
            raise ArgumentError(
                f"dimension_separator {separator!r} differs from chunk_key_encoding's {encoding.separator!r}"
            )
        separator = encoding.separator
    separator = separator or "."
    if separator not in (".", "/"):
        raise ArgumentError(f"dimension_separator must be '.' or '/', got {separator!r}")
    attrs = dict(attributes or {})
    if dimension_names is not None:
        names = list(dimension_names)
        if any(not isinstance(n, str) for n in names):
            raise ArgumentError(
                f"dimension_names: Zarr v2 (_ARRAY_DIMENSIONS) needs a name for every axis, got {names}"
            )
        attrs["_ARRAY_DIMENSIONS"] = names
    meta3 = array_metadata(
        shape=shape,
        dtype=dtype,
        chunks=chunks,
        codecs=codecs,
        compressors=compressors,
        filters=filters,
        serializer=serializer,
        fill_value=fill_value,
        chunk_key_encoding={"name": "v2", "configuration": {"separator": separator}},
        dimension_names=dimension_names,
        attributes=attrs,
        path=path,
    )
    zarray = zarray_document(  # fill_value=None: v2's "no fill value"; ...: meta3's, encoded
        meta3,
        order=order,
        fill_value=None if fill_value is None else ...,
        field="codecs" if codecs is not None else None,
    )
    return to_v2_metadata(zarray, meta3.attributes, path)


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
    zarr_format: int = 3,
    order: str = "C",
    dimension_separator: str | None = None,
) -> Array:
    """Create an array and write its ``zarr.json`` (and any missing parent groups).

    ``chunks`` is the read chunk (the inner chunk when ``shards`` is given). With a full
    ``codecs`` chain, ``chunks`` is the chunk grid's shape and ``shards`` must be None.
    ``zarr_format=2`` writes a ``.zarray`` and ``.zattrs`` instead (``v2_array_metadata``).
    """
    path = validate_new_node_path(normalize_path(path))
    check_zarr_format(zarr_format)
    if zarr_format == 2:
        meta = v2_array_metadata(
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
            dimension_names=dimension_names,
            attributes=attributes,
            order=order,
            dimension_separator=dimension_separator,
            path=path,
            shard_index=shard_index,
        )
        store = _resolve_store(store, "w" if overwrite else "a", storage_options)
        _write_new_node(store, path, meta, overwrite)
        return Array(store, path, meta, write_empty_chunks=write_empty_chunks)
    if order != "C" or dimension_separator is not None:
        given = "order" if order != "C" else "dimension_separator"
        raise ArgumentError(
            f"{given} is a Zarr v2 setting (zarr_format=2); v3 arrays take codecs and chunk_key_encoding"
        )
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
    _write_new_node(store, path, meta, overwrite)
    return Array(store, path, meta, write_empty_chunks=write_empty_chunks)


def create_group(
    store: Any,
    path: str = "",
    *,
    attributes: dict | None = None,
    overwrite: bool = False,
    storage_options: dict | None = None,
    zarr_format: int = 3,
) -> Group:
    """Create a group and write its ``zarr.json`` (and any missing parent groups); with
    ``zarr_format=2`` its ``.zgroup`` and ``.zattrs``."""
    path = validate_new_node_path(normalize_path(path))
    store = _resolve_store(store, "w" if overwrite else "a", storage_options)
    check_zarr_format(zarr_format)
    meta = (
        GroupMetadata(attributes=dict(attributes or {}))
        if zarr_format == 3
        else v2_group_metadata(dict(attributes or {}), path)
    )
    to_bytes(meta)  # validates the attributes before anything is written
    _write_new_node(store, path, meta, overwrite)
    return Group(store, path, meta)


def open_group(
    store: Any = None,
    path: str = "",
    mode: str = "a",
    *,
    storage_options: dict | None = None,
    use_consolidated: bool | None = None,
    attributes: dict | None = None,
    zarr_format: int | None = None,
) -> Group:
    """Open (or with modes ``a``/``w``/``w-`` create) the group at ``path``.

    ``use_consolidated``: None uses consolidated metadata when present, True requires it,
    False ignores it. ``zarr_format``: of a group created here (3 when None); an existing
    group of another format is refused (``ZarrV2Error``).
    """
    _check_mode(mode)
    if zarr_format is not None:
        check_zarr_format(zarr_format)
    path = normalize_path(path)
    store = _resolve_store(store if store is not None else {}, mode, storage_options)
    return wait_for_commits(
        store, lambda: _open_group(store, path, mode, use_consolidated, attributes, zarr_format)
    )


def _open_group(
    store: Store,
    path: str,
    mode: str,
    use_consolidated: bool | None,
    attributes: dict | None,
    zarr_format: int | None,
) -> Group:
    fmt = zarr_format or 3
    if mode in ("w", "w-"):
        return create_group(store, path, attributes=attributes, overwrite=mode == "w", zarr_format=fmt)
    try:
        group = open_existing_group(store, path, read_only=mode == "r", use_consolidated=use_consolidated)
    except GroupNotFoundError:
        if mode != "a" or read_node_metadata(store, path) is not None:
            raise
        return create_group(store, path, attributes=attributes, zarr_format=fmt)
    if zarr_format is not None and not group.implicit and group.zarr_format != zarr_format:
        raise ZarrV2Error(
            f"zarr_format={zarr_format} was given, but group {path or '/'!r} in {store!r} is "
            f"Zarr v{group.zarr_format}"
        )
    return group


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
    (waiting for other writers' commits to land; their markers are kept); for a Zarr v2 group,
    every descendant's v2 documents into its ``.zmetadata``."""
    path = normalize_path(path)
    store = _resolve_store(store, "r+", storage_options)

    def build() -> GroupMetadata | None:
        group = open_existing_group(store, path, read_only=False, use_consolidated=False)
        return None if group.zarr_format == 2 else consolidated(group)

    meta = wait_for_commits(store, build)
    if meta is None:  # a v2 group: its .zmetadata, in zarr-python's form
        zmetadata = consolidated_v2(store, path)
        assert zmetadata is not None
        store.set(join_path(path, CONSOLIDATED_KEY), zmetadata)
        store.barrier()
        return open_existing_group(store, path, read_only=False, use_consolidated=None)

    put_members = members_table_into(to_bytes(meta), path)

    def with_members(old: bytes | None) -> bytes:
        # the members' table on the group as stored now: an attribute another writer set on the
        # group while the members were read is kept
        if old is None:
            return to_bytes(meta)
        if not isinstance(parse_node(old, path), GroupMetadata):
            raise GroupNotFoundError(f"{path or '/'!r} is no longer a group")
        return put_members(old)

    written = update_document(store, metadata_key(path), with_members)
    assert written is not None  # with_members always makes a document
    return Group(store, path, parse_node(written, path))


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
