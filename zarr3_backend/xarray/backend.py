"""``engine="zarr3"``: xarray's ``open_dataset``, ``open_datatree`` and ``open_groups`` on Zarr v3
and Zarr v2 stores through zarr3_backend, with the arguments and meaning of
xarray's own zarr engine."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from xarray.backends.common import BackendEntrypoint, _normalize_path, datatree_from_dict_with_io_cleanup
from xarray.backends.store import StoreBackendEntrypoint
from xarray.core.dataset import Dataset
from xarray.core.datatree import DataTree
from xarray.core.utils import close_on_error

from ..core.api import open_group
from ..core.group import Group
from ..core.paths import normalize_path
from ..errors import GroupNotFoundError
from ..stores.base import Store, StoreArgumentError
from .datastore import Zarr3DataStore
from .index_prefetch import IndexBatch

#: Opening never erases: the creating modes "w"/"w-" belong to writers.
_MODES = ("r", "r+", "a", "a-")


def open_target_group(
    target: Any,
    group: str | None = None,
    *,
    mode: str = "r",
    consolidated: bool | None = None,
    storage_options: dict | None = None,
    zarr_format: int | None = None,
) -> Group:
    """The group ``group`` of ``target`` (path, URL, ``Store`` or ``Group``).

    Unless ``consolidated=False`` the root is opened first so that its inline consolidated
    metadata, when present, serves the whole hierarchy without another request. The group named
    must have a ``zarr.json`` or a v2 ``.zgroup`` (implicit groups are read only below it);
    ``zarr_format`` (2 or 3), when given, must be the group's. A bad ``mode`` or ``zarr_format``
    raises ``StoreArgumentError``.
    """
    if mode not in _MODES:
        raise StoreArgumentError(f"mode must be one of {_MODES} when opening, got {mode!r}")
    if zarr_format not in (None, 2, 3):
        raise StoreArgumentError(f"zarr_format must be 2, 3 or None, got {zarr_format!r}")
    path = normalize_path(group)
    node = _open_node(target, path, mode, consolidated, storage_options)
    if not isinstance(node, Group):
        raise GroupNotFoundError(f"{path!r} is an array, not a group: pass the group that holds it")
    if zarr_format is not None and not node.implicit and node.zarr_format != zarr_format:
        raise StoreArgumentError(
            f"zarr_format={zarr_format} was given, but group {node.path or '/'!r} is Zarr v{node.zarr_format}"
        )
    if node.implicit:
        raise GroupNotFoundError(
            f"no zarr.json at {node.path or '/'!r}: engine='zarr3' opens a group with its own zarr.json "
            "(groups without one are read only below it)"
        )
    return node


def _open_node(
    target: Any, path: str, mode: str, consolidated: bool | None, storage_options: dict | None
) -> Any:
    """The node at ``path``: through the root (for its consolidated metadata) unless
    ``consolidated=False``."""
    if isinstance(target, Group):
        return target[path] if path else target
    target = _normalize_path(target)
    open_mode = "a" if mode == "a-" else mode
    if consolidated is False:
        return open_group(
            target, path=path, mode=open_mode, storage_options=storage_options, use_consolidated=False
        )
    root = open_group(
        target, path="", mode=open_mode, storage_options=storage_options, use_consolidated=consolidated
    )
    return root[path] if path else root


class Zarr3BackendEntrypoint(BackendEntrypoint):
    """Open Zarr v3 stores (paths, fsspec URLs, zarr3_backend Stores) without zarr-python.

    Takes the arguments of xarray's ``engine="zarr"`` with the same meaning; see
    ``zarr3_backend.xarray`` for the differences. Zarr v2 stores open too (their
    ``_ARRAY_DIMENSIONS`` name the dimensions; the v2 ``fill_value`` masks, as in xarray).

    Dask chunks: ``preferred_chunks`` is the shard shape (the chunk shape when unsharded), so
    ``chunks={}`` gives one task per shard and ``"auto"`` multiples of shards. On stores where a
    request is costly (``Store.costly_requests``: http, s3, gcs, ...) it is instead a block of
    whole shards (chunks) of up to ``settings.remote_task_bytes`` decoded bytes (64 MiB by
    default; 0 restores one unit per task), grown from the last dimension to the first, so each
    task fetches its units concurrently with one batched read. Blocks start and end on shard
    boundaries: no shard is read by two tasks, and writing them back to the same layout is safe.
    Explicit chunks (a dict with sizes, ``"auto"``) are obeyed; smaller than the block, xarray
    warns that they "separate the stored chunks". Asking for the
    inner chunk shape (``chunks={"time": 1, ...}``) gives one task per inner chunk, each reading
    only its byte range of the shard, and xarray warns "The specified chunks separate the stored
    chunks": that is expected (tasks are smaller than the stored unit) and harmless for reading;
    silence it with ``warnings.filterwarnings`` if the finer graph is what you want.
    """

    description = "Open Zarr v3 stores with zarr3_backend (no zarr-python)"
    supports_groups = True

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        if isinstance(filename_or_obj, Store | Group):
            return True
        if isinstance(filename_or_obj, str | os.PathLike):
            path = os.fspath(filename_or_obj)
            return "://" not in path and os.path.isfile(os.path.join(path, "zarr.json"))
        return False

    def _data_store(
        self,
        filename_or_obj: Any,
        *,
        group: str | None,
        mode: str,
        consolidated: bool | None,
        storage_options: dict | None,
        zarr_format: int | None,
        use_zarr_fill_value_as_mask: bool | None,
        drop_variables: Iterable[str],
    ) -> Zarr3DataStore:
        node = open_target_group(
            filename_or_obj,
            group,
            mode=mode,
            consolidated=consolidated,
            storage_options=storage_options,
            zarr_format=zarr_format,
        )
        return Zarr3DataStore(
            node,
            use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask,
            drop_variables=drop_variables,
            close_store=not isinstance(filename_or_obj, Store | Group),
        )

    def open_dataset(
        self,
        filename_or_obj: Any,
        *,
        mask_and_scale: bool = True,
        decode_times: Any = True,
        concat_characters: bool = True,
        decode_coords: Any = True,
        drop_variables: str | Iterable[str] | None = None,
        use_cftime: bool | None = None,
        decode_timedelta: Any = None,
        group: str | None = None,
        mode: str = "r",
        consolidated: bool | None = None,
        storage_options: dict | None = None,
        zarr_format: int | None = None,
        store: Zarr3DataStore | None = None,
        engine: Any = None,
        use_zarr_fill_value_as_mask: bool | None = None,
        cache_members: bool = True,
    ) -> Dataset:
        """One group as a Dataset; reads only ``zarr.json`` documents (one when consolidated)."""
        drop = _as_names(drop_variables)
        if store is None:
            store = self._data_store(
                filename_or_obj,
                group=group,
                mode=mode,
                consolidated=consolidated,
                storage_options=storage_options,
                zarr_format=zarr_format,
                use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask,
                drop_variables=drop,
            )
        with close_on_error(store):
            return StoreBackendEntrypoint().open_dataset(
                store,
                mask_and_scale=mask_and_scale,
                decode_times=decode_times,
                concat_characters=concat_characters,
                decode_coords=decode_coords,
                drop_variables=drop,
                use_cftime=use_cftime,
                decode_timedelta=decode_timedelta,
            )

    def open_datatree(
        self,
        filename_or_obj: Any,
        *,
        mask_and_scale: bool = True,
        decode_times: Any = True,
        concat_characters: bool = True,
        decode_coords: Any = True,
        drop_variables: str | Iterable[str] | None = None,
        use_cftime: bool | None = None,
        decode_timedelta: Any = None,
        group: str | None = None,
        mode: str = "r",
        consolidated: bool | None = None,
        storage_options: dict | None = None,
        zarr_format: int | None = None,
        use_zarr_fill_value_as_mask: bool | None = None,
    ) -> DataTree:
        """The hierarchy below ``group`` as a DataTree (implicit groups included)."""
        groups = self.open_groups_as_dict(
            filename_or_obj,
            mask_and_scale=mask_and_scale,
            decode_times=decode_times,
            concat_characters=concat_characters,
            decode_coords=decode_coords,
            drop_variables=drop_variables,
            use_cftime=use_cftime,
            decode_timedelta=decode_timedelta,
            group=group,
            mode=mode,
            consolidated=consolidated,
            storage_options=storage_options,
            zarr_format=zarr_format,
            use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask,
        )
        return datatree_from_dict_with_io_cleanup(groups)

    def open_groups_as_dict(
        self,
        filename_or_obj: Any,
        *,
        mask_and_scale: bool = True,
        decode_times: Any = True,
        concat_characters: bool = True,
        decode_coords: Any = True,
        drop_variables: str | Iterable[str] | None = None,
        use_cftime: bool | None = None,
        decode_timedelta: Any = None,
        group: str | None = None,
        mode: str = "r",
        consolidated: bool | None = None,
        storage_options: dict | None = None,
        zarr_format: int | None = None,
        use_zarr_fill_value_as_mask: bool | None = None,
    ) -> dict[str, Dataset]:
        """``{"/": ds, "/child": ds, ...}`` for every group below ``group``; the whole hierarchy's
        metadata is read once (level by level, or from consolidated metadata)."""
        drop = _as_names(drop_variables)
        top = open_target_group(
            filename_or_obj,
            group,
            mode=mode,
            consolidated=consolidated,
            storage_options=storage_options,
            zarr_format=zarr_format,
        )
        members = top.members(max_depth=None, skip_arrays=drop)
        children: dict[str, dict[str, Any]] = {"": {}}
        for rel, node in members.items():
            if isinstance(node, Group):
                children.setdefault(rel, {})
        for rel, node in members.items():
            parent, _, name = rel.rpartition("/")
            children.setdefault(parent, {})[name] = node
        nodes: dict[str, Group] = {"": top, **{k: v for k, v in members.items() if isinstance(v, Group)}}
        owns_store = not isinstance(filename_or_obj, Store | Group)
        datastores = {
            rel: Zarr3DataStore(
                nodes[rel],
                children[rel],
                use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask,
                drop_variables=drop,
                close_store=owns_store and rel == "",
            )
            for rel in sorted(children)
        }
        with close_on_error(datastores[""]):
            _share_index_batch(datastores.values())
        out: dict[str, Dataset] = {}
        for rel, datastore in datastores.items():
            with close_on_error(datastore):
                out["/" + rel] = StoreBackendEntrypoint().open_dataset(
                    datastore,
                    mask_and_scale=mask_and_scale,
                    decode_times=decode_times,
                    concat_characters=concat_characters,
                    decode_coords=decode_coords,
                    drop_variables=drop,
                    use_cftime=use_cftime,
                    decode_timedelta=decode_timedelta,
                )
        return out


def _share_index_batch(datastores: Iterable[Zarr3DataStore]) -> None:
    """One ``IndexBatch`` for the index coordinates of every group: the first that xarray asks
    for reads them all (one round trip for all groups)."""
    datastores = list(datastores)
    batch = IndexBatch({key: a for ds in datastores for key, a in ds.index_arrays().items()})
    for datastore in datastores:
        datastore.read_indexes_with(batch)


def _as_names(drop_variables: str | Iterable[str] | None) -> tuple[str, ...]:
    if drop_variables is None:
        return ()
    if isinstance(drop_variables, str):
        return (drop_variables,)
    return tuple(drop_variables)
