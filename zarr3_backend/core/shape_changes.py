"""Changes of an array's shape (``Array.resize`` and ``Array.append``), each one try of a claimed
shape change: judged from the shape as stored now, committed only if no other writer changed it
first (``node_claims.retry_shape_change`` runs them again when one did). They are the Array's
own steps, kept apart so ``array.py`` holds selection and plain writes; they use its write helpers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import indexing
from ..errors import ShapeError
from .commit import Transaction, claimed_shape_change
from .metadata_v2_store import shape_documents, stored_node_metadata, update_node_metadata
from .shape_cuts import cut_tails, extent

if TYPE_CHECKING:
    from .array import Array


def resize_once(array: Array, new_shape: tuple[int, ...]) -> None:
    """One try of ``resize``: judged from the shape as stored now, not this handle's (a
    shrink of what another writer grew erases the units outside the new shape; left stored,
    they came back on growth), as a claimed shape change: the document alone when no stored
    unit falls outside, else with the erases in one transaction."""
    array.metadata = stored_node_metadata(array.store, array.path, array.metadata)
    if new_shape == array.shape:
        return
    grid = array.metadata.chunk_grid
    new_grid = grid.grid_shape(new_shape)
    old_grid = grid.grid_shape(array.shape)
    new_meta = array.metadata.evolve(shape=new_shape)
    shrinks = any(n < o for n, o in zip(new_grid, old_grid, strict=True))
    doomed = array._pipeline.stored_units_outside(new_grid) if shrinks else []
    tails = cut_tails(array.metadata.chunk_grid.is_regular, array.storage_chunks, array.shape, new_shape)
    documents = shape_documents(array.path, new_meta)
    shape_from = {key: array.shape for key in documents}
    if not doomed and not tails:  # one document: atomic by itself; only its shape changes (not the
        # attributes another writer may have set since this handle read it)
        (key,) = documents
        array.metadata = claimed_shape_change(
            array.store,
            key,
            array.shape,
            lambda: update_node_metadata(
                array.store, array.path, lambda m: m.evolve(shape=new_shape), array.metadata
            ),
        )
        return
    # the new shape and the erases in one transaction: a crash never shows the new shape
    # over chunks it should have dropped (a later growth would bring them back)
    planned = shape_documents(array.path, array.metadata)  # the array as read: checked at the commit
    with Transaction(
        array.store, guard=(array.path,), documents=documents, shape_from=shape_from, planned=planned
    ) as txn:
        txn.staging.erase_many(doomed)
        fills = [(region, array._coerce_value(array.metadata.fill_value, extent(region))) for region in tails]
        for region, fill in fills:
            array._with_store(txn.staging)[region] = fill

        def redo(key: str) -> None:  # another writer changed a cut unit meanwhile: cut it again
            for region, fill in fills:
                array.write_unit_of(region, fill, key)

        txn.commit(redo=redo)
    array.metadata = new_meta
    array._pipeline.forget()


def append_once(array: Array, data: np.ndarray, axis: int) -> None:
    """One try of ``append``, from the shape as stored now."""
    # rows another writer appended since this handle read the array are kept (they were
    # overwritten, then hidden by this handle's smaller shape)
    array.metadata = stored_node_metadata(array.store, array.path, array.metadata)
    other = [n for i, n in enumerate(array.shape) if i != axis]
    if data.ndim != array.ndim or [n for i, n in enumerate(data.shape) if i != axis] != other:
        raise ShapeError(
            f"array {array.path or '/'!r}: cannot append data of shape {data.shape} along axis {axis} "
            f"to shape {array.shape}"
        )
    array._check_writable()
    new_shape = list(array.shape)
    start = new_shape[axis]
    new_shape[axis] += data.shape[axis]
    region = [slice(None)] * array.ndim
    region[axis] = slice(start, new_shape[axis])
    # data and the new zarr.json in one transaction: a reader sees the old shape with the old
    # data or the new shape with all of the new data
    new_meta = array.metadata.evolve(shape=tuple(new_shape))
    indexer = indexing.basic_indexer(tuple(region), tuple(new_shape), array.storage_chunks)
    array._commit_write(new_meta, indexer, array._coerce_value(data, indexer.shape))
