"""``zarr3 copy``: any store to any store (a Zarr v2 source too), with rechunking and
resharding, in parallel with dask, resumable; the destination is Zarr v3, or with
``--zarr-format 2`` Zarr v2 (unsharded: a sharded source's inner chunks become the chunks).

One dask task per destination storage unit (shard, or chunk when unsharded): the source is read
through ``zarr3_backend.dask.from_array`` in blocks that are exactly the destination's units,
so no two tasks touch one destination object and no lock is needed, on threads or a cluster.
Resuming: a task whose destination unit already exists reads it back and compares it with the
source block; equal units are skipped, missing, unreadable or different ones are (re)written.
The documents of the nodes a copy creates are written after all the data (the root's last): an
interrupted copy leaves no array that opens with holes where the source has values.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import click
import dask.array as da
import numpy as np

from ..codecs.chain import split_by_kind
from ..codecs.fill import is_fill
from ..codecs.registry import codec_from_json
from ..core.api import (
    create_array,
    create_group,
    missing_parent_documents,
    open_array,
    open_node,
    write_node_documents,
)
from ..core.array import Array
from ..core.commit import Transaction, holding_groups_above, wait_for_commits
from ..core.group import Group, read_node_metadata
from ..core.info import array_info
from ..core.metadata import ArrayMetadata, GroupMetadata
from ..core.metadata_v2 import GROUP_KEY, v2_fill_value_is_null
from ..core.metadata_v2_store import store_node_metadata
from ..core.metadata_v2_write import is_v2
from ..core.paths import join_path, join_prefix, metadata_key, normalize_path
from ..dask import compute_with_progress, from_array
from ..errors import ArgumentError, CodecError, NodeExistsError, Zarr3Error
from ..xarray.encoding import decode_fill_value_attr
from ._common import emit_json, json_option, store_for, typed_errors
from .migrate import standard_codec

#: what a copy task reports for its unit: stored, already stored with these values, or all
#: fill value (nothing to store)
WRITTEN, SKIPPED, EMPTY = 1, 0, 2


class CopyArgumentError(ArgumentError):
    """A ``zarr3 copy`` option does not fit the arrays copied (names the option and array)."""


@dataclass(frozen=True)
class Layout:
    """The destination layout of one array: read chunks, shards and the (inner) codec chain
    split as ``create_array`` takes it."""

    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None
    filters: tuple[dict, ...]
    serializer: dict
    compressors: tuple[dict, ...]
    zarr_format: int = 3
    order: str = "C"  # v2: "F" when the source's chain starts with an axis-reversing transpose


def split_codecs(codecs: Sequence[Any], option: str = "--codecs") -> tuple[tuple, dict, tuple]:
    """``(filters, serializer, compressors)`` of a codec chain given as JSON objects, each codec
    checked and normalised; a chain out of order, with no or two array -> bytes codecs, raises
    ``CopyArgumentError`` naming ``option`` and the codec (``codecs.chain.split_by_kind`` owns
    the order rule)."""
    try:
        aa, ab, bb = split_by_kind([codec_from_json(c) for c in codecs])
    except CodecError as e:
        raise CopyArgumentError(f"{option}: {e}") from e
    return tuple(c.to_json() for c in aa), ab.to_json(), tuple(c.to_json() for c in bb)


def _shape_option(value: str | None, option: str) -> tuple[int, ...] | str | None:
    if value is None:
        return None
    if value.lower() == "none":
        return "none"
    try:
        shape = tuple(int(v) for v in value.split(","))
    except ValueError:
        raise CopyArgumentError(
            f"{option}: expected comma-separated integers or 'none', got {value!r}"
        ) from None
    if any(n <= 0 for n in shape):
        raise CopyArgumentError(f"{option}: sizes must be positive, got {value!r}")
    return shape


def destination_layout(
    src: Array,
    chunks: Any = None,
    shards: Any = None,
    codecs: Sequence[Any] | None = None,
    zarr_format: int = 3,
) -> Layout:
    """The source's layout with the options applied: ``chunks``/``shards`` tuples (``"none"``
    unshards), ``codecs`` the chain of each (inner) chunk. For a v3 destination a Zarr v2
    source's numcodecs compressors become the standard v3 codecs where they write the same
    bytes; a v2 destination is unsharded (``--shards`` is refused) and keeps numcodecs codecs."""
    info = array_info(src)
    if zarr_format == 2:
        if isinstance(shards, tuple):
            raise CopyArgumentError(f"--shards: Zarr v2 has no sharding (--zarr-format 2), got {shards}")
        shards = "none"
    for option, value in (("--chunks", chunks), ("--shards", shards)):
        if isinstance(value, tuple) and len(value) != src.ndim:
            raise CopyArgumentError(
                f"{option} {value} has {len(value)} dimensions, array {src.path or '/'!r} has {src.ndim}"
            )
    new_chunks = chunks if isinstance(chunks, tuple) else info.chunk_shape
    if shards == "none":
        new_shards = None
    elif isinstance(shards, tuple):
        new_shards = shards
    elif isinstance(chunks, tuple) and info.shard_shape is not None:
        # rechunked inside the source's shards: keep whole inner chunks per shard
        new_shards = tuple(max(s // c, 1) * c for s, c in zip(info.shard_shape, chunks, strict=True))
    else:
        new_shards = info.shard_shape
    if codecs is not None:
        filters, serializer, compressors = split_codecs(codecs)
    elif zarr_format == 2:
        filters, serializer, compressors = tuple(info.filters), dict(info.serializer), tuple(info.compressors)
    else:
        where = src.path or "/"
        filters = tuple(standard_codec(c, where) for c in info.filters)
        serializer = dict(info.serializer)
        compressors = tuple(standard_codec(c, where) for c in info.compressors)
    order = "C"
    reverse = list(range(src.ndim))[::-1]
    if zarr_format == 2 and filters and filters[0].get("name") == "transpose":
        if list((filters[0].get("configuration") or {}).get("order", ())) == reverse:
            filters, order = filters[1:], "F"  # v2's order F (one dimension: no transpose at all)
    return Layout(tuple(new_chunks), new_shards, filters, serializer, compressors, zarr_format, order)


def _attributes(src: Array | Group) -> dict:
    attrs = dict(src.metadata.attributes)
    dims = src.dimension_names if isinstance(src, Array) else None
    if dims is not None and attrs.get("_ARRAY_DIMENSIONS") == list(dims):
        attrs.pop("_ARRAY_DIMENSIONS")  # a v2 source's dimension names are in dimension_names
    return attrs


def _v2_fill_value(src: Array, attrs: dict) -> Any:
    """The v2 ``fill_value`` of a v3 source array, with xarray's meaning (v2 readers mask it):
    its CF ``_FillValue`` attribute (then dropped from ``attrs``), else NaN for a float array
    filled with NaN, else none (v2's null: every chunk is stored, nothing masked)."""
    if "_FillValue" in attrs:
        return decode_fill_value_attr(
            attrs.pop("_FillValue"), src.dtype, where=f"{src.path or '/'}: _FillValue"
        )
    value = src.fill_value
    if src.dtype.kind in "fc" and np.isnan(value).any():
        return value
    return None


@dataclass
class Destination:
    """One destination array: ``fresh`` when no unit is stored under it (none is looked for),
    ``pending`` when its documents are still to be written (after its data), ``replace`` when
    an old node at its path is to be erased first (``--overwrite``; ``clear_destination``,
    once every destination is checked)."""

    array: Array
    fresh: bool
    pending: bool
    replace: bool = False


def prepare_destination(
    src: Array, dst_store: Any, path: str, layout: Layout, overwrite: bool
) -> Destination:
    """The destination array: opened when an earlier copy finished it with this layout, else
    made in memory, its documents written by ``publish`` once its data is in place (an
    interrupted copy never leaves an array that reads as whole with holes where the source has
    values; units a killed copy stored are compared, not rewritten, when it is run again)."""
    v2 = layout.zarr_format == 2
    dims = src.dimension_names
    if v2 and dims is not None and any(d is None for d in dims):
        dims = None  # v2's _ARRAY_DIMENSIONS names every axis or none
    attrs = _attributes(src)
    fill = src.fill_value
    if v2 and src.zarr_format == 2:
        fill = None if v2_fill_value_is_null(src.metadata) else fill
    elif v2:
        fill = _v2_fill_value(src, attrs)
    kwargs = {
        "shape": src.shape,
        "dtype": src.dtype if src.dtype.kind not in "OT" else src.metadata.data_type.to_json(),
        "chunks": layout.chunks,
        "shards": layout.shards,
        "filters": list(layout.filters) or None,
        "serializer": layout.serializer,
        "compressors": list(layout.compressors) or None,
        "fill_value": fill,
        "dimension_names": dims,
        "attributes": attrs,
    }
    if v2:
        kwargs.update(zarr_format=2, order=layout.order)
        del kwargs["shards"]
    wanted = create_array({}, "x", **kwargs).metadata  # the document, made (and checked) in memory
    found = _stored_node(dst_store, path)
    if isinstance(found, ArrayMetadata) and found.to_json() == wanted.to_json():
        return Destination(open_array(dst_store, path, mode="r+"), fresh=False, pending=False)
    if found is not None and not overwrite:
        raise NodeExistsError(
            f"destination {path or '/'!r} exists and is not this array with this layout and "
            "attributes (pass --overwrite to replace it)"
        )
    missing_parent_documents(dst_store, path, layout.zarr_format)  # refuses a bad place before any write
    if found is not None:  # erased by clear_destination, once every destination is checked
        return Destination(Array(dst_store, path, wanted), fresh=True, pending=True, replace=True)
    fresh = next(iter(dst_store.list_prefix(join_prefix(path))), None) is None
    return Destination(Array(dst_store, path, wanted), fresh=fresh, pending=True)


def clear_destination(dst_store: Any, d: Destination) -> Destination:
    """Erase the old node a ``replace`` destination takes the place of (the node and its data
    at once); the destination is then fresh."""
    if not d.replace:
        return d
    path = d.array.path
    with Transaction(dst_store, guard=(path,), erase_prefixes=[join_prefix(path)]) as txn:
        txn.commit()
    fresh = next(iter(dst_store.list_prefix(join_prefix(path))), None) is None
    return Destination(d.array, fresh=fresh, pending=True)


def _stored_node(store: Any, path: str) -> ArrayMetadata | GroupMetadata | bool | None:
    """The metadata of the node stored at ``path``, ``None`` when there is none, ``True`` when
    its documents cannot be read (something is there)."""
    try:
        return wait_for_commits(store, lambda: read_node_metadata(store, path, use_consolidated=False))
    except Zarr3Error:
        return True


def _group_to_write(found: Any, wanted: GroupMetadata, path: str, overwrite: bool) -> bool:
    """Whether the destination group at ``path`` needs ``wanted`` written (none there, or with
    ``overwrite`` one of other attributes, its members kept); a group already there as wanted is
    kept, another node refused (``NodeExistsError``), before anything is written."""
    if found is None:
        return True
    if not isinstance(found, GroupMetadata):
        raise NodeExistsError(f"destination {path or '/'!r} exists and is not a group (the source's is)")
    same_format = is_v2(found) == is_v2(wanted)
    same = json.dumps(found.attributes, sort_keys=True, default=str) == json.dumps(
        wanted.attributes, sort_keys=True, default=str
    )
    if same_format and same:
        return False
    if not overwrite:
        raise NodeExistsError(
            f"destination group {path or '/'!r} exists with other attributes or another Zarr format "
            "(pass --overwrite to replace its attributes)"
        )
    return True


def publish(store: Any, root: str, nodes: dict[str, ArrayMetadata | GroupMetadata]) -> None:
    """Write the documents of the copied nodes (paths below ``root``, and ``root``) once all
    their data is in place: the nodes below first, nearest the root first, ``root`` last (with
    any missing parent groups), so the destination is found only when it is whole."""
    for path in sorted((p for p in nodes if p != root), key=lambda p: (p.count("/"), p)):
        store_node_metadata(store, path, nodes[path])
    if root in nodes:
        write_node_documents(store, root, nodes[root])


def _copy_unit(block: np.ndarray, dst: Array, fresh: bool, block_info: dict | None = None) -> np.ndarray:
    """Write one destination unit, unless it is already stored with these values (never, in a
    ``fresh`` destination: no request is spent asking)."""
    info = block_info[0]  # type: ignore[index]
    region = tuple(slice(a, b) for a, b in info["array-location"])
    coords = tuple(info["chunk-location"])
    key = join_path(dst.path, dst.metadata.chunk_key_encoding.encode_chunk_key(coords))
    if fresh or not dst.store.exists(key):
        if not dst.write_empty_chunks and is_fill(block, dst.fill_value):
            return np.full((1,) * block.ndim, EMPTY, dtype=np.int8)
    else:
        try:
            stored = dst.get_region(region)
        except Exception:  # unreadable (torn, corrupt): rewrite it
            stored = None
        if stored is not None and np.array_equal(stored, block, equal_nan=block.dtype.kind in "fc"):
            return np.full((1,) * block.ndim, SKIPPED, dtype=np.int8)
    dst.set_region(region, block)
    return np.full((1,) * block.ndim, WRITTEN, dtype=np.int8)


def copy_graph(src: Array, dst: Array, fresh: bool = False) -> da.Array:
    """A dask array of per-unit statuses whose computation copies ``src`` into ``dst`` (``fresh``:
    ``dst`` holds no unit yet, so none is looked for)."""
    blocks = from_array(src, chunks=dst.storage_chunks)
    return da.map_blocks(
        _copy_unit,
        blocks,
        dst,
        fresh,
        name="zarr3-copy-" + uuid.uuid4().hex,
        dtype=np.int8,
        chunks=tuple((1,) * len(c) for c in blocks.chunks),
        meta=np.empty((0,) * src.ndim, dtype=np.int8),
    )


@dataclass(frozen=True)
class CopyResult:
    """What one array's copy did."""

    path: str
    units: int
    written: int
    skipped: int
    empty: int = 0


def _same_location(src_store: Any, dst_store: Any, src_location: str, dst_location: str) -> bool:
    """Whether the source and destination are one store (its data, or its URL as given): each
    destination array is then its source array."""
    return src_store.data_identity == dst_store.data_identity or (
        src_location.rstrip("/") == dst_location.rstrip("/")
    )


def copy_hierarchy(
    src_location: str,
    dst_location: str,
    path: str = "",
    *,
    chunks: Any = None,
    shards: Any = None,
    codecs: Sequence[Any] | None = None,
    overwrite: bool = False,
    progress: bool = False,
    scheduler: str | None = None,
    zarr_format: int = 3,
) -> list[CopyResult]:
    """Copy the node at ``path`` (and everything below it) from one store to another, written
    as Zarr ``zarr_format``; every array is copied by one dask computation (all arrays
    together)."""
    src_store = store_for(src_location, "r")
    dst_store = store_for(dst_location, "a")
    root = open_node(src_store, path, mode="r")
    if isinstance(root, Array):
        arrays = {"": root}
        groups: dict[str, Group] = {}
    else:
        members = root.members(max_depth=None)
        arrays = {rel: m for rel, m in members.items() if isinstance(m, Array)}
        groups = {"": root, **{rel: m for rel, m in members.items() if isinstance(m, Group)}}
    dst_root = normalize_path(path)
    # every layout is checked before anything is written
    layouts = {rel: destination_layout(a, chunks, shards, codecs, zarr_format) for rel, a in arrays.items()}
    documents: dict[str, ArrayMetadata | GroupMetadata] = {}  # written after all the data
    for rel, g in groups.items():  # a group already there with these attributes (a resumed copy) is kept
        where = join_path(dst_root, rel)
        wanted = create_group({}, "x", attributes=_attributes(g), zarr_format=zarr_format).metadata
        if _group_to_write(_stored_node(dst_store, where), wanted, where, overwrite):
            documents[where] = wanted
    plans = []
    # every destination is checked (and refused) before an old array is erased (--overwrite)
    prepared = {
        rel: prepare_destination(a, dst_store, join_path(dst_root, rel), layouts[rel], overwrite)
        for rel, a in arrays.items()
    }
    replaced = [d.array.path for d in prepared.values() if d.replace]
    if replaced and _same_location(src_store, dst_store, src_location, dst_location):
        raise CopyArgumentError(
            f"--overwrite: the destination is the source ({dst_location!r}): replacing "
            f"{replaced[0] or '/'!r} would erase the data it is copied from; copy to another "
            "location"
        )
    for rel, a in arrays.items():
        d = clear_destination(dst_store, prepared[rel])
        plans.append((rel, a, d.array, d.fresh))
        if d.pending:
            documents[d.array.path] = d.array.metadata
    # the groups above what this copy publishes held shared from its first unit to its last
    # document: an erase of one of them does not take the units before the documents land
    held = [metadata_key(p) if zarr_format == 3 else join_path(p, GROUP_KEY) for p in documents]
    with holding_groups_above(dst_store, held):
        return _copy_and_publish(plans, documents, dst_store, dst_root, progress, scheduler)


def _copy_and_publish(
    plans: list[Any],
    documents: dict[str, ArrayMetadata | GroupMetadata],
    dst_store: Any,
    dst_root: str,
    progress: bool,
    scheduler: str | None,
) -> list[CopyResult]:
    """The data of ``plans`` copied, then the ``documents`` published."""
    graphs = []
    for _rel, a, dst, fresh in plans:
        if a.ndim == 0:
            dst[...] = a[...]
            graphs.append(None)
        elif a.size == 0:  # no unit at all (dask would still make empty blocks of it)
            graphs.append(None)
        else:
            graphs.append(copy_graph(a, dst, fresh))
    lazy = [g for g in graphs if g is not None]
    client_cm: Any = nullcontext()
    kwargs: dict[str, Any] = {}
    if scheduler is not None and "://" in scheduler:
        from distributed import Client

        client_cm = Client(scheduler)
    elif scheduler is not None:
        kwargs["scheduler"] = scheduler
    with client_cm:
        statuses = list(compute_with_progress(*lazy, progress=progress, **kwargs)) if lazy else []
    publish(dst_store, dst_root, documents)
    results = []
    for (rel, _src, dst, _fresh), g in zip(plans, graphs, strict=True):
        if g is None:
            n = 1 if dst.ndim == 0 else 0
            results.append(CopyResult(join_path(dst_root, rel), n, n, 0))
            continue
        st = np.asarray(statuses.pop(0))
        results.append(
            CopyResult(
                dst.path,
                int(st.size),
                int((st == WRITTEN).sum()),
                int((st == SKIPPED).sum()),
                int((st == EMPTY).sum()),
            )
        )
        dst.invalidate_cache()
    return results


@click.command("copy")
@click.argument("src")
@click.argument("dst")
@click.option("--path", "node_path", default="", help="Copy only this node (and what is below it).")
@click.option("--chunks", default=None, help="Read (inner) chunk shape of every array, e.g. 100,100.")
@click.option("--shards", default=None, help="Shard shape, e.g. 1000,1000; 'none' writes unsharded.")
@click.option(
    "--codecs",
    default=None,
    help='Codec chain of each (inner) chunk as JSON, e.g. \'[{"name":"bytes"},{"name":"zstd"}]\'.',
)
@click.option(
    "--scheduler",
    default=None,
    help="dask scheduler: threads (default), processes, synchronous, or a distributed address tcp://host:port.",
)
@click.option("--overwrite", is_flag=True, help="Replace destination arrays that exist with another layout.")
@click.option(
    "--zarr-format",
    "zarr_format",
    type=click.Choice(["2", "3"]),
    default="3",
    help="Write Zarr v3 (default) or v2 (.zarray/.zattrs; unsharded, numcodecs codecs).",
)
@click.option(
    "--progress/--no-progress", default=None, help="Progress bar (default: when stderr is a terminal)."
)
@json_option
@typed_errors
def copy(
    src: str,
    dst: str,
    node_path: str,
    chunks: str | None,
    shards: str | None,
    codecs: str | None,
    scheduler: str | None,
    overwrite: bool,
    zarr_format: str,
    progress: bool | None,
    as_json: bool,
) -> None:
    """Copy the hierarchy at SRC to DST (any stores; v2 or v3 SRC, written as v3, or as v2
    with --zarr-format 2).

    Arrays keep their shape, data type, fill value, dimension names and attributes; their
    chunks, shards and codecs are the source's unless --chunks/--shards/--codecs say
    otherwise. One dask task per destination shard (chunk when unsharded), on local threads
    or a distributed scheduler.

    Resumable: rerun the same command after an interruption. A node's metadata is written
    only once all the data is copied, so an interrupted copy is not found as a store (or shows
    only whole arrays). The destination arrays are reused when their layout matches; every
    destination unit that already exists is read back and compared with the source, and only
    missing, unreadable or different units are written ("skipped" counts the rest; "empty"
    counts units holding only the fill value, which are not stored).
    """
    try:
        chain = None if codecs is None else json.loads(codecs)
    except ValueError as e:
        raise CopyArgumentError(f"--codecs: not JSON: {e}") from e
    if chain is not None and not isinstance(chain, list):
        raise CopyArgumentError(f"--codecs: expected a JSON list of codecs, got {codecs!r}")
    if chunks is not None and chunks.lower() == "none":
        raise CopyArgumentError("--chunks: give a chunk shape ('none' is for --shards)")
    show = sys.stderr.isatty() if progress is None else progress
    results = copy_hierarchy(
        src,
        dst,
        node_path,
        chunks=_shape_option(chunks, "--chunks"),
        shards=_shape_option(shards, "--shards"),
        codecs=chain,
        overwrite=overwrite,
        progress=show and not as_json,
        scheduler=scheduler,
        zarr_format=int(zarr_format),
    )
    if as_json:
        emit_json([r.__dict__ for r in results])
        return
    for r in results:
        click.echo(
            f"{r.path or '/'}: {r.units} unit(s), {r.written} written, {r.skipped} skipped "
            f"(already there), {r.empty} empty (fill value only)"
        )
