"""A writer killed inside its one round of claims (``node_claims._take_all_at_once``), holding
one of its claims but not another that a live writer holds: the live writer, waiting on the
dead one's claim, finishes that write first, and finishing it took every claim it names, so it
waited on the live writer's own claim until ``commit_wait`` ran out (a deadlock between one
writer and itself, broken only by the timeout). The dead write had checked no claim, so none of
its values had moved: the waiter now drops it at once."""

from __future__ import annotations

import numpy as np
import xarray as xr
from store_doubles import SnapshotOnSetStore

import zarr3_backend as z3
from zarr3_backend.core import commit, node_claims
from zarr3_backend.core.node_claims import claim_key


class _CountingClaims(z3.MemoryStore):
    """Counts the failed attempts to take each claim (by document); the dead writer is judged
    dead from the first one on (when the live writer meets its claim, not at its start)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.refused = {"a/zarr.json": 0, "b/zarr.json": 0}

    def set_if(self, key, value, expected):
        ok = super().set_if(key, value, expected)
        for doc in self.refused:
            if not ok and key == claim_key(doc):
                self.refused[doc] += 1
        return ok


def _rows(n: int, value: int) -> xr.Dataset:
    return xr.Dataset({name: (("t", "x"), np.full((n, 2), value, "i4")) for name in ("a", "b")})


def test_a_waiter_drops_a_dead_write_that_holds_part_of_its_claims_without_waiting_on_itself(monkeypatch):
    store = SnapshotOnSetStore()
    z3.to_zarr(_rows(2, 1), store, mode="w", consolidated=False)
    store.when = lambda key: key.endswith("/manifest.json")
    z3.to_zarr(_rows(1, 5), store, append_dim="t", consolidated=False)  # goes on; snapshot taken
    contents = dict(store.snapshot)
    (dead,) = commit.pending_writes(z3.MemoryStore(contents))
    contents[claim_key("b/zarr.json")] = dead.encode()  # killed having taken b's claim alone
    left = _CountingClaims(contents, settings={"commit_wait": 1})
    real = commit.writer_is_dead
    fake = lambda txn_id: (txn_id == dead and left.refused["b/zarr.json"] > 0) or real(txn_id)  # noqa: E731
    monkeypatch.setattr(commit, "writer_is_dead", fake)
    monkeypatch.setattr(node_claims, "writer_is_dead", fake)

    z3.to_zarr(_rows(1, 7), left, append_dim="t", consolidated=False)

    assert left.refused["b/zarr.json"] > 0  # the live writer met the dead one's claim
    assert left.refused["a/zarr.json"] == 0  # whose repair never waited on the live one's claim
    for name in ("a", "b"):
        np.testing.assert_array_equal(z3.open_array(left, name)[:, 0], [1, 1, 7])  # dead one dropped
    assert not list(left.list_prefix(".z3-txn/"))
