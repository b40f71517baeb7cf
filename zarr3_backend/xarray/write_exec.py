"""Executing a write plan: the data through the data store, then the documents in one commit step.

Every store write of ``to_zarr`` happens here. The order is: what mode="w" erases (today, before
the data: see ``Committer.erases_before_data``), a new group's ``zarr.json`` and its missing
parents, the data (numpy now, dask as tasks), then ``Committer.commit`` with every metadata
document, then the consolidated metadata.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dask.array as da
import numpy as np
from dask.delayed import Delayed, delayed

from ..core.api import consolidate_metadata, create_group, open_group
from ..core.array import Array
from ..core.group import Group
from ..dask.write import FusingDelayed
from ..dask.write import store as dask_store
from ..errors import GroupNotFoundError, Zarr3Error
from ..stores.base import Store
from .write_plan import WritePlan


class Committer:
    """The last step of a write: store the metadata documents and drop what the plan erases.

    This one writes straight to the store. Its data goes to final keys before the commit, so
    it must erase before the data (``erases_before_data``); a committer that stages the data
    can erase at commit instead.
    """

    #: Whether ``erase`` runs before the data is written (else ``commit`` does the erasing).
    erases_before_data: bool = True

    def __init__(self, store: Store) -> None:
        self.store = store

    def erase(self, prefixes: list[str]) -> None:
        """Erase the groups at ``prefixes`` (and everything under them), leaving empty groups."""
        for prefix in prefixes:
            create_group(self.store, prefix, overwrite=True)

    def commit(self, documents: dict[str, bytes], erase_prefixes: list[str]) -> None:
        """Store ``documents`` (key -> ``zarr.json`` bytes) in one batch; ``erase_prefixes``
        were erased before the data (``erases_before_data``)."""
        if not self.erases_before_data:
            self.erase(erase_prefixes)
        if documents:
            self.store.set_many(documents)


def root_is_consolidated(store: Store) -> bool:
    """Whether the store's root group holds consolidated metadata (a read; writes nothing)."""
    try:
        root = open_group(store, path="", mode="r+")
    except (GroupNotFoundError, Zarr3Error):
        return False
    return root.metadata.consolidated_metadata is not None


def _finish(*_: Any) -> None:
    return None


def combine(writes: list[Any]) -> Delayed:
    """One Delayed that runs every pending write of ``writes`` (dask stores or Delayeds)."""
    finish = delayed(_finish, pure=False)(*writes)
    return FusingDelayed(finish.key, finish.dask)


def consolidate_root(store: Store) -> None:
    """Write the consolidated metadata of the whole store into its root group."""
    consolidate_metadata(store, "")


def execute(
    plan: WritePlan,
    data_store: Store,
    committer: Committer,
    *,
    consolidate: bool,
    compute: bool,
    align_chunks: bool,
    run: Callable[..., Any],
) -> Group | Delayed:
    """Write ``plan``'s data through ``data_store`` and commit its documents with ``committer``
    (consolidating the root after when ``consolidate``). ``run`` computes the dask writes.

    Returns the written group, or with ``compute=False`` a Delayed writing the dask data (the
    documents are committed now, as xarray does).
    """
    lazy = write_data(plan, data_store, committer, align_chunks=align_chunks)
    if compute and lazy:
        run(*lazy)
    commit(plan, committer)
    if plan.changes_metadata and consolidate:
        consolidate_root(committer.store)
    if not compute:
        return combine(lazy)
    return open_group(committer.store, path=plan.path, mode="r+")


def write_data(plan: WritePlan, data_store: Store, committer: Committer, *, align_chunks: bool) -> list[Any]:
    """The first half of ``execute``: erase what the plan drops (when the committer erases
    before the data), create a new group, write numpy data; returns the dask writes, not run."""
    if plan.erase_prefixes and committer.erases_before_data:
        committer.erase(plan.erase_prefixes)
    elif plan.create_group:
        create_group(data_store, plan.path)  # with its missing parents
    lazy = []
    for w in plan.writes:
        target = Array(
            data_store, w.target.path, w.target.metadata, write_empty_chunks=w.target.write_empty_chunks
        )
        data = w.variable.data
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
            target.set_region(w.region, np.asarray(w.variable.values))
    return lazy


def commit(plan: WritePlan, committer: Committer) -> None:
    """The second half of ``execute``: commit the plan's documents (and erasures)."""
    committer.commit(plan.documents(), plan.erase_prefixes)
