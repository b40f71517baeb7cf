"""What a shrink leaves outside an array's shape, and clearing it.

A shrink deletes the units wholly outside the new shape and resets to the fill value the part
outside of the units its new end cuts through, so that a later growth shows fill, never old
values. A write planned at a larger shape that commits after a shrink can put values back out
there; the commit protocol then clears them (``clear_outside_shape``, under the array's claim).
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import indexing
from ..stores.base import Store
from .commit import with_markers
from .metadata import ArrayMetadata, parse_node_json
from .metadata_v2 import ARRAY_KEY
from .txn_records import parse_doc


def cut_tails(
    regular: bool, unit: Sequence[int], old: Sequence[int], new_shape: Sequence[int]
) -> list[tuple[slice, ...]]:
    """The regions (in shape ``old``) of the units of size ``unit`` a shrink to ``new_shape``
    cuts through that fall outside it: one per shrunk axis whose new end is inside a unit,
    covering the corners where several meet. Regular grids only (``regular``); a rectilinear
    one keeps them as stored."""
    if not regular:
        return []

    def kept(j: int) -> slice:  # along another axis: every element of the units still used
        if new_shape[j] >= old[j]:
            return slice(0, old[j])
        return slice(0, min(old[j], -(-new_shape[j] // unit[j]) * unit[j]))

    tails = []
    for i, (n, o, c) in enumerate(zip(new_shape, old, unit, strict=True)):
        if n < o and n % c:
            cut = slice(n, min(o, -(-n // c) * c))
            tails.append(tuple(cut if j == i else kept(j) for j in range(len(old))))
    return tails


def extent(region: tuple[slice, ...]) -> tuple[int, ...]:
    """The shape of a region of concrete slices."""
    return tuple(s.stop - s.start for s in region)


def clear_outside_shape(store: Store, doc_key: str, planned: Sequence[int]) -> None:
    """Clear what lies outside the stored shape of the array whose document (``zarr.json`` or
    v2 ``.zarray``) is ``doc_key``, as far as a write planned at shape ``planned`` can have put
    it there (committed after a shrink): the units wholly outside are erased, the part outside
    of those the end cuts through reset to the fill value (unit by unit, each a conditional
    read-modify-write). The commit protocol runs it under the array's claim."""
    from .array import Array  # array imports this module (cut_tails)
    from .group import read_v2_node_metadata  # group imports array

    path, _, name = doc_key.rpartition("/")
    if name == ARRAY_KEY:
        meta = read_v2_node_metadata(store, path, use_consolidated=False)
    else:
        raw = store.get(doc_key)
        meta = None if raw is None else parse_node_json(with_markers(parse_doc(raw, doc_key), {}), path)
    if not isinstance(meta, ArrayMetadata) or len(planned) != len(meta.shape):
        return
    store.erase_many(
        Array(store, path, meta)._pipeline.stored_units_outside(meta.chunk_grid.grid_shape(meta.shape))
    )
    wide = Array(
        store, path, meta.evolve(shape=tuple(max(p, n) for p, n in zip(planned, meta.shape, strict=True)))
    )
    for region in cut_tails(meta.chunk_grid.is_regular, wide.storage_chunks, wide.shape, meta.shape):
        indexer = indexing.basic_indexer(region, wide.shape, wide.storage_chunks)
        wide._write_units(indexer, wide._coerce_value(meta.fill_value, extent(region)))
