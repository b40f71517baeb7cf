"""Consolidated metadata: every descendant's ``zarr.json`` inlined into a group's document, or
for Zarr v2 every descendant's documents in the group's ``.zmetadata``.

One owner for how both forms are built, used by ``consolidate_metadata`` and by the commit
protocol (which rebuilds the root's copy as the last step of a write).

Attributes are copied as their documents were parsed: a bare ``NaN`` that a member's
``zarr.json`` holds (zarr-python writes float attributes so) stays a number in the copy, so a
reader of the consolidated copy sees what a reader of the member sees.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from ..errors import Zarr3Error
from ..stores import Store
from .commit import update_document
from .group import Group, read_v2_node_metadata
from .metadata import WRITE_IN_PROGRESS_FIELD, GroupMetadata, load_json, parse_node, to_bytes
from .metadata_v2 import CONSOLIDATED_KEY, GROUP_KEY
from .metadata_v2_write import consolidated_document, is_v2_document_key, node_documents, patched_consolidated
from .paths import ancestor_paths, join_path, metadata_key


def consolidated(group: Group) -> GroupMetadata:
    """``group``'s metadata with every descendant inlined (``kind: inline``)."""
    docs = {}
    for rel, node in group.members(max_depth=None).items():
        doc = node.metadata.to_json()
        if isinstance(node, Group):
            doc["consolidated_metadata"] = {"kind": "inline", "must_understand": False, "metadata": {}}
        docs[rel] = doc
    return GroupMetadata(
        attributes=group.metadata.attributes,
        consolidated_metadata={"kind": "inline", "must_understand": False, "metadata": docs},
        extra_fields=group.metadata.extra_fields,
    )


def _root_group_metadata(store: Store, root_doc: bytes | None) -> GroupMetadata | None:
    """The root group's metadata from ``root_doc`` (else the stored document) without in-flight
    markers or consolidated copy; ``None`` when there is no root group."""
    raw = root_doc if root_doc is not None else store.get(metadata_key(""))
    if raw is None:
        return None
    doc = load_json(raw, metadata_key(""))
    if not isinstance(doc, dict) or doc.get("node_type") != "group":
        return None
    doc.pop(WRITE_IN_PROGRESS_FIELD, None)
    doc.pop("consolidated_metadata", None)  # members are listed from the store, not the old copy
    return GroupMetadata.from_json(doc, "")


def members_table_into(source: bytes, path: str = "") -> Callable[[bytes], bytes]:
    """A change of the stored document of the group at ``path`` that puts in ``source``'s
    consolidated metadata (or its absence) and keeps the rest as stored: how a consolidation,
    made from a read of the group before its members were listed, keeps an attribute another
    writer set on the group meanwhile. A stored document that is no group is left as it is."""
    table = parse_node(source, path)
    members = table.consolidated_metadata if isinstance(table, GroupMetadata) else None

    def change(stored: bytes) -> bytes:
        try:
            meta = parse_node(stored, path)
        except Zarr3Error:
            return source  # not a readable document: replaced, as a whole write would
        if not isinstance(meta, GroupMetadata):
            return stored
        return to_bytes(replace(meta, consolidated_metadata=members))

    return change


def consolidated_root_document(store: Store, root_doc: bytes | None) -> bytes | None:
    """The root group's document (``root_doc``, else the stored one, without in-flight markers)
    with fresh consolidated metadata; ``root_doc`` as is when the root is not a group."""
    meta = _root_group_metadata(store, root_doc)
    if meta is None:
        return root_doc
    return to_bytes(consolidated(Group(store, "", meta, use_consolidated=False)))


def unconsolidated_root_document(store: Store, root_doc: bytes | None) -> bytes | None:
    """The root group's document without consolidated metadata (nor in-flight markers), for a
    commit that could not list its members; ``root_doc`` as is when the root is not a group."""
    meta = _root_group_metadata(store, root_doc)
    return root_doc if meta is None else to_bytes(meta)


