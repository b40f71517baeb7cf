"""Consolidated metadata: every descendant's ``zarr.json`` inlined into a group's document.

One owner for how the inline form is built, used by ``consolidate_metadata`` and by the commit
protocol (which rebuilds the root's copy as the last step of a write).
"""

from __future__ import annotations

import json

from ..errors import MetadataError
from ..stores import Store
from .group import Group
from .metadata import WRITE_IN_PROGRESS_FIELD, GroupMetadata, to_bytes
from .paths import metadata_key


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


def consolidated_root_document(store: Store, root_doc: bytes | None) -> bytes | None:
    """The root group's document (``root_doc``, else the stored one, without in-flight markers)
    with fresh consolidated metadata; ``None`` when the root is not a group."""
    raw = root_doc if root_doc is not None else store.get(metadata_key(""))
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise MetadataError(f"root zarr.json is not valid JSON: {e}") from e
    if not isinstance(doc, dict) or doc.get("node_type") != "group":
        return root_doc
    doc.pop(WRITE_IN_PROGRESS_FIELD, None)
    doc.pop("consolidated_metadata", None)  # members are listed from the store, not the old copy
    meta = GroupMetadata.from_json(doc, "")
    return to_bytes(consolidated(Group(store, "", meta, use_consolidated=False)))
