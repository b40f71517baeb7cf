"""``to_zarr``: write an xarray Dataset (or DataTree) to Zarr v3 with the meaning of xarray's.

The flow, one module per step: arguments (``write_args``) -> regions (``write_region``) -> CF
encoding (``cf_encode``) -> layout of new arrays (``layout``) -> a write plan (``write_plan``:
pure, it only reads what is stored) -> execution and commit (``write_exec``). ``prepare`` is
everything up to the plan; a DataTree (``write_tree``) prepares every node before writing any.

Everything is validated before the first byte is written: names, modes, encodings, attributes,
CF encoding of every variable (appends reuse the stored units, calendar, dtype and packing, and
refuse values those cannot represent), dimension sizes, append lengths, non-append
coordinates, region bounds and the ownership of every shard by exactly one writer (only the
integer range of dask data waits for its task, which checks it before writing its shard; a
failure there aborts the transaction, so the old store is still whole). Then one transaction:
the data staged, then a commit that erases what mode="w" replaces, puts the data in place and
writes every ``zarr.json`` and the consolidated metadata (``compute=False`` commits the metadata
now and returns a Delayed that writes the dask data).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import xarray as xr
from dask.delayed import Delayed

from ..core.commit import root_is_consolidated, wait_for_commits
from ..core.group import Group
from ..core.node_claims import retry_shape_change
from ..core.paths import check_reserved_names, normalize_path
from ..dask.progress import compute_with_progress
from ..stores import make_store
from ..stores.base import Store
from .write_args import (
    as_dataset,
    check_zarr_format,
    checked_encoding,
    choose_mode,
    choose_zarr_format,
    open_existing,
    validate_names,
)
from .write_exec import execute
from .write_plan import WritePlan, plan_write, refuse_clashes
from .write_region import resolve_region
from .write_sources import detach_from_target

__all__ = ["WriteOptions", "prepare", "to_zarr"]


def to_zarr(
    dataset: xr.Dataset | xr.DataArray | xr.DataTree,
    store: Any = None,
    mode: str | None = None,
    group: str | None = None,
    encoding: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    compute: bool = True,
    consolidated: bool | None = None,
    append_dim: Hashable | None = None,
    region: Mapping[str, slice | str] | str | None = None,
    safe_chunks: bool = True,
    align_chunks: bool = False,
    storage_options: dict[str, Any] | None = None,
    zarr_format: int | None = None,
    write_empty_chunks: bool | None = None,
    chunkmanager_store_kwargs: dict[str, Any] | None = None,
    progress: bool = False,
    write_inherited_coords: bool = False,
) -> Group | Delayed:
    """Write ``dataset`` to a Zarr v3 store, as ``xarray.Dataset.to_zarr`` would.

    ``zarr_format=2`` writes Zarr v2 as xarray's engine does with zarr-python (``.zarray``,
    ``.zattrs`` with ``_ARRAY_DIMENSIONS``, the CF ``_FillValue`` as the ``fill_value``,
    ``.zmetadata``); ``None`` writes v3 to a new store and the store's own format to an
    existing one (appends and region writes into v2 stores stay v2).

    Dask variables are written with one task per shard (per chunk when unsharded); dask chunks
    that would split a shard raise ``ChunkAlignmentError`` unless ``align_chunks=True``. A
    ``region`` write (numpy or dask, any mode) must own whole shards, and so must the dask part
    of a ``compute=False`` write (an append starting inside a partly filled shard is refused:
    another pending append could rewrite that shard); ``safe_chunks=False`` lifts these two
    checks when no other write of the arrays runs at the same time, and rechunks dask data that
    would split a shard as ``align_chunks=True`` does (xarray's engine writes it unchecked). Integer-encoded values
    (packing, times) that overflow their dtype raise ``EncodedRangeError``. mode="w" refuses
    dask data read from the group it erases. ``progress=True`` shows a progress bar
    (distributed's when a Client is active). Returns the written Group, or with
    ``compute=False`` a Delayed that writes the dask data.

    An ``xr.DataTree`` is written node by node as ``DataTree.to_zarr`` does (``encoding`` keyed
    by node path; ``write_inherited_coords`` as there), every node validated before the first
    write and the store consolidated once.
    """
    if isinstance(dataset, xr.DataTree):
        from .write_tree import write_tree  # a tree is written node by node through prepare()

        return write_tree(
            dataset,
            store,
            mode,
            group,
            encoding,
            compute=compute,
            consolidated=consolidated,
            append_dim=append_dim,
            region=region,
            safe_chunks=safe_chunks,
            align_chunks=align_chunks,
            storage_options=storage_options,
            zarr_format=zarr_format,
            write_empty_chunks=write_empty_chunks,
            chunkmanager_store_kwargs=chunkmanager_store_kwargs,
            progress=progress,
            write_inherited_coords=write_inherited_coords,
        )
    ds = as_dataset(dataset)
    mode = choose_mode(mode, append_dim, region)
    check_zarr_format(zarr_format)
    zstore = make_store(store if store is not None else {}, mode="a", storage_options=storage_options)
    path = normalize_path(group)
    options = WriteOptions(
        mode, append_dim, region, safe_chunks, align_chunks, write_empty_chunks, compute, zarr_format
    )
    consolidate = (
        bool(consolidated) or (consolidated is None and mode != "r+") or root_is_consolidated(zstore)
    )

    def write() -> Group | Delayed:
        plan = prepare(ds, zstore, path, encoding, options)
        # ---- nothing has been written up to here ----
        return execute(
            [plan],
            zstore,
            path=path,
            consolidate=consolidate,
            compute=compute,
            align_chunks=options.aligns,
            run=runner(progress, chunkmanager_store_kwargs),
        )

    # planned again when another writer changed what the plan read before the commit (which
    # then wrote nothing): an append's array shape, a variable this write adds, or one it
    # overwrites that a replacement of the group dropped
    return retry_shape_change(write, replans_gone=True)


@dataclass(frozen=True)
class WriteOptions:
    """The arguments of ``to_zarr`` that say how each group is written."""

    mode: str
    append_dim: Hashable | None
    region: Any
    safe_chunks: bool
    align_chunks: bool
    write_empty_chunks: bool | None
    compute: bool
    zarr_format: int | None = None  # as given: None follows the store (``choose_zarr_format``)

    @property
    def aligns(self) -> bool:
        """Whether dask blocks that split a shard are rechunked (else refused)."""
        return self.align_chunks or not self.safe_chunks


def prepare(
    ds: xr.Dataset,
    zstore: Store,
    path: str,
    encoding: Mapping[str, Mapping[str, Any]] | None,
    options: WriteOptions,
    *,
    erased_path: str | None = None,
) -> WritePlan:
    """Validate the write of ``ds`` to group ``path`` and plan it; writes nothing. The stored
    documents it reads may carry a live writer's commit marker (concurrent appends): it then
    plans again once that commit is done (``wait_for_commits``, up to ``commit_wait``).

    ``erased_path``: the group mode="w" erases (``path`` unless a whole tree is written).
    """
    return wait_for_commits(zstore, lambda: _prepare_once(ds, zstore, path, encoding, options, erased_path))


def _prepare_once(
    ds: xr.Dataset,
    zstore: Store,
    path: str,
    encoding: Mapping[str, Mapping[str, Any]] | None,
    options: WriteOptions,
    erased_path: str | None,
) -> WritePlan:
    ds = validate_names(ds)
    check_reserved_names(path)
    encoding = checked_encoding(encoding, ds)
    mode, append_dim = options.mode, options.append_dim
    existing = open_existing(zstore, path, mode)
    zarr_format = choose_zarr_format(options.zarr_format, zstore, path, mode, existing)
    arrays = dict(existing.arrays()) if existing is not None else {}
    if mode == "w":
        ds = detach_from_target(ds, zstore, path if erased_path is None else erased_path)
    reg: dict[str, slice] = {}
    if options.region is not None:
        ds, reg = resolve_region(ds, options.region, mode, append_dim, existing, arrays)
        encoding = {k: v for k, v in encoding.items() if k in ds.variables}
    plan = plan_write(
        ds,
        store=zstore,
        path=path,
        mode=mode,
        group=existing,
        arrays=arrays,
        encoding=encoding,
        append_dim=append_dim,
        region=reg,
        safe_chunks=options.safe_chunks,
        align_chunks=options.aligns,
        write_empty_chunks=options.write_empty_chunks,
        compute=options.compute,
        erases=erased_path is None or erased_path == path,
        zarr_format=zarr_format,
    )
    if mode != "w":
        refuse_clashes(zstore, path, plan, arrays)
    return plan


def runner(progress: bool, chunkmanager_store_kwargs: dict[str, Any] | None) -> Callable[..., tuple]:
    """The function that computes the dask writes (with a progress bar when asked) and returns
    their results (where stores that return receipts put them)."""

    def run(*writes: Any) -> tuple:
        return compute_with_progress(*writes, progress=progress, **(chunkmanager_store_kwargs or {}))

    return run
