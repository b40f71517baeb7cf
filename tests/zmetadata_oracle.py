"""zarr-python's own consolidation of a Zarr v2 store, the oracle for our ``.zmetadata``
(a plain module shared by the v2 writing tests)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import zarr


def fresh_zmetadata(path: Path, tmp: Path) -> dict:
    """What zarr-python's consolidation of the store at ``path`` gives (done on a copy under
    ``tmp``), its v3-style extra field on nested ``.zgroup`` entries aside: the ``.zgroup``
    documents themselves (and zarr-python 2's consolidation) have no such field."""
    copy = tmp / "fresh-copy.zarr"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(path, copy)
    (copy / ".zmetadata").unlink(missing_ok=True)
    zarr.consolidate_metadata(copy, zarr_format=2)
    doc = json.loads((copy / ".zmetadata").read_text())
    for key, entry in doc["metadata"].items():
        if key.endswith("/.zgroup"):
            entry.pop("consolidated_metadata", None)
    return doc
