"""The write plan: what each variable writes where, and the documents committed afterwards.

Pure: it reads what the store holds but writes nothing."""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import numpy as np
import xarray as xr
from xarray import conventions
from xarray.core.variable import Variable

from ..core.api import array_metadata, missing_parent_documents, refuse_inside_v2, v2_array_metadata
from ..core.array import Array
from ..core.group import Group
from ..core.metadata import GroupMetadata, to_bytes
from ..core.metadata_v2 import ARRAY_KEY, GROUP_KEY
from ..core.metadata_v2_store import shape_documents
from ..core.metadata_v2_write import node_documents, v2_group_metadata
from ..core.paths import join_path, metadata_key, node_name
from ..core.txn_records import parse_doc
from ..dask.alignment import check_deferred_edges, check_region_edges, storage_units
from ..dask.write import plan_chunks
from ..errors import (
    ArgumentError,
    ArgumentTypeError,
    ChunkAlignmentError,
    MetadataError,
    NodeAddedError,
    NodeExistsError,
    ShapeError,
    Zarr3Error,
    ZarrV2Error,
)
from ..stores.base import Store
from .cf_encode import decode_stored, encode_like_stored, encode_variable, stored_attributes
from .encoding import encode_attr_value, stored_names
from .layout import creation_kwargs, layout_origin


def stored_dimension_names(a: Array) -> tuple[str, ...] | None:
    """The dimension names stored for ``a``, as the reader takes them (``encoding.stored_names``:
    ``dimension_names``, axis by axis else ``_ARRAY_DIMENSIONS``), or None when some axis has
    none: the rule for matching stored arrays to dataset dimensions."""
    names = stored_names(a.path or "/", a.ndim, a.dimension_names, a.metadata.attributes)
    return None if any(n is None for n in names) else tuple(names)  # type: ignore[arg-type]


def _array_dims(a: Array) -> tuple[str, ...]:
    dims = stored_dimension_names(a)
    if dims is None:
        raise ArgumentError(f"array {a.path!r} has no dimension names; cannot match it to dataset dimensions")
    return dims


def check_append_lengths(arrays: Mapping[str, Array], append_dim: Hashable) -> None:
    """Refuse to append to a store whose arrays disagree on the length of ``append_dim``
    (left by an interrupted append of an older version, or another writer): ``ShapeError``
    naming every array along it and its length."""
    lengths = {}
    for name, a in arrays.items():
        names = stored_dimension_names(a) or ()
        if append_dim in names:
            lengths[name] = a.shape[list(names).index(append_dim)]
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{n!r}: {m}" for n, m in sorted(lengths.items()))
        raise ShapeError(
            f"the stored arrays disagree on the length of the append dimension {append_dim!r} ({listed}); "
            "an earlier append did not complete. Nothing was written: repair the store (trim the "
            "longer arrays, or rewrite it with mode='w') before appending"
        )


def _match_dims(
    name: str,
    var: Variable,
    stored_dims: tuple[str, ...],
    stored_shape: tuple[int, ...],
    region: Mapping[str, slice],
    append_dim: Hashable | None,
) -> Variable:
    if var.dims != stored_dims:
        if set(var.dims) != set(stored_dims):
            raise ArgumentError(
                f"variable {name!r} already exists with different dimension names {stored_dims} != "
                f"{var.dims}, but changing variable dimensions is not supported by to_zarr()"
            )
        var = var.transpose(*stored_dims)
    want, got = {}, {}
    for dim, n, m in zip(stored_dims, stored_shape, var.shape, strict=True):
        if dim == append_dim:
            continue
        if dim in region:
            start, stop, _ = region[dim].indices(n)
            n = stop - start
        want[dim], got[dim] = n, m
    if want != got:
        raise ArgumentError(
            f"variable {name!r} already exists with different dimension sizes: {want} (stored) != {got} "
            "(dataset); only append_dim may change a size (use region= to write part of a stored variable)"
        )
    return var


