"""Writes to stores with costly requests: the commit protocol's requests for many arrays go out
together, not one array after another, and listings never walk the staging area."""

from __future__ import annotations

import re
import threading
import time

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.core.group import Group
from zarr3_backend.core.node_claims import CLAIMS_DIR, claim_key
from zarr3_backend.core.txn_records import MANIFEST, TXN_DIR, new_txn_id, txn_prefix
from zarr3_backend.stores import MemoryStore


def dataset(nvars: int, t0: int = 0, nt: int = 2) -> xr.Dataset:
    rng = np.random.default_rng(t0)
    time = pd.date_range("2000-01-01", periods=nt) + pd.Timedelta(days=t0)
    return xr.Dataset(
        {f"v{i}": (("time", "x"), rng.random((nt, 3))) for i in range(nvars)}, coords={"time": time}
    )


class ListingStore(MemoryStore):
    """Records the prefixes it was asked to list."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.listed: list[str] = []

    def list_dir(self, prefix):
        self.listed.append(prefix)
        return super().list_dir(prefix)


def test_members_and_consolidation_never_list_the_staging_area():
    """A consolidating append lists the root while its values are staged under the protocol's
    directory: walking it cost a listing and three lookups per staged folder, one after another
    (on object storage, hundreds of round trips for a large append)."""
    store = ListingStore()
    z3.to_zarr(dataset(3), store, consolidated=True)
    store.listed.clear()
    z3.to_zarr(dataset(3, t0=2), store, append_dim="time", consolidated=True)
    # the protocol lists its own directory for writes to repair; nothing below it is walked
    assert not [p for p in store.listed if p.startswith(TXN_DIR + "/") and p != TXN_DIR + "/"]
    got = xr.open_dataset(store, engine="zarr3").load()
    assert got.sizes["time"] == 4


def test_a_node_document_staged_by_a_write_is_no_member():
    """Whatever a write stages (here a group document, as a copy of a whole node stages it) is
    not listed, and never becomes an implicit group in a consolidated copy."""
    store = MemoryStore()
    z3.create_group(store)
    z3.create_array(store, path="a", shape=(2,), dtype="i4")
    store.set(f"{TXN_DIR}/1-2-3-x-abcd/data/g/zarr.json", b'{"zarr_format": 3, "node_type": "group"}')
    root = z3.open_group(store, mode="r")
    assert isinstance(root, Group)
    assert list(root.members(max_depth=None)) == ["a"]


class BarrierStore(MemoryStore):
    """A store (declared one with costly requests) whose writes that ``picks(method, keys,
    expected)`` selects wait until ``parties`` of them are in flight together: a write that
    makes them one after another breaks the barrier (and fails)."""

    costly_requests = True

    def __init__(self, parties: int, picks, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.meeting = threading.Barrier(parties, timeout=10)  # not "barrier": a Store method
        self.picks = picks
        self.armed = False
        self.passed = 0

    def _meet(self, method, keys, expected=None):
        if self.armed and self.picks(method, keys, expected):
            self.meeting.wait()
            self.passed += 1

    def set_if(self, key, value, expected):
        self._meet("set_if", [key], expected)
        return super().set_if(key, value, expected)

    def set_many(self, items):
        self._meet("set_many", list(items))
        return super().set_many(items)

    def get_versioned(self, key):
        self._meet("get_versioned", [key])
        return super().get_versioned(key)


def _array_documents(method, keys, expected):
    return method == "set_if" and re.fullmatch(r"v\d+/zarr\.json", keys[0]) is not None


def _staged_values(method, keys, expected):
    return method == "set_many" and any(re.match(rf"{re.escape(TXN_DIR)}/[^/]+/data/v\d+/c", k) for k in keys)


def _claims_taken(method, keys, expected):
    return method == "set_if" and keys[0].startswith(CLAIMS_DIR) and expected is None


def _assert_holds(store, want: xr.Dataset) -> None:
    got = xr.open_dataset(store, engine="zarr3").load()
    for name in want.data_vars:
        np.testing.assert_array_equal(got[name].values, want[name].values)


@pytest.mark.parametrize("how", ["region", "overwrite"])
def test_the_arrays_documents_are_marked_and_finished_together(how):
    """A write to 4 arrays marks their 4 documents at once and writes them back at once: two
    round trips each for all, where one after another made it eight (a 20-variable region
    write cost 84 sequential requests for its markers alone)."""
    store = BarrierStore(4, _array_documents)
    z3.to_zarr(dataset(4), store, consolidated=True)
    store.armed = True
    if how == "region":
        z3.to_zarr(dataset(4, t0=9).drop_vars("time"), store, region={"time": slice(0, 2)})
    else:
        z3.to_zarr(dataset(4, t0=9), store, mode="a")
    assert store.passed >= 8  # marked (4), finished (4)
    store.armed = False
    _assert_holds(store, dataset(4, t0=9))


def test_numpy_variables_are_staged_together_on_stores_with_costly_requests():
    """The values of 4 numpy variables go to an object store in 4 concurrent requests, not one
    variable after another (a round trip each)."""
    store = BarrierStore(4, _staged_values)
    z3.to_zarr(dataset(4), store)
    store.armed = True
    z3.to_zarr(dataset(4, t0=9).drop_vars("time"), store, region={"time": slice(0, 2)})
    assert store.passed == 4  # each variable's staged values met the others'
    store.armed = False
    _assert_holds(store, dataset(4, t0=9))


def test_the_claims_of_an_append_to_many_arrays_are_taken_together():
    """An append to 4 arrays (and its time coordinate) claims their documents, and holds the
    root group shared, in one round of conditional writes, not one array after another."""
    store = BarrierStore(6, _claims_taken)
    z3.to_zarr(dataset(4), store)
    store.armed = True
    z3.to_zarr(dataset(4, t0=2), store, append_dim="time")
    assert store.passed == 6  # the 5 claims and the root's shared hold met at the barrier
    store.armed = False
    got = xr.open_dataset(store, engine="zarr3").load()
    xr.testing.assert_equal(got, xr.concat([dataset(4), dataset(4, t0=2)], dim="time"))
    assert not list(store.list_prefix(CLAIMS_DIR))


def test_claims_held_by_another_write_are_waited_for_in_key_order():
    """When one of the claims is held by another live write, those taken at once are given back
    and the claims are taken one by one in key order, waiting for the holder; the append then
    goes on from the holder's shape and no claim is left behind."""
    store = MemoryStore()
    z3.to_zarr(dataset(3), store)
    other = new_txn_id()
    store.set(txn_prefix(other) + MANIFEST, b"{}")  # a live write holding v1's claim
    held = claim_key("v1/zarr.json")
    store.set(held, other.encode())
    seen: list[list[str]] = []

    def release_later():
        time.sleep(0.3)
        seen.append(sorted(store.list_prefix(CLAIMS_DIR)))  # what the waiter holds meanwhile
        store.erase(held)
        store.erase_prefix(txn_prefix(other))

    helper = threading.Thread(target=release_later)
    helper.start()
    z3.to_zarr(dataset(3, t0=3), store, append_dim="time")
    helper.join()
    # waiting in key order: time and v0 (before v1) are held, v2 (after it) was given back
    assert held in seen[0] and claim_key("v2/zarr.json") not in seen[0]
    got = xr.open_dataset(store, engine="zarr3").load()
    xr.testing.assert_equal(got, xr.concat([dataset(3), dataset(3, t0=3)], dim="time"))
    assert not list(store.list_prefix(CLAIMS_DIR))