def refresh_nested_consolidated(store: Store, docs: Mapping[str, bytes], erased: Iterable[str] = ()) -> None:
    """Bring the inline consolidated metadata of v3 groups below the root up to date after a
    commit wrote the documents ``docs`` and erased ``erased`` (the root's copy is the commit's
    own step; v2 ``.zmetadata``: ``refresh_v2_consolidated``). Each group at or above a changed
    node that holds a copy (``consolidate_metadata(store, path)``, or a store written at that
    path on its own) gets its members listed afresh, as a compare-and-swap; when they cannot be
    listed (a member marked by another writer's commit) its copy is dropped, so readers list the
    members rather than trust a stale table."""
    groups: set[str] = set()
    for key in [*docs, *erased]:
        if is_v2_document_key(key):
            continue
        node = key.rpartition("/")[0]
        groups.update(ancestor_paths(node))
        raw = docs.get(key)
        if raw is not None and b'"consolidated_metadata"' in raw:
            groups.add(node)
    groups.discard("")
    if not groups:
        return
    ordered = sorted(groups)
    for path, raw in zip(ordered, store.get_many([metadata_key(p) for p in ordered]), strict=True):
        if raw is not None and b'"consolidated_metadata"' in raw:
            update_document(
                store, metadata_key(path), lambda old, path=path: _fresh_members(store, path, old)
            )


def _fresh_members(store: Store, path: str, stored: bytes | None) -> bytes | None:
    """The stored document of the group at ``path`` with its consolidated copy listed afresh
    (dropped when the members cannot be listed); ``None`` (left as is) without a copy."""
    if stored is None:
        return None
    try:
        meta = parse_node(stored, path)
    except Zarr3Error:
        return None
    if not isinstance(meta, GroupMetadata) or meta.consolidated_metadata is None:
        return None
    try:
        bare = Group(store, path, replace(meta, consolidated_metadata=None), use_consolidated=False)
        table = consolidated(bare).consolidated_metadata
    except Zarr3Error:
        table = None
    return to_bytes(replace(meta, consolidated_metadata=table))


def consolidated_v2(store: Store, path: str = "") -> bytes | None:
    """A fresh ``.zmetadata`` for the Zarr v2 group at ``path`` (its own ``.zgroup``/``.zattrs``
    and every v2 descendant's documents, listed from the store), in zarr-python's form; ``None``
    when ``path`` is not a v2 group."""
    meta = read_v2_node_metadata(store, path, use_consolidated=False)
    if not isinstance(meta, GroupMetadata):
        return None
    group = Group(store, path, meta, use_consolidated=False)
    entries: dict[str, object] = {}
    for key, raw in node_documents("", meta).items():
        entries[key] = load_json(raw, key)
    entries = {GROUP_KEY: entries.pop(GROUP_KEY), **entries}  # zarr-python's order
    for rel, node in sorted(group.members(max_depth=None).items()):
        for key, raw in node_documents(rel, node.metadata).items():
            entries[key] = load_json(raw, key)
    return consolidated_document(entries)


def refresh_v2_consolidated(store: Store, docs: dict[str, bytes], *, rebuild: bool) -> None:
    """Bring Zarr v2 ``.zmetadata`` up to date after the v2 documents ``docs`` were written:
    with ``rebuild`` the root's is built afresh (when the root is a v2 group; as a
    compare-and-swap); every other
    existing ``.zmetadata`` of a group above a written document gets those documents put in."""
    groups = {a for key in docs for a in ancestor_paths(key)}
    # rebuilt within a compare-and-swap: writers adding nodes share the root's hold, and the last
    # to write lists after every other one wrote its nodes
    if rebuild and update_document(store, CONSOLIDATED_KEY, lambda _: consolidated_v2(store, "")) is not None:
        groups.discard("")
    if not groups:
        return
    ordered = sorted(groups)
    for path, raw in zip(
        ordered, store.get_many([join_path(p, CONSOLIDATED_KEY) for p in ordered]), strict=True
    ):
        if raw is not None:
            # patched as a compare-and-swap: another writer's patch of the same .zmetadata
            # (its own node's documents) landing in between is kept, not overwritten
            update_document(
                store,
                join_path(path, CONSOLIDATED_KEY),
                lambda old, path=path: None if old is None else patched_consolidated(old, path, docs),
            )