# ---- the plan ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class VariableWrite:
    """One variable's write: encoded data, target array (metadata maybe not yet stored), region."""

    name: str
    variable: Variable
    target: Array
    region: tuple[slice, ...]
    #: the documents committed after the data (new array or shape: its zarr.json, or a v2
    #: array's .zattrs and .zarray); empty when its metadata stays as stored
    documents: dict[str, bytes] = field(default_factory=dict)
    #: an append's claim: the document holding the array's shape -> the shape it grows from
    #: (the commit refuses to move the data when another writer changed it first); an
    #: overwrite of the whole array claims it too, from its stored shape (two overwrites never
    #: interleave their chunks, and one planned before an append or resize is planned again)
    shape_from: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: the stored array's document as read: the commit refuses the write when another writer
    #: replaced the array meanwhile, even by one of the same shape
    planned: dict[str, bytes] = field(default_factory=dict)
    #: the array is new to its group (created by this write)
    new: bool = False

    @property
    def claim_keys(self) -> list[str]:
        """The documents claimed when this write adds the array: the one holding its shape (the
        key appends and overwrites claim too)."""
        return list(shape_documents(self.target.path, self.target.metadata))


@dataclass
class WritePlan:
    """Everything a ``to_zarr`` call will do, decided before its first store write."""

    path: str  # the group written
    writes: list[VariableWrite] = field(default_factory=list)
    attrs: dict[str, Any] | None = None  # group attributes to store (None: leave them)
    erase_prefixes: list[str] = field(default_factory=list)  # the groups mode="w" drops (paths)
    create_group: bool = False  # the group is new (or replaced): its documents are written
    group_metadata: GroupMetadata | None = None  # the group's metadata to store, if it changes
    zarr_format: int = 3  # of the group and every new array (``write_args.choose_zarr_format``)
    #: mode="w-": the group must still be missing when the commit starts (another writer's
    #: "w-" of the same group may have created it since the plan was made)
    refuses_existing: bool = False
    #: mode="a": arrays new to the group may be added by another writer meanwhile (the commit
    #: claims them and the write is planned again over the stored one: ``added_documents``)
    adds_to_stored: bool = False

    def documents(self) -> dict[str, bytes]:
        """The metadata documents committed after the data: each grown or new array's
        (``zarr.json``, or v2's ``.zattrs`` and ``.zarray``), then the group's."""
        docs = {k: v for w in self.writes for k, v in w.documents.items()}
        if self.group_metadata is not None:
            docs.update(node_documents(self.path, self.group_metadata))
        return docs

    def shape_from(self) -> dict[str, tuple[int, ...]]:
        """The shapes the appends and whole overwrites of this plan start from, by the document
        holding each."""
        return {k: v for w in self.writes for k, v in w.shape_from.items()}

    def planned_documents(self) -> dict[str, bytes]:
        """The documents of the stored arrays this plan writes into, as it read them."""
        return {k: v for w in self.writes for k, v in w.planned.items()}

    def must_be_missing(self) -> list[str]:
        """The documents the commit must find missing (``Transaction(create=...)``): the group's
        own, for mode="w-"; of two such writes to one group, the second is refused."""
        if not self.refuses_existing:
            return []
        return [metadata_key(self.path) if self.zarr_format == 3 else join_path(self.path, GROUP_KEY)]

    def added_documents(self) -> list[str]:
        """The documents of the arrays a ``mode="a"`` write adds (``Transaction(add=...)``):
        another writer adding one first makes this write be planned again, as an overwrite of
        the stored array (what running the two one after the other gives), so the array never
        mixes the two writers' chunks."""
        if not self.adds_to_stored:
            return []
        return [k for w in self.writes if w.new for k in w.claim_keys]

    def within(self) -> dict[str, tuple[int, ...]]:
        """The shapes the region writes of stored arrays were planned at, by the document holding
        each (``Transaction(within=...)``: what a shrink committed meanwhile leaves past the new
        end is erased)."""
        return {
            k: w.target.shape for w in self.writes if not w.new and not w.shape_from for k in w.claim_keys
        }

    def new_group_documents(self) -> dict[str, bytes]:
        """The documents of the group as created empty (before ``documents`` adds its own)."""
        empty = GroupMetadata() if self.zarr_format == 3 else v2_group_metadata({}, self.path)
        return node_documents(self.path, empty)

    @property
    def changes_metadata(self) -> bool:
        """Whether the commit changes any document (then consolidated metadata is refreshed)."""
        return self.attrs is not None or any(w.documents for w in self.writes)