class TopLevelGets(MemoryStore):
    """Counts the single-key reads of the arrays' documents (not those inside a batched read)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.single: list[str] = []
        self._batch = threading.local()
        self.armed = False

    def get_many(self, keys):
        self._batch.on = True
        try:
            return super().get_many(keys)
        finally:
            self._batch.on = False

    def get(self, key, byte_range=None):
        if self.armed and not getattr(self._batch, "on", False) and re.fullmatch(r"v\d+/zarr\.json", key):
            self.single.append(key)
        return super().get(key, byte_range)


def test_a_region_write_checks_the_stored_shapes_in_one_batched_read():
    """After its values are in place, a region write looks at every array's stored shape (a
    shrink may have committed meanwhile) in one batched read, not one read per array."""
    store = TopLevelGets()
    z3.to_zarr(dataset(4), store)
    store.armed = True
    z3.to_zarr(dataset(4, t0=9).drop_vars("time"), store, region={"time": slice(0, 2)})
    assert store.single == []


def _stale_reads(method, keys, expected):
    return method == "get_versioned" and re.match(r"v\d+/c/", keys[0]) is not None


def test_variables_written_together_still_read_their_partial_units_together():
    """Variables staged together each still read the units they cover in part (a step written
    into chunks of 2 steps) in one round: a variable's own requests must not run one after
    another because it is written from a pool thread."""
    store = BarrierStore(4, _stale_reads)
    ds = xr.Dataset(
        {f"v{i}": (("time", "x"), np.zeros((2, 8))) for i in range(2)},
        coords={"time": pd.date_range("2000-01-01", periods=2)},
    )
    z3.to_zarr(ds, store, encoding={f"v{i}": {"chunks": (2, 2)} for i in range(2)})
    store.armed = True
    step = ds.isel(time=slice(1, 2)).drop_vars("time") + 1
    z3.to_zarr(step, store, region={"time": slice(1, 2)}, safe_chunks=False)
    assert store.passed == 8  # 4 partial units of each of the 2 variables
    store.armed = False
    got = xr.open_dataset(store, engine="zarr3").load()
    for name in ds.data_vars:
        np.testing.assert_array_equal(got[name].values, [[0.0] * 8, [1.0] * 8])


def _claims_released(method, keys, expected):
    return method == "get_versioned" and keys[0].startswith(CLAIMS_DIR) and "/shared/" not in keys[0]


def test_the_claims_of_an_append_to_many_arrays_are_released_together():
    """Once the commit is done its 5 claims are read and given up at once, not one array after
    another (they were, for a while, when their release ran on an io thread: nested io work
    runs inline)."""
    store = BarrierStore(5, _claims_released)
    z3.to_zarr(dataset(4), store)
    store.armed = True
    z3.to_zarr(dataset(4, t0=2), store, append_dim="time")
    assert store.passed == 5
    store.armed = False
    assert not list(store.list_prefix(CLAIMS_DIR))
