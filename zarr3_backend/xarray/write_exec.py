"""Executing write plans: the data through a transaction's staging, then one commit.

Every store write of ``to_zarr`` happens here, inside one :class:`~zarr3_backend.core.commit.Transaction`
per call (one for a whole DataTree): numpy data and dask tasks write through its staging store,
and the commit then erases what mode="w" replaces, puts the data in place and writes every
``zarr.json`` (and the consolidated metadata) in one marked window (Zarr v2 documents unmarked, after the data: see core/commit.py). A killed or failed write
leaves the old state (or, once its manifest is written, a state the next write finishes).
``compute=False`` commits the metadata (and numpy data) now and returns a Delayed that writes the
dask data straight to the store, as xarray's initialise-then-fill pattern needs.

On a store whose worker copies return receipts (an Icechunk fork's store, ``Store.returns_receipts``)
the receipts of the dask writes are merged into the store before ``execute`` returns; with
``compute=False`` the Delayed computes to them instead (``fork.merge(*delayed.compute())``), since
a Delayed computed by ``dask.compute`` or a client cannot hand them to the store itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dask.array as da
import numpy as np
from dask.delayed import Delayed, delayed

from .._threads import thread_map
from ..core.api import missing_parent_documents
from ..core.array import Array
from ..core.commit import Transaction
from ..core.group import Group, open_existing_group, read_node_metadata
from ..core.metadata import GroupMetadata
from ..core.metadata_v2 import GROUP_KEY
from ..core.paths import join_prefix, metadata_key
from ..core.txn_records import unmarked_node
from ..dask.tree import Tally, receipts_of, sum_counts
from ..dask.write import FusingDelayed
from ..dask.write import store as dask_store
from ..errors import GroupNotFoundError, InterruptedWriteError, WriteConflictError, Zarr3Error
from ..stores import MemoryStore
from ..stores.base import Store
from .write_plan import VariableWrite, WritePlan


def _finish(*results: Any) -> tuple[Any, ...] | None:
    """The receipts the finished writes carry, combined by their store (a tuple), or None when
    they carry none."""
    total = sum_counts(list(results))
    return receipts_of(total) if isinstance(total, Tally) else None


def combine(writes: list[Any]) -> Delayed:
    """One Delayed that runs every pending write of ``writes`` (dask stores or Delayeds); it
    computes to the writes' receipts on a store that returns them, else to None."""
    finish = delayed(_finish, pure=False)(*writes)
    return FusingDelayed(finish.key, finish.dask)


def execute(
    plans: Sequence[WritePlan],
    store: Store,
    *,
    path: str,
    consolidate: bool,
    compute: bool,
    align_chunks: bool,
    run: Callable[..., Any],
) -> Group | Delayed:
    """Write ``plans`` (one per group) in one transaction on ``store``; consolidate the root's
    metadata in the same commit when ``consolidate`` and a document changes. ``run`` computes
    the dask writes. Returns the group at ``path``, or with ``compute=False`` a Delayed writing
    the dask data (everything else is committed now, as xarray does)."""
    documents: dict[str, bytes] = {}
    guard: list[str] = []
    erase: list[str] = []
    shape_from: dict[str, tuple[int, ...]] = {}
    planned: dict[str, bytes] = {}
    missing: list[str] = []
    added: list[str] = []
    within: dict[str, tuple[int, ...]] = {}
    for plan in plans:
        shape_from.update(plan.shape_from())
        planned.update(plan.planned_documents())
        missing += plan.must_be_missing()
        added += plan.added_documents()
        within.update(plan.within())
        if plan.create_group:  # a new (or replaced) group, and any missing parents
            parents = missing_parent_documents(store, plan.path, plan.zarr_format)
            own = plan.new_group_documents()
            for key, doc in {**parents, **own}.items():
                documents.setdefault(key, doc)  # never over a document another plan gives
            # the groups it creates where nothing was stored must still be missing at commit:
            # a node another writer stored there meanwhile (an array, a group and its
            # attributes) makes this write be planned again over it, not written over
            added += [k for k in (*parents, *(own if plan.adds_to_stored else ())) if _is_node_key(k)]
        documents.update(plan.documents())
        guard += [plan.path, *(w.target.path for w in plan.writes)]
        # each group's key prefix, "g/": the bare path "g" also took its siblings "g2", "grid"
        erase += [join_prefix(p) for p in plan.erase_prefixes]
    changes = any(plan.changes_metadata for plan in plans)
    with Transaction(
        store,
        guard=guard,
        documents=documents,
        erase_prefixes=erase,
        shape_from=shape_from,
        create=missing,
        add=added,
        within=within,
        planned=planned,
    ) as txn:
        lazy = []
        for plan in plans:
            lazy += write_data(
                plan, txn.staging, store if not compute else txn.staging, align_chunks=align_chunks
            )
        if compute and lazy:
            # a store whose workers' copies keep their writes (an Icechunk fork) gets them back
            store.merge_receipts(receipts_of(run(*lazy)))
        txn.commit(consolidate=consolidate and changes, redo=_redo(plans, store))
    if not compute:
        return combine(lazy)
    return _written_group(store, path, documents)