def _region_tuple(dims: tuple[str, ...], region: Mapping[str, slice]) -> tuple[slice, ...]:
    return tuple(region.get(d, slice(None)) for d in dims)


def _concrete(region: tuple[slice, ...], shape: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(*s.indices(n)[:2]) for s, n in zip(region, shape, strict=True))


def plan_write(
    ds: xr.Dataset,
    *,
    store: Store,
    path: str,
    mode: str,
    group: Group | None,
    arrays: dict[str, Array],
    encoding: Mapping[str, Any],
    append_dim: Hashable | None,
    region: dict[str, slice],
    safe_chunks: bool,
    align_chunks: bool,
    write_empty_chunks: bool | None,
    compute: bool = True,
    erases: bool = True,
    zarr_format: int = 3,
) -> WritePlan:
    """Validate the write of ``ds`` to the group at ``path`` and plan it (reads, never writes).

    ``erases``: with mode="w", whether this write erases its group (not when an enclosing
    group, such as a tree's root, is erased by another plan). ``zarr_format``: of the group
    and its new arrays (stored arrays keep theirs).
    """
    variables, attrs = conventions.encode_dataset_coordinates(ds)
    for k, enc in encoding.items():
        variables[k].encoding = dict(enc)
    existing_names = [n for n in variables if n in arrays] if mode != "w" else []
    new_names = [n for n in variables if n not in existing_names]

    if mode == "r+" and new_names:
        raise ArgumentError(
            f"dataset contains non-pre-existing variables {new_names}, which is not allowed with "
            "mode='r+' (it only writes variables the store has); use mode='a' to add variables"
        )
    if region and new_names:
        raise ArgumentError(f"a region write needs every variable in the store already; missing: {new_names}")
    if mode in ("a", "a-", "r+"):
        clash = sorted(set(encoding) & set(existing_names))
        if clash:
            raise ArgumentError(
                f"variables {clash} already exist in the store, but encoding was provided for them"
            )
    if append_dim is not None:
        dims = {n: stored_dimension_names(a) or () for n, a in arrays.items()}
        known = {d for names in dims.values() for d in names}
        if append_dim not in known:
            raise ArgumentError(
                f"append_dim={append_dim!r} does not match any existing dataset dimensions {sorted(known)}"
            )
        left_out = [n for n, names in dims.items() if append_dim in names and n not in variables]
        if left_out:
            raise ArgumentError(
                f"stored variables {left_out} have dimension {append_dim!r} but are missing from the dataset to "
                "append; appending without them would leave them shorter than the rest"
            )
        check_append_lengths(arrays, append_dim)
        growing_new = [n for n in new_names if append_dim in variables[n].dims]
        if growing_new:
            raise ArgumentError(
                f"variables {growing_new} are not in the store but have the append dimension {append_dim!r}: "
                f"appended, they would hold only the new {append_dim!r} steps while the stored variables hold "
                f"them all, and the store could no longer be opened. Write them over the whole {append_dim!r} "
                "first (mode='a' without append_dim), or drop them from this append"
            )

    stored = decode_stored(group, arrays, existing_names) if group is not None else {}
    plan = WritePlan(
        path=path,
        attrs={k: encode_attr_value(v) for k, v in attrs.items()} if mode != "r+" else None,
        erase_prefixes=[path] if mode == "w" and erases else [],
        create_group=mode == "w" or group is None,
        zarr_format=zarr_format,
        refuses_existing=mode == "w-",
        adds_to_stored=mode in ("a", "a-"),
    )
    plan.group_metadata = _group_metadata(plan, None if mode == "w" else group)
    for name, var in variables.items():
        if name in existing_names:
            write = _plan_existing(
                name,
                var,
                arrays[name],
                stored[name],
                ds=ds,
                store=store,
                mode=mode,
                append_dim=append_dim,
                region=region,
                write_empty_chunks=write_empty_chunks,
            )
        else:
            write = _plan_new(
                name,
                var,
                store=store,
                path=path,
                user_encoding=name in encoding,
                write_empty_chunks=write_empty_chunks,
                zarr_format=zarr_format,
            )
        if write is None:
            continue
        _check_ownership(
            write,
            region=region,
            compute=compute,
            safe_chunks=safe_chunks,
            align_chunks=align_chunks,
            unit_source=_unit_source(write, encoding.get(name, {}), new=name not in existing_names),
            from_dask=_layout_from_dask(write, encoding.get(name, {}), new=name not in existing_names),
        )
        plan.writes.append(write)
    return plan


