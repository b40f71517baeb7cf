"""Node paths inside a store: "" is the root, "a/b" a nested node; keys hang below them."""

from __future__ import annotations

from ..errors import InvalidKeyError


def normalize_path(path: str | None) -> str:
    """Strip slashes and refuse ``.``/``..``/empty segments and backslashes."""
    if path is None:
        return ""
    if not isinstance(path, str):
        raise InvalidKeyError(f"node path must be a string, got {path!r}")
    p = path.strip("/")
    if not p:
        return ""
    if "\\" in p or any(part in ("", ".", "..") for part in p.split("/")):
        raise InvalidKeyError(f"invalid node path {path!r}")
    return p


def join_path(*parts: str) -> str:
    """Join path parts with "/", skipping empty ones (``join_path("", "zarr.json")``)."""
    return "/".join(p for p in parts if p)


def metadata_key(path: str) -> str:
    """The key of a node's ``zarr.json``."""
    return join_path(path, "zarr.json")


def node_name(path: str) -> str:
    """The last segment of a node path ("" for the root)."""
    return path.rsplit("/", 1)[-1]


def parent_path(path: str) -> str | None:
    """The parent node path, or ``None`` for the root."""
    if not path:
        return None
    return path.rsplit("/", 1)[0] if "/" in path else ""


def ancestor_paths(path: str) -> list[str]:
    """The paths of every ancestor of a node, nearest first (the root, ``""``, last)."""
    out = []
    p = parent_path(path)
    while p is not None:
        out.append(p)
        p = parent_path(p)
    return out


def join_prefix(path: str) -> str:
    """The key prefix of everything below a node ("" for the root)."""
    return path + "/" if path else ""


#: Names no node can take in any store: the keys of the metadata documents (a node so named
#: puts its documents below a document of its parent: ``zarr.json/zarr.json``) and the
#: transaction area of this package's writes (``txn_records.TXN_DIR``).
RESERVED_NAMES = frozenset({"zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata", ".z3-txn"})


def check_reserved_names(path: str) -> str:
    """Refuse a path to a new node one of whose names is a metadata document's or the
    transaction area's (``RESERVED_NAMES``)."""
    for name in path.split("/") if path else ():
        if name in RESERVED_NAMES:
            raise InvalidKeyError(
                f"invalid node name {name!r} in {path!r}: {', '.join(sorted(RESERVED_NAMES))} are keys "
                "of metadata documents or of the write transactions, not node names"
            )
    return path


def validate_new_node_path(path: str) -> str:
    """Refuse node names the core spec reserves: a name made only of periods, or one starting
    with ``__`` (for the creation of new nodes; existing ones are still readable), and the
    ``RESERVED_NAMES``."""
    for name in path.split("/") if path else ():
        if set(name) == {"."} or name.startswith("__"):
            raise InvalidKeyError(
                f"invalid node name {name!r} in {path!r}: names made of periods only and names starting with '__' are reserved"
            )
    return check_reserved_names(path)