def _is_node_key(key: str) -> bool:
    """Whether ``key`` is the document that makes a group a node (``zarr.json``, v2 ``.zgroup``)."""
    return key.rpartition("/")[2] in ("zarr.json", GROUP_KEY)


def _written_group(store: Store, path: str, documents: Mapping[str, bytes]) -> Group:
    """The group at ``path`` as stored now, read at once: a write that succeeded never reports
    failure, nor waits for another writer's commit. When another writer erased the group right
    after this commit, or holds it marked in its own commit window, the group as this commit
    wrote it (its ``documents``), else as stored without the other write's marker, else (gone,
    and its document left as it was by this commit) an implicit, empty group."""
    try:
        return open_existing_group(store, path, read_only=False, use_consolidated=None)
    except (GroupNotFoundError, InterruptedWriteError):
        pass
    # the documents read as a store: one owner for reading a node's metadata, v3 or v2
    meta = read_node_metadata(MemoryStore(dict(documents)), path)
    if meta is None:
        raw = store.get(metadata_key(path))
        try:
            meta = None if raw is None else unmarked_node(raw, metadata_key(path), path)
        except Zarr3Error:
            meta = None  # replaced meanwhile by what is no group document
    if isinstance(meta, GroupMetadata):
        return Group(store, path, meta)
    return Group(store, path, GroupMetadata(attributes={}), implicit=True)


def _redo(plans: Sequence[WritePlan], store: Store) -> Callable[[str], None]:
    """How the commit redoes a unit another writer changed since this write merged into it
    (only units written in part, which ``safe_chunks=False`` allows): numpy data is merged
    again as a conditional write; a dask block would have to be computed again, so it is
    refused."""

    def redo(key: str) -> None:
        for plan in plans:
            for w in plan.writes:
                if key.startswith(join_prefix(w.target.path)) and not isinstance(w.variable.data, da.Array):
                    target = Array(
                        store,
                        w.target.path,
                        w.target.metadata,
                        write_empty_chunks=w.target.write_empty_chunks,
                    )
                    target.write_unit_of(w.region, np.asarray(w.variable.values), key)
                    return
        raise WriteConflictError(
            f"{key!r} was changed by another writer while this write merged dask data into it "
            "(safe_chunks=False); nothing of this write was committed past it: write it again"
        )

    return redo


def write_data(plan: WritePlan, data_store: Store, lazy_store: Store, *, align_chunks: bool) -> list[Any]:
    """Write the numpy data through ``data_store``; returns the dask writes (through
    ``lazy_store``), not run."""
    lazy = []
    eager: list[tuple[Array, VariableWrite]] = []
    for w in plan.writes:
        data = w.variable.data
        target_store = lazy_store if isinstance(data, da.Array) else data_store
        target = Array(
            target_store, w.target.path, w.target.metadata, write_empty_chunks=w.target.write_empty_chunks
        )
        if isinstance(data, da.Array):
            lazy.append(
                dask_store(
                    data,
                    target,
                    w.region,
                    compute=False,
                    align_chunks=align_chunks,
                    name=w.name,
                    dims=w.variable.dims,
                )
            )
        else:
            eager.append((target, w))

    def write(item: tuple[Array, VariableWrite]) -> None:
        target, w = item
        target.set_region(w.region, np.asarray(w.variable.values))

    if data_store.costly_requests:  # the variables together: one round trip for all, not each
        thread_map(write, eager, kind="tasks")  # each one's own requests still go out together
    else:  # local: one at a time, as memory for encoded values is then one variable's
        for item in eager:
            write(item)
    return lazy
