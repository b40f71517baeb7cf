"""What a shrink leaves outside an array's shape, and clearing it.

A shrink deletes the units wholly outside the new shape and resets to the fill value the part
outside of the units its new end cuts through, so that a later growth shows fill, never old
values. A write planned at a larger shape that commits after a shrink can put values back out
there; the commit protocol then clears them (``clear_outside_shape``, under the array's claim).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from .. import indexing
from ..errors import MetadataError, WriteConflictError
from ..stores.base import Store
from .metadata import ArrayMetadata
from .metadata_v2 import ARRAY_KEY
from .node_claims import claim_nodes, release_claims, shape_of, stored_shape
from .txn_records import parse_doc, unmarked_node

_LOOKS = 64  # shape changes followed before giving up: each is another writer's commit


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
        meta = None if raw is None else unmarked_node(raw, doc_key, path)
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


def shrinks(doc: str | None, key: str, shape_from: Sequence[int]) -> bool:
    """Whether the array document ``doc`` a commit writes as ``key`` is smaller than
    ``shape_from`` along some axis (a shrink: what a write staged at the old shape moved in
    past its end is erased after it)."""
    if doc is None:
        return False
    try:
        shape = parse_doc(doc.encode(), key).get("shape")
    except MetadataError:
        return False
    return isinstance(shape, list) and any(
        isinstance(n, int) and n < o for n, o in zip(shape, shape_from, strict=False)
    )


def keep_within(
    store: Store,
    txn_id: str,
    within: Mapping[str, Sequence[int]],
    held: set[str],
    repairer: Callable[[str], object],
) -> None:
    """Clear what is stored outside each array's shape (units wholly outside erased, the part
    outside of units the end cuts through reset to fill: ``shape_cuts.clear_outside_shape``) when
    that shape is now smaller than the one this write's values were planned for (``within``:
    document key -> that shape), under the array's claim (``held``: the claims this write holds already; ``repairer``: what a
    claim waiting on a dead writer runs). A write staged
    before a shrink committed has moved units past the new end, and a shrink may have listed
    its units before such a write moved them in: left, a later growth showed them instead of
    the fill value. Units outside an array's shape belong to no one while its claim is held (an
    append holds it until its shape is written), so nothing another writer needs is erased."""
    if not within or not store.supports_conditional_writes:
        return  # nothing to look at; or no claim to hold: the sweep could erase an append's rows
    keys = sorted(within)
    first = dict(zip(keys, store.get_many(keys), strict=True))  # one round trip for all arrays
    for doc_key in keys:
        planned = list(within[doc_key])
        for attempt in range(_LOOKS):
            stored = shape_of(first[doc_key], doc_key) if attempt == 0 else stored_shape(store, doc_key)
            if (
                stored is None
                or len(stored) != len(planned)
                or all(s >= p for s, p in zip(stored, planned, strict=True))
            ):
                break  # gone, or not smaller: nothing of this write lies outside it
            taken = doc_key not in held
            if taken:
                try:
                    refusal = claim_nodes(store, txn_id, {doc_key: stored}, (), repairer)
                except WriteConflictError:
                    # held by a live write past commit_wait: this write is committed; what it left
                    # outside the shape is invisible until a resize grows the array again
                    break
                if refusal is not None:
                    continue  # the shape changed again (or the array is gone): look again
            try:
                clear_outside_shape(store, doc_key, planned)
            finally:
                if taken:
                    release_claims(store, [doc_key], txn_id)
            break
