"""Writing one node's metadata to a store outside a transaction: ``zarr.json`` for a v3 node (keeping
writers' in-flight marks), ``.zattrs`` then ``.zarray``/``.zgroup`` for a Zarr v2 node (and the
``.zmetadata`` of the groups above it brought up to date)."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import NodeNotFoundError
from ..stores.base import Store
from .commit import repair, replace_document, update_document
from .metadata import ArrayMetadata, GroupMetadata, load_json, parse_node, parse_node_json, to_bytes
from .metadata_v2 import ATTRS_KEY
from .metadata_v2_write import is_v2, metadata_from_documents, node_documents
from .paths import join_path, metadata_key
from .txn_records import with_markers


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
    store.barrier()
    return seen


def shape_documents(path: str, meta: ArrayMetadata) -> dict[str, bytes]:
    """The one document a change of the array's shape to ``meta``'s writes: its ``zarr.json``,
    or for v2 its ``.zarray`` alone (the attributes in ``.zattrs`` are not the change's to
    write: another writer's, set meanwhile, are kept)."""
    return {k: v for k, v in node_documents(path, meta).items() if k.rpartition("/")[2] != ATTRS_KEY}


def update_node_metadata(
    store: Store,
    path: str,
    change: Callable[[ArrayMetadata | GroupMetadata], ArrayMetadata | GroupMetadata],
    current: ArrayMetadata | GroupMetadata,
) -> ArrayMetadata | GroupMetadata:
    """Apply ``change`` to the node's metadata as stored now, not as ``current`` (a handle's
    copy, perhaps read before other writers changed the node): a v3 ``zarr.json`` is changed by
    a compare-and-swap where the store offers one, so a concurrent change to another part of it
    (other attributes, the shape) is kept; a v2 node's ``.zattrs`` likewise, its
    ``.zarray``/``.zgroup`` then written when the change alters it. Returns the metadata a
    reader now sees."""
    if is_v2(current):
        return _update_v2_node(store, path, change, current)

    key = metadata_key(path)

    def rewrite(old: bytes | None) -> bytes:
        if old is None:
            raise NodeNotFoundError(f"{key!r}: the node is gone (erased by another writer)")
        return to_bytes(change(parse_node(old, path)))

    written = update_document(store, key, rewrite)
    assert written is not None  # rewrite always makes a document
    return parse_node(written, path)


def _update_v2_node(
    store: Store,
    path: str,
    change: Callable[[ArrayMetadata | GroupMetadata], ArrayMetadata | GroupMetadata],
    current: ArrayMetadata | GroupMetadata,
) -> ArrayMetadata | GroupMetadata:
    """``update_node_metadata`` of a Zarr v2 node: the compare-and-swap is on ``.zattrs``
    (attribute changes of concurrent writers are kept); ``.zarray``/``.zgroup`` follow."""
    from .group import read_v2_node_metadata  # group imports array, which imports this module

    attrs_key = join_path(path, ATTRS_KEY)
    docs: dict[str, bytes] = {}
    unchanged: dict[str, bytes] = {}

    def rewrite(_old_attrs: bytes | None) -> bytes:
        # the node read again after .zattrs' version was taken: a newer .zattrs fails the swap
        stored = read_v2_node_metadata(store, path, use_consolidated=False) or current
        docs.clear()
        docs.update(node_documents(path, change(stored)))
        unchanged.clear()
        unchanged.update(node_documents(path, stored))
        return docs[attrs_key]

    update_document(store, attrs_key, rewrite)
    for key, doc in docs.items():  # .zarray/.zgroup after .zattrs, only when the change alters it
        if key != attrs_key and doc != unchanged.get(key):
            store.set(key, doc)
    from .consolidate import refresh_v2_consolidated  # consolidate lists groups, which hold arrays

    refresh_v2_consolidated(store, docs, rebuild=False)
    return metadata_from_documents(path, docs)


def stored_node_metadata(
    store: Store, path: str, current: ArrayMetadata | GroupMetadata
) -> ArrayMetadata | GroupMetadata:
    """The node's metadata as stored now (without the markers of writes in flight, which
    document writes keep and never wait for), or ``current`` when no document is there: what a
    change relative to the stored state (an append, which goes after the rows other writers
    added) starts from. Dead writers' commits are finished first, as a transaction starts."""
    from .group import read_v2_node_metadata  # group imports array, which imports this module

    if not store.commits_externally and not store.read_only:
        repair(store, only_dead=True)
    if is_v2(current):
        found = read_v2_node_metadata(store, path, use_consolidated=False)
    else:
        key = metadata_key(path)
        raw = store.get(key)
        doc = None if raw is None else load_json(raw, key)
        found = (
            None
            if doc is None
            else parse_node_json(with_markers(doc, {}) if isinstance(doc, dict) else doc, path)
        )
    return current if found is None or type(found) is not type(current) else found
