"""``to_zarr`` of an ``xr.DataTree``: every node planned (validated) first, then written group by
group, root first, and the store consolidated once at the end."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import xarray as xr
from dask.delayed import Delayed

from ..core.commit import root_is_consolidated
from ..core.group import Group
from ..core.node_claims import retry_shape_change
from ..core.paths import join_path, normalize_path
from ..errors import Zarr3Error
from ..stores import make_store
from .write_args import UnknownVariableError, check_zarr_format, choose_mode
from .write_exec import execute
from .writer import WriteOptions, prepare, runner


def write_tree(
    tree: xr.DataTree,
    store: Any = None,
    mode: str | None = None,
    group: str | None = None,
    encoding: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
    *,
    compute: bool = True,
    consolidated: bool | None = None,
    append_dim: Hashable | None = None,
    region: Any = None,
    safe_chunks: bool = True,
    align_chunks: bool = False,
    storage_options: dict[str, Any] | None = None,
    zarr_format: int | None = None,
    write_empty_chunks: bool | None = None,
    chunkmanager_store_kwargs: dict[str, Any] | None = None,
    progress: bool = False,
    write_inherited_coords: bool = False,
) -> Group | Delayed:
    """Write every node of ``tree`` as a group under ``group``, as ``DataTree.to_zarr`` does.

    ``encoding`` is keyed by node path (``"/"``, ``"/a/b"``). Every mode of ``to_zarr`` works
    node by node: mode="w" erases the tree's root group once, after every node validated;
    ``append_dim`` grows the nodes that have it (others are written as with mode="a").
    Consolidated metadata is written once, at the store's root, after the last node.
    """
    mode = choose_mode(mode, append_dim, region)
    check_zarr_format(zarr_format)
    encoding = dict(encoding or {})
    unknown = set(encoding) - set(tree.groups)
    if unknown:
        raise UnknownVariableError(f"unexpected encoding group name(s) provided: {sorted(unknown)}")
    zstore = make_store(store if store is not None else {}, mode="a", storage_options=storage_options)
    root = normalize_path(group)

    consolidate = (
        bool(consolidated) or (consolidated is None and mode != "r+") or root_is_consolidated(zstore)
    )

    def write() -> Group | Delayed:
        plans = []
        for rel, node in tree.subtree_with_keys:
            at_root = node is tree
            ds = node.to_dataset(inherit=write_inherited_coords or at_root)
            grows = append_dim is not None and append_dim in ds.dims
            options = WriteOptions(
                "a" if append_dim is not None and not grows else mode,
                append_dim if grows else None,
                region,
                safe_chunks,
                align_chunks,
                write_empty_chunks,
                compute,
                zarr_format,
            )
            path = root if at_root else join_path(root, normalize_path(rel))
            try:
                plan = prepare(ds, zstore, path, encoding.get(node.path), options, erased_path=root)
            except Zarr3Error as e:
                raise type(e)(f"DataTree node {node.path!r}: {e}") from e
            plans.append(plan)

        # ---- nothing has been written up to here ----
        return execute(  # one transaction for the whole tree; one computation for all its dask data
            plans,
            zstore,
            path=root,
            consolidate=consolidate,
            compute=compute,
            align_chunks=align_chunks or not safe_chunks,
            run=runner(progress, chunkmanager_store_kwargs),
        )

    # planned again when another writer changed what the plan read before the commit (which
    # then wrote nothing): an append's array shape, a variable this write adds, or one it
    # overwrites that a replacement of the group dropped
    return retry_shape_change(write, replans_gone=True)
