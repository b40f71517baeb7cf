"""Writer processes for tests/test_hunt8_metadata_races.py (a plain module: spawned children
import it). Each opens the node once, waits at the barrier, then changes it ``rounds`` times."""

from __future__ import annotations

import numpy as np

import zarr3_backend as z3


def attribute_writer(root: str, path: str, w: int, rounds: int, barrier) -> None:
    """Set the attributes ``w<w>-<i>`` one at a time through one handle."""
    node = z3.open_group(root, mode="r+")[path] if path else z3.open_group(root, mode="r+")
    barrier.wait(timeout=120)
    for i in range(rounds):
        node.attrs[f"w{w}-{i}"] = i


def grower(root: str, path: str, rounds: int, barrier) -> None:
    """Grow the array by one row at a time (resize, then the new row written)."""
    a = z3.open_array(root, path, mode="r+")
    barrier.wait(timeout=120)
    for _ in range(rounds):
        n = a.shape[0]
        a.resize((n + 1, *a.shape[1:]))
        a[n] = np.full(a.shape[1:], n + 1, dtype=a.dtype)


def appender(root: str, path: str, rounds: int, barrier) -> None:
    """Append one row at a time (each append one transaction)."""
    a = z3.open_array(root, path, mode="r+")
    barrier.wait(timeout=120)
    for _ in range(rounds):
        a.append(np.full((1, *a.shape[1:]), a.shape[0] + 1, dtype=a.dtype))


def consolidator(root: str, rounds: int, barrier) -> None:
    """Consolidate the root's metadata ``rounds`` times."""
    barrier.wait(timeout=120)
    for _ in range(rounds):
        z3.consolidate_metadata(root)