def _group_metadata(plan: WritePlan, group: Group | None) -> GroupMetadata | None:
    """The group's new ``zarr.json`` (``None`` when it stays as stored), checked now: it is
    written last, and a bad attribute must not strand written data."""
    if group is not None:
        old = group.metadata
    else:
        old = GroupMetadata() if plan.zarr_format == 3 else v2_group_metadata({}, plan.path)
    if plan.attrs is None or (plan.attrs == dict(old.attributes) and not plan.create_group):
        return None
    check_attributes(plan.attrs, "dataset attributes")
    return GroupMetadata(
        attributes=plan.attrs,
        consolidated_metadata=old.consolidated_metadata,
        extra_fields=old.extra_fields,
    )


def check_attributes(attrs: Mapping[str, Any], label: str) -> None:
    """Refuse attributes ``zarr.json`` cannot hold with ``ArgumentTypeError`` (a ``TypeError``,
    led by xarray's sentence for it), before anything is written."""
    try:
        to_bytes(GroupMetadata(attributes=dict(attrs)))
    except (Zarr3Error, TypeError, ValueError) as e:
        raise ArgumentTypeError(
            f"Invalid attribute in Dataset.attrs. {label} cannot be stored in zarr.json: {e}"
        ) from e


def _unit_source(write: VariableWrite, user_encoding: Mapping[str, Any], *, new: bool) -> str:
    """Where a target's shard (or chunk) shape came from, for error messages."""
    if not new:
        return f"as stored in {metadata_key(write.target.path)!r}"
    enc = user_encoding or write.variable.encoding
    where = f"encoding[{write.name!r}]" if user_encoding else "the variable's encoding"
    full_chain = enc.get("codecs") is not None
    key = "shards" if write.target.shards is not None and not full_chain else "chunks"
    if enc.get(key) is not None:
        return f"from {where}[{key!r}]"
    if key == "chunks" and write.variable.chunks is not None:
        return "from the dask chunks (largest block per axis)"
    return "chosen by default"


def _layout_from_dask(write: VariableWrite, user_encoding: Mapping[str, Any], *, new: bool) -> bool:
    """Whether a new array's chunk shape was taken from its dask chunks (none was given)."""
    enc = user_encoding or write.variable.encoding
    return (
        new and enc.get("chunks") is None and enc.get("codecs") is None and write.variable.chunks is not None
    )


def _xarray_lead(write: VariableWrite, from_dask: bool) -> str:
    """The first sentence xarray's zarr engine gives for the same misalignment (its tests and
    users match on it); ours follows with the details."""
    name = write.name
    if from_dask:
        return (
            "Zarr requires uniform chunk sizes except for final chunk. "
            f"Variable named {name!r} has incompatible dask chunks {write.variable.chunks}."
        )
    key = "shards" if write.target.shards is not None else "chunks"
    shape = write.target.shards if key == "shards" else write.target.chunks
    return (
        f"Specified Zarr {key} encoding[{key!r}]={tuple(shape)} for variable named {name!r} "
        "would overlap multiple Dask chunks."
    )


