"""Writing one node's metadata to a store outside a transaction: ``zarr.json`` for a v3 node (keeping
writers' in-flight marks), ``.zattrs`` then ``.zarray``/``.zgroup`` for a Zarr v2 node (and the
``.zmetadata`` of the groups above it brought up to date)."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import NodeNotFoundError
from ..stores.base import Store
from .commit import replace_document, update_document
from .metadata import ArrayMetadata, GroupMetadata, parse_node, to_bytes
from .metadata_v2_write import is_v2, metadata_from_documents, node_documents
from .paths import metadata_key


def store_node_metadata(
    store: Store, path: str, meta: ArrayMetadata | GroupMetadata
) -> ArrayMetadata | GroupMetadata:
    """Write ``meta`` as the documents of the node at ``path``; returns the metadata a reader of
    them sees (attributes as stored; for v2, dimension names from ``_ARRAY_DIMENSIONS``). Every
    document is built (and so validated) before the first is written."""
    docs = node_documents(path, meta)
    seen = metadata_from_documents(path, docs)
    if not is_v2(meta):
        for key, doc in docs.items():
            replace_document(store, key, doc)
        return seen
    for key, doc in docs.items():  # .zattrs first, then .zarray/.zgroup (node_documents' order)
        store.set(key, doc)
    from .consolidate import refresh_v2_consolidated  # consolidate lists groups, which hold arrays

    refresh_v2_consolidated(store, docs, rebuild=False)
    return seen


def update_node_metadata(
    store: Store,
    path: str,
    change: Callable[[ArrayMetadata | GroupMetadata], ArrayMetadata | GroupMetadata],
    current: ArrayMetadata | GroupMetadata,
) -> ArrayMetadata | GroupMetadata:
    """Apply ``change`` to the node's metadata as stored now, not as ``current`` (a handle's
    copy, perhaps read before other writers changed the node): a v3 ``zarr.json`` is changed by
    a compare-and-swap where the store offers one, so a concurrent change to another part of it
    (other attributes, the shape) is kept. A v2 node is read again, changed and written (v2
    documents are written unconditionally). Returns the metadata a reader now sees."""
    if is_v2(current):
        from .group import read_v2_node_metadata  # group imports array, which imports this module

        stored = read_v2_node_metadata(store, path, use_consolidated=False)
        return store_node_metadata(store, path, change(current if stored is None else stored))

    key = metadata_key(path)

    def rewrite(old: bytes | None) -> bytes:
        if old is None:
            raise NodeNotFoundError(f"{key!r}: the node is gone (erased by another writer)")
        return to_bytes(change(parse_node(old, path)))

    return parse_node(update_document(store, key, rewrite), path)
