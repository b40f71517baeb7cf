"""A write that creates a group (``to_zarr`` into a new group, ``create_array`` under a new one) while another
writer's commit has the root marked: reading the root to see whether it is a group (the new
group's parent) met the live marker and refused the write at once with InterruptedWriteError,
where every other read of a live writer's marked document waits for its commit."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.core.node_claims import CLAIMS_DIR


class _PausedInCommit(z3.MemoryStore):
    """Holds the thread ``paused`` inside its commit (values moved, root still marked) until
    another thread waits on a node claim or ``go`` is set."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sync = {"paused": None, "inside": threading.Event(), "go": threading.Event()}

    def move_prefix(self, src, dst):
        super().move_prefix(src, dst)
        if self.sync["paused"] is threading.current_thread():
            self.sync["inside"].set()
            assert self.sync["go"].wait(60)

    def set_if(self, key, value, expected):
        ok = super().set_if(key, value, expected)
        if not ok and key.startswith(CLAIMS_DIR) and self.sync["paused"] is not threading.current_thread():
            self.sync["go"].set()  # the other writer now waits for the paused one's claims
        return ok


def _ds(name: str) -> xr.Dataset:
    return xr.Dataset({name: ("t", np.arange(3.0))})


@pytest.mark.parametrize("new_group", ["to_zarr", "create_array"])
def test_creating_a_group_while_another_commit_has_the_root_marked_waits_for_it(new_group):
    store = _PausedInCommit()
    z3.to_zarr(_ds("a"), store, mode="w")
    other = threading.Thread(target=lambda: z3.to_zarr(_ds("v"), store, group="g1", mode="a"))
    store.sync["paused"] = other
    other.start()
    assert store.sync["inside"].wait(60)
    assert b"write_in_progress" in store.get("zarr.json")  # the root is marked by a live write
    try:
        if new_group == "to_zarr":
            z3.to_zarr(_ds("w"), store, group="g2", mode="a")
        else:
            z3.create_array(store, "g2/w", shape=(3,), dtype="f8", chunks=(3,))
    finally:
        store.sync["go"].set()
        other.join(60)
    tree = xr.open_datatree(store, engine="zarr3")
    assert list(tree["g1"].data_vars) == ["v"]
    assert "g2" in tree.children
    assert z3.open_array(store, "g2/w").shape == (3,)