def _check_ownership(
    write: VariableWrite,
    *,
    region: Mapping[str, slice],
    compute: bool,
    safe_chunks: bool,
    align_chunks: bool,
    unit_source: str,
    from_dask: bool,
) -> None:
    """Prove, before anything is written, that this write owns every shard it touches.

    Dask chunks must not split a shard; a region of dask data (or of any data on a store
    without conditional writes) must not cut a shard a neighbouring writer owns; a deferred
    (``compute=False``) dask write must not share a shard with data outside it, which another
    pending write could rewrite at the same time.
    """
    target, dims = write.target, write.variable.dims
    sharded = target.shards is not None
    lazy = isinstance(write.variable.data, da.Array)
    if lazy:
        try:
            plan_chunks(
                write.variable.data,
                target,
                write.region,
                align_chunks=align_chunks,
                name=write.name,
                dims=dims,
                unit_source=unit_source,
            )
        except ChunkAlignmentError as e:
            raise ChunkAlignmentError(f"{_xarray_lead(write, from_dask)} {e}") from e
    if not safe_chunks:
        return
    # numpy data that cuts a shard is merged into it again at commit when a neighbouring writer
    # changed it meanwhile (a conditional write: write_exec._redo, on regular grids); dask blocks
    # cannot be merged again, so they, and any data on a store without conditional writes or on
    # a rectilinear grid, must own their shards
    merged_again = (
        not lazy and target.store.supports_conditional_writes and target.metadata.chunk_grid.is_regular
    )
    if region and not merged_again:
        own = tuple(
            sl if d in region else slice(0, n)
            for sl, d, n in zip(write.region, dims, target.shape, strict=True)
        )
        check_region_edges(
            own, target.shape, storage_units(target), name=write.name, dims=dims, sharded=sharded
        )
    if lazy and not compute:
        check_deferred_edges(
            write.region, target.shape, storage_units(target), name=write.name, dims=dims, sharded=sharded
        )


def _plan_new(
    name: str,
    var: Variable,
    *,
    store: Store,
    path: str,
    user_encoding: bool,
    write_empty_chunks: bool | None,
    zarr_format: int = 3,
) -> VariableWrite:
    """A new array: CF-encode, build its metadata (held back until the data is written).
    Zarr v2 as xarray's engine writes it: the CF ``_FillValue`` is the ``fill_value`` (not an
    attribute), the dimensions go to ``_ARRAY_DIMENSIONS``."""
    encoded = encode_variable(var, name)
    kwargs = creation_kwargs(
        encoded,
        name,
        user_encoding=user_encoding,
        write_empty_chunks=write_empty_chunks,
        zarr_format=zarr_format,
    )
    wec = kwargs.pop("write_empty_chunks")
    apath = join_path(path, name)
    attributes = stored_attributes(encoded)
    if zarr_format == 2:
        attributes.pop("_FillValue", None)
        kwargs["fill_value"] = encoded.attrs.get("_FillValue")
    check_attributes(attributes, f"variable {name!r}: attributes")
    build = array_metadata if zarr_format == 3 else v2_array_metadata
    try:
        meta = build(**kwargs, dimension_names=encoded.dims, attributes=attributes, path=apath)
        documents = node_documents(apath, meta)  # written after the data, so built (and checked) now
    except Zarr3Error as e:
        origin = layout_origin(encoded, kwargs, user_encoding)
        raise type(e)(f"variable {name!r}: {e}{origin}") from e
    target = Array(store, apath, meta, write_empty_chunks=wec)
    return VariableWrite(
        name, encoded, target, _concrete((slice(None),) * encoded.ndim, target.shape), documents, new=True
    )


def _plan_existing(
    name: str,
    var: Variable,
    a: Array,
    stored: Variable,
    *,
    ds: xr.Dataset,
    store: Store,
    mode: str,
    append_dim: Hashable | None,
    region: Mapping[str, slice],
    write_empty_chunks: bool | None,
) -> VariableWrite | None:
    """A stored array: encode like the store, check dims and sizes, grow it when appending.

    ``None`` when nothing is to be written (``a-`` mode, or an unchanged non-append coordinate).
    """
    dims = _array_dims(a)
    has_append = append_dim is not None and append_dim in dims
    if append_dim is not None and not has_append:
        if mode == "a-" or name in ds.coords:
            # the coordinates label the appended values too: one that differs (other values, or
            # the same in another order) would mislabel them, also with "a-", which never writes it
            if name in ds.coords and (mode != "a-" or name in ds.indexes):
                _check_same_coordinate(name, var, a, stored, dims, f"appending along {append_dim!r}")
            return None  # identical once encoded: nothing to write
    if region and not set(region) & set(dims) and name in ds.indexes:
        _check_same_coordinate(name, var, a, stored, dims, f"a region write along {sorted(region)}")
        return None
    encoded = _match_dims(name, encode_like_stored(var, stored, name), dims, a.shape, region, append_dim)
    wec = a.write_empty_chunks if write_empty_chunks is None else write_empty_chunks
    reg = _region_tuple(dims, region)
    meta, documents, shape_from = a.metadata, {}, {}
    if has_append:
        axis = dims.index(append_dim)
        old = a.shape[axis]
        shape = tuple(old + encoded.shape[axis] if i == axis else n for i, n in enumerate(a.shape))
        meta = a.metadata.evolve(shape=shape)
        # the new shape is stored after the data (v2: .zarray alone)
        documents = shape_documents(a.path, meta)
        shape_from = {key: a.shape for key in shape_documents(a.path, meta)}
        reg = tuple(slice(old, shape[axis]) if i == axis else s for i, s in enumerate(reg))
    elif not region:  # the whole array overwritten: claimed at the shape it was planned from
        shape_from = {key: a.shape for key in shape_documents(a.path, meta)}
    target = Array(store, a.path, meta, write_empty_chunks=wec)
    planned = shape_documents(a.path, a.metadata)  # checked at the commit (a replaced array)
    return VariableWrite(name, encoded, target, _concrete(reg, target.shape), documents, shape_from, planned)


