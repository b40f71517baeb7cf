"""Writing one node's metadata to a store outside a transaction: ``zarr.json`` for a v3 node (keeping
writers' in-flight marks), ``.zattrs`` then ``.zarray``/``.zgroup`` for a Zarr v2 node (and the
``.zmetadata`` of the groups above it brought up to date)."""

from __future__ import annotations

from ..stores.base import Store
from .commit import replace_document
from .metadata import ArrayMetadata, GroupMetadata
from .metadata_v2_write import is_v2, metadata_from_documents, node_documents


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
