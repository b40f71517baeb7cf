"""Two writers creating one node at once: one of them is refused (NodeExistsError), the other's
metadata stays; neither goes on to write its data under the other's metadata."""

from __future__ import annotations

import numpy as np
import pytest
from store_doubles import CommitHookedStore

import zarr3_backend as z3
from zarr3_backend.errors import NodeExistsError


class _RacingStore(z3.MemoryStore):
    """Runs ``hook`` once, when a create lists the node's prefix to see that nothing is there:
    another writer creating the same node between that check and the documents."""

    hook = None

    def list_dir(self, prefix):
        found = list(super().list_dir(prefix))
        if self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return iter(found)


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_an_array_created_meanwhile_refuses_the_second_create(zarr_format):
    store = _RacingStore()
    store.hook = lambda: z3.create_array(
        store, "x", shape=(4,), dtype="i8", chunks=(2,), zarr_format=zarr_format
    )
    with pytest.raises(NodeExistsError, match=r"'x'.*meanwhile"):
        z3.create_array(store, "x", shape=(6,), dtype="f4", chunks=(3,), zarr_format=zarr_format)
    assert store.hook is None  # the other writer ran
    a = z3.open_array(store, "x", mode="r+")
    assert (a.shape, a.dtype) == ((4,), np.dtype("i8"))
    a[...] = [1, 2, 3, 4]
    np.testing.assert_array_equal(z3.open_array(store, "x")[...], [1, 2, 3, 4])


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_a_group_created_meanwhile_refuses_the_second_create(zarr_format):
    store = _RacingStore()
    store.hook = lambda: z3.create_group(store, "g", attributes={"first": 1}, zarr_format=zarr_format)
    with pytest.raises(NodeExistsError, match=r"'g'"):
        z3.create_group(store, "g", attributes={"second": 2}, zarr_format=zarr_format)
    assert dict(z3.open_group(store, "g").attrs) == {"first": 1}


def test_without_a_race_create_and_overwrite_work_as_before():
    store = _RacingStore()
    z3.create_array(store, "x", shape=(4,), dtype="i8", chunks=(2,))
    with pytest.raises(NodeExistsError):
        z3.create_array(store, "x", shape=(4,), dtype="i8", chunks=(2,))
    b = z3.create_array(store, "x", shape=(6,), dtype="f4", chunks=(3,), overwrite=True)
    assert z3.open_array(store, "x").shape == (6,) and b.dtype == np.dtype("f4")


def _datasets():
    xr = pytest.importorskip("xarray")
    first = xr.Dataset({"v": ("x", np.arange(8.0))})
    second = xr.Dataset({"v": ("x", -np.arange(8.0)), "w": ("x", np.ones(8))})
    return xr, first, second


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_to_zarr_w_minus_refuses_a_group_another_w_minus_created_meanwhile(zarr_format):
    """Two ``to_zarr(mode="w-")`` of one group: both found it missing when they planned; the one
    that commits second is refused and writes nothing (both went on: the store held the first
    writer's ``v`` next to the second's ``w``, a dataset neither wrote)."""
    xr, first, second = _datasets()
    store = CommitHookedStore()
    store.hook = lambda: z3.to_zarr(second, store, mode="w-", zarr_format=zarr_format)
    with pytest.raises(NodeExistsError, match="mode='w-'"):
        z3.to_zarr(first, store, mode="w-", zarr_format=zarr_format)
    assert store.hook is None  # the other writer ran
    xr.testing.assert_identical(xr.open_dataset(store, engine="zarr3").load(), second)
    assert not [k for k in store.list() if k.startswith(".z3-txn/")]  # no records, no claims left


def ws_writer(root: str, which: int, barrier, results) -> None:
    """Process body: wait for the other writer, then ``to_zarr(mode="w-")`` its dataset."""
    _, first, second = _datasets()
    barrier.wait(timeout=120)
    try:
        z3.to_zarr((first, second)[which], root, mode="w-", consolidated=False)
        results.put((which, "ok"))
    except NodeExistsError:
        results.put((which, "exists"))


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(3))
def test_processes_writing_one_group_with_w_minus_at_once_leave_one_of_them(tmp_path, round_):
    """Two processes ``to_zarr(mode="w-")`` to one new local store at once: one succeeds, the
    other gets NodeExistsError, and the store holds exactly the winner's dataset."""
    import multiprocessing as mp

    xr, first, second = _datasets()
    root = str(tmp_path / "s.zarr")
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=ws_writer, args=(root, i, barrier, results)) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0, 0]
    outcome = dict(results.get(timeout=10) for _ in procs)
    assert sorted(outcome.values()) == ["exists", "ok"], outcome
    winner = (first, second)[next(i for i, o in outcome.items() if o == "ok")]
    xr.testing.assert_identical(xr.open_dataset(root, engine="zarr3").load(), winner)