def _check_same_coordinate(
    name: str, var: Variable, a: Array, stored: Variable, dims: tuple[str, ...], write: str
) -> None:
    """Refuse a coordinate the write (``write`` names it) leaves as stored whose values, encoded
    as the store encodes them (its dtype, units, packing), differ from the stored ones: a
    float64 latitude equals a float32 stored one when it rounds to the same float32 values."""
    why = ""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            encoded = encode_like_stored(var, stored, name)
        new = np.asarray(encoded.transpose(*dims).values)
        old = np.asarray(a[...])
        if new.shape != old.shape:
            why = f" (shape {new.shape} against {old.shape})"
            same = False
        elif new.dtype.kind in "fc" and old.dtype.kind in "fc":
            same = bool(np.array_equal(new, old, equal_nan=True))
        else:
            same = bool(np.array_equal(new.astype(object), old.astype(object)))
    except (ValueError, TypeError) as e:
        same, why = False, f" ({e})"
    if not same:
        raise ArgumentError(
            f"coordinate {name!r} differs from the one in the store{why}; {write} needs the other "
            f"coordinates unchanged (the values would be stored under the store's labels: reindex "
            f"the dataset to them first)"
        )


def _array_added(store: Store, path: str, zarr_format: int, found: Sequence[bool]) -> bool:
    """Whether an array of the plan's format is stored now at ``path``, which the plan read as
    missing (``found``: whether its ``zarr.json``, ``.zarray``, ``.zgroup`` exist): another
    writer added the same variable meanwhile (``to_zarr`` plans again, as an overwrite)."""
    if zarr_format == 2:
        return bool(found[1])
    if not found[0]:
        return False
    raw = store.get(metadata_key(path))
    try:
        doc = parse_doc(raw, metadata_key(path)) if raw is not None else {}
    except MetadataError:
        return False  # not a document: refused below as a clash
    return doc.get("node_type") == "array"


def refuse_clashes(store: Store, path: str, plan: WritePlan, arrays: Mapping[str, Array]) -> None:
    """Before anything is written: a v3 group must not lie inside a Zarr v2 hierarchy (a v2
    one not inside a v3 group: ``missing_parent_documents``), and a new array must not land
    where another node is stored (a v3 group, or a v2 node, which v3 listings leave out)."""
    if plan.zarr_format == 3:
        refuse_inside_v2(store, path)
    else:
        missing_parent_documents(store, path, 2)
    new = [w.target.path for w in plan.writes if w.name not in arrays]
    keys = [k for p in new for k in (metadata_key(p), join_path(p, ARRAY_KEY), join_path(p, GROUP_KEY))]
    found = store.exists_many(keys) if keys else []
    for i, p in enumerate(new):
        if _array_added(store, p, plan.zarr_format, found[3 * i : 3 * i + 3]):
            raise NodeAddedError(
                f"variable {node_name(p)!r}: another writer added it since this write was planned; "
                "planned again over it"
            )
        if found[3 * i] or (plan.zarr_format == 2 and found[3 * i + 2]):
            raise NodeExistsError(f"cannot write variable {node_name(p)!r}: a group is stored at {p!r}")
        if found[3 * i + 1] or found[3 * i + 2]:
            raise ZarrV2Error(
                f"cannot write variable {node_name(p)!r}: a Zarr v2 node is stored at {p!r} "
                "(a v3 group does not list it)"
            )
