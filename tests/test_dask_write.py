"""store(): one write task per target shard, ownership proven before any byte is written."""

from __future__ import annotations

import math
import time
from typing import ClassVar

import cloudpickle
import dask
import dask.array as da
import numpy as np
import pytest
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
from store_doubles import ChunkWriteFailingStore, RecordingStore

import zarr3_backend as z3
import zarr3_backend.dask.tree as tree_module
from zarr3_backend.dask import DONE_PREFIX, WRITE_PREFIX, CountTree, from_array, store
from zarr3_backend.dask.tree import receipts_of
from zarr3_backend.dask.write import _write_block
from zarr3_backend.errors import ChunkAlignmentError, SelectionError, ShapeError
from zarr3_backend.stores import LocalStore, MemoryStore


def new_array(store=None, shape=(10, 12), chunks=(2, 3), shards=(4, 6), dtype="float64", **kw):
    store = MemoryStore() if store is None else store
    return z3.create_array(
        store, "v", shape=shape, dtype=dtype, chunks=chunks, shards=shards, dimension_names=("y", "x"), **kw
    )


def source(shape=(10, 12), chunks=(4, 6), dtype="float64"):
    data = np.arange(math.prod(shape), dtype=dtype).reshape(shape) + 1
    return data, da.from_array(data, chunks=chunks)


def write_keys(graph) -> list:
    return [k for k in graph if isinstance(k, tuple) and str(k[0]).startswith(WRITE_PREFIX)]


@pytest.mark.parametrize("shards", [(4, 6), None])
@pytest.mark.parametrize("chunks", [(4, 6), (8, 12), (10, 12)])
def test_round_trip_on_the_threaded_scheduler(shards, chunks):
    a = new_array(shards=shards)
    data, darr = source(chunks=chunks)
    with dask.config.set(scheduler="threads"):
        assert store(darr, a) is None
    np.testing.assert_array_equal(a[...], data)
    np.testing.assert_array_equal(from_array(z3.open_array(a.store, "v")).compute(), data)


def test_misaligned_chunks_are_refused_before_any_write_and_exact_with_align_chunks():
    rec = RecordingStore()
    a = new_array(rec, shape=(8, 8), chunks=(2, 2), shards=(4, 4))
    before = dict(rec._data)
    rec.writes.clear()
    data, darr = source(shape=(8, 8), chunks=(2, 2))
    with pytest.raises(ChunkAlignmentError) as info:
        store(darr, a)
    msg = str(info.value)
    assert "'v'" in msg and "'y'" in msg and "(2, 2, 2, 2)" in msg and "size 4" in msg
    assert ".chunk({'y': 4})" in msg
    assert rec.writes == [] and rec._data == before  # nothing written
    store(darr, a, align_chunks=True)
    np.testing.assert_array_equal(a[...], data)


def test_write_task_count_equals_target_shards_plus_a_constant():
    a = new_array(shape=(20, 24), chunks=(2, 3), shards=(4, 6))  # 5 x 4 = 20 shards
    data, darr = source(shape=(20, 24), chunks=(8, 12))  # 3 x 2 blocks, each holding several shards
    d = store(darr, a, compute=False)
    assert isinstance(d, Delayed)
    graph = dict(d.__dask_graph__())
    assert len(write_keys(graph)) == 20
    # besides the writes: the 6 source blocks, the target array and the final "done" task
    assert len(graph) - len(write_keys(graph)) == darr.npartitions + 2
    assert d.compute() == 20
    np.testing.assert_array_equal(a[...], data)


def test_region_starting_inside_a_partly_filled_shard_gets_its_own_task():
    a = new_array(shape=(10, 12), chunks=(2, 3), shards=(4, 6))
    old = np.full((10, 12), -1.0)
    a[...] = old
    data, darr = source(shape=(5, 12), chunks=(5, 12))
    # rows 5..9: shard 1 (rows 4..7) is covered partly, shard 2 (rows 8..9, edge) wholly
    d = store(darr, a, region=(slice(5, 10), slice(None)), compute=False)
    assert len(write_keys(dict(d.__dask_graph__()))) == 2 * 2
    d.compute()
    expected = old.copy()
    expected[5:10] = data
    np.testing.assert_array_equal(a[...], expected)


def test_region_misaligned_with_the_dask_chunks_is_refused():
    a = new_array(shape=(10, 12), chunks=(2, 3), shards=(4, 6))
    _, darr = source(shape=(6, 12), chunks=(3, 12))  # rows 2..7: boundary at row 5 is inside shard 1
    with pytest.raises(ChunkAlignmentError, match="starts at index 2"):
        store(darr, a, region=(slice(2, 8), slice(None)))


def test_a_retried_task_rewrites_its_own_shard_idempotently():
    a = new_array(shape=(10, 12), chunks=(2, 3), shards=(4, 6))
    a[...] = 5.0
    block = np.arange(12, dtype="float64").reshape(2, 6)
    slices = (slice(0, 2), slice(0, 6))
    for _ in range(2):  # first attempt, then the retry after a lost worker
        _write_block(block, a, slices, (5, 6))  # rows 5..6, cols 6..11: part of one shard
    expected = np.full((10, 12), 5.0)
    expected[5:7, 6:12] = block
    np.testing.assert_array_equal(a[...], expected)


def test_compute_false_writes_nothing_until_computed():
    rec = RecordingStore()
    a = new_array(rec)
    rec.writes.clear()
    data, darr = source()
    d = store(darr, a, compute=False)
    assert rec.writes == []
    d.compute()
    assert rec.writes and all(k.startswith("v/c/") for k in rec.writes)
    np.testing.assert_array_equal(a[...], data)


def test_numpy_values_and_zero_dimensional_dask_arrays():
    a = new_array()
    data, _ = source()
    store(data, a)
    np.testing.assert_array_equal(a[...], data)
    s = z3.create_array(MemoryStore(), "s", shape=(), dtype="int64")
    store(da.from_array(np.array(42)), s)
    assert s[()] == 42
    d = store(np.zeros((2, 2)), a, region=(slice(0, 2), slice(0, 2)), compute=False)
    assert a[0, 0] == data[0, 0]
    d.compute()
    assert a[0, 0] == 0


def test_empty_chunks_are_not_stored_unless_asked():
    a = new_array(shards=None, fill_value=0.0)
    store(da.zeros((10, 12), chunks=(2, 3)), a)
    assert not [k for k in a.store.list() if "/c/" in k]
    b = new_array(shards=None, fill_value=0.0, write_empty_chunks=True)
    store(da.zeros((10, 12), chunks=(2, 3)), b)
    assert len([k for k in b.store.list() if "/c/" in k]) == 5 * 4


def test_bad_regions_raise_typed_errors_and_write_nothing():
    rec = RecordingStore()
    a = new_array(rec)
    rec.writes.clear()
    _, darr = source(shape=(4, 6), chunks=(4, 6))
    with pytest.raises(ShapeError, match=r"\(4, 6\)"):
        store(darr, a, region=(slice(0, 4), slice(0, 5)))
    with pytest.raises(SelectionError, match="step 1"):
        store(darr, a, region=(slice(0, 8, 2), slice(0, 6)))
    with pytest.raises(SelectionError, match="outside"):
        store(darr, a, region=(slice(8, 12), slice(0, 6)))
    with pytest.raises(SelectionError, match="dimensions"):
        store(darr, a, region=(slice(0, 4),))
    assert rec.writes == []


def test_progress_bar_on_the_local_scheduler(capsys):
    a = new_array()
    data, darr = source()
    store(darr, a, progress=True, scheduler="threads")
    assert "100%" in capsys.readouterr().out
    np.testing.assert_array_equal(a[...], data)


def test_graph_for_many_shards_is_built_without_touching_the_store():
    """10^5 target shards: the build is metadata-only; its time is printed for the report."""
    rec = RecordingStore()
    a = z3.create_array(rec, "big", shape=(1000, 100), dtype="uint8", chunks=(1, 1), shards=(1, 1))
    rec.writes.clear()
    darr = da.zeros((1000, 100), dtype="uint8", chunks=(100, 100))
    t0 = time.perf_counter()
    d = store(darr, a, compute=False)
    elapsed = time.perf_counter() - t0
    graph = d.__dask_graph__()
    n_write = sum(1 for k in graph.layers[next(n for n in graph.layers if n.startswith(WRITE_PREFIX))])
    print(f"store() graph build for {n_write} shards: {elapsed:.2f} s")
    assert n_write == 10**5
    assert rec.writes == []


def test_blockwise_write_graph_for_a_million_shards_stays_lazy():
    """10^6 target shards, one dask block each: no layer lists per-shard tasks at build time,
    and the "done" node is a tree whose size is arithmetic, not one task with 10^6 inputs."""
    rec = RecordingStore()
    a = z3.create_array(rec, "big", shape=(1000, 1000), dtype="uint8", chunks=(1, 1))
    rec.writes.clear()
    darr = da.zeros((1000, 1000), dtype="uint8", chunks=(1, 1))
    d = store(darr, a, compute=False)
    layers = d.__dask_graph__().layers
    write = next(v for k, v in layers.items() if k.startswith(WRITE_PREFIX))
    done = next(v for k, v in layers.items() if k.startswith(DONE_PREFIX))
    assert not write.is_materialized() and len(write) == 10**6
    assert isinstance(done, CountTree) and not done.is_materialized()
    assert len(done) == 3907 + 16 + 1  # partial sums of 256 writes, 16 sums of those, the root
    materialized = [v for v in layers.values() if isinstance(v, MaterializedLayer)]
    assert all(len(v) <= 1 for v in materialized)  # only the target array itself
    assert rec.writes == []


def test_count_tree_sums_every_source_once_at_any_depth():
    """A tree over a 5 x 7 grid with 3 children per node: every source is a child of exactly
    one node, every node's children exist, and the root adds up to the number of sources."""
    sources = {
        ("src", i, j): np.ones((1, 1), dtype="int64") * (i * 7 + j + 1) for i in range(5) for j in range(7)
    }
    tree = CountTree("done", "src", (5, 7), fan_in=3)
    assert tree.depth == 4  # 35 -> 12 -> 4 -> 2 -> 1
    children = [c for k in tree for c in tree.get_dependencies(k, ())]
    assert sorted(c for c in children if c in sources) == sorted(sources)
    assert all(c in sources or c in tree for c in children) and len(children) == len(set(children))
    graph = HighLevelGraph({"src": MaterializedLayer(sources), "done": tree}, {"src": set(), "done": {"src"}})
    assert Delayed(tree.root, graph).compute(scheduler="sync") == sum(range(1, 36))
    with pytest.raises(KeyError):
        tree[("done-partial", 9, 0)]


def test_a_deep_tree_waits_for_every_write(monkeypatch):
    monkeypatch.setattr(tree_module, "FAN_IN", 2)  # 20 shards: five levels of partial sums
    for chunks in [(4, 6), (8, 12)]:  # Blockwise path, then one task per piece of a block
        a = new_array(shape=(20, 24), chunks=(2, 3), shards=(4, 6))
        data, darr = source(shape=(20, 24), chunks=chunks)
        d = store(darr, a, compute=False)
        tree = next(v for v in d.__dask_graph__().layers.values() if isinstance(v, CountTree))
        assert tree.depth == 5
        assert d.compute(scheduler="threads") == 20
        np.testing.assert_array_equal(a[...], data)


def test_each_call_writes_with_fresh_keys():
    """A cluster that still holds the result of an earlier write must not skip a later one."""
    a = new_array()
    _, darr = source()
    first, second = store(darr, a, compute=False), store(darr, a, compute=False)
    assert not set(write_keys(dict(first.__dask_graph__()))) & set(write_keys(dict(second.__dask_graph__())))
    assert first.key != second.key


class CachingLocalStore(LocalStore):
    """A local store that asks Arrays to cache shard indexes, as object stores do."""

    costly_requests = True

    def __reduce__(self):
        return CachingLocalStore, (self.root,)


def remote_get(dsk, keys, **kwargs):
    """A scheduler whose tasks run on copies of the graph, as worker processes do."""
    return dask.get(cloudpickle.loads(cloudpickle.dumps(dsk)), keys, **kwargs)


def test_computing_a_deferred_write_refreshes_the_callers_shard_indexes(tmp_path):
    a = z3.create_array(
        CachingLocalStore(tmp_path / "c.zarr"), "v", shape=(8,), dtype="float64", chunks=(2,), shards=(8,)
    )
    a[0:2] = 1.0  # inner chunk 0 stored, chunks 1..3 absent
    np.testing.assert_array_equal(a[4:6], [0, 0])  # the shard index (chunk 2 absent) is cached
    d = store(da.arange(8, chunks=8).astype("float64") + 10, a, compute=False)
    assert d.compute(scheduler=remote_get) == 1  # the tasks wrote through a copy of `a`
    np.testing.assert_array_equal(a[4:6], [14, 15])  # a stale index would still say "absent"
    np.testing.assert_array_equal(a[...], np.arange(8) + 10)


def test_writes_take_in_the_blockwise_tasks_that_make_their_blocks():
    data, d = source()
    a = new_array()
    derived = (d * 2).map_blocks(np.negative)  # two more blockwise layers before the write
    w = store(derived, a, compute=False)
    (optimized,) = dask.optimize(w)
    graph = dict(optimized.__dask_graph__())
    prefixes = {str(k[0] if isinstance(k, tuple) else k).split("-")[0] for k in graph}
    unfused = dict(w.__dask_graph__())
    assert len(unfused) > len(graph)
    assert len(write_keys(graph)) == 6  # one fused task per shard ...
    assert not {"mul", "negative"} & prefixes  # ... the blockwise source tasks are fused into them
    w.compute()
    np.testing.assert_array_equal(a[...], -(data * 2))


def _blocks(data, chunks):
    return [
        data[i : i + chunks[0], j : j + chunks[1]]
        for i in range(0, data.shape[0], chunks[0])
        for j in range(0, data.shape[1], chunks[1])
    ]


def test_a_block_two_writes_share_is_computed_once():
    calls = []

    def expensive(block):
        calls.append(block.shape)
        return block * 10

    data, d = source()
    shared = d.map_blocks(expensive)  # 6 blocks, used by both writes
    a, b = new_array(), new_array()
    writes = store(shared + 1, a, compute=False), store(shared - 1, b, compute=False)
    calls.clear()  # map_blocks' meta inference called it on empty arrays
    dask.compute(*writes, scheduler="sync")
    assert sorted(calls) == sorted(b.shape for b in _blocks(data, (4, 6)))  # each block once
    np.testing.assert_array_equal(a[...], data * 10 + 1)
    np.testing.assert_array_equal(b[...], data * 10 - 1)


def test_to_zarr_compute_false_is_fused_too(tmp_path):
    import xarray as xr

    data, d = source()
    ds = xr.Dataset({"v": (("y", "x"), d + 0.5)})
    w = z3.to_zarr(ds, str(tmp_path / "s.zarr"), mode="w", compute=False)
    (optimized,) = dask.optimize(w)
    graph = dict(optimized.__dask_graph__())
    assert len(write_keys(graph)) == 6
    assert not any(isinstance(k, tuple) and str(k[0]).startswith("add") for k in graph)
    w.compute()
    np.testing.assert_array_equal(
        xr.open_dataset(str(tmp_path / "s.zarr"), engine="zarr3")["v"].values, data + 0.5
    )


def test_a_0d_block_shared_by_two_writes_is_computed_once():
    calls = []

    def expensive(x):
        calls.append(1)
        return x + 1

    shared = da.map_blocks(expensive, da.random.random((), chunks=()), meta=np.array((), np.float64))
    g = z3.open_group({}, mode="w")
    a = g.create_array("a", shape=(), dtype="f8")
    b = g.create_array("b", shape=(), dtype="f8")
    writes = [store(shared, a, (), compute=False), store(shared + 1, b, (), compute=False)]
    dask.compute(*writes)
    assert len(calls) == 1
    assert b[()] == a[()] + 1


# ---- stores whose worker copies hand their writes back (receipts) ------------------------------
class ReceiptStore(MemoryStore):
    """A store whose copies (on workers) keep what they write, as an Icechunk ForkSession does,
    and hand it back as receipts (values set, keys erased) that the client's store merges; like
    an Icechunk session it is committed outside (no staging)."""

    returns_receipts = True
    commits_externally = True
    combined: ClassVar[list[int]] = []  # sizes of the receipt lists the count tree combined

    def __init__(self, data=None, *, read_only=False, is_copy=False):
        super().__init__(data, read_only=read_only)
        self.original = dict(self._data) if is_copy else None

    def write_receipt(self):
        if self.original is None:
            return None
        now = dict(self._data)
        changed = {k: v for k, v in now.items() if self.original.get(k) != v}
        return changed, {k for k in self.original if k not in now}

    @staticmethod
    def combine_receipts(receipts):
        ReceiptStore.combined.append(len(receipts))
        changed, erased = {}, set()
        for c, e in receipts:
            changed.update(c)
            erased |= e
        return ((changed, erased),)

    def merge_receipts(self, receipts):
        for changed, erased in receipts:
            self.erase_many(erased)
            self.set_many(changed)

    def __reduce__(self):
        return _receipt_store_copy, (dict(self._data),)


def _receipt_store_copy(data):
    return ReceiptStore(data, is_copy=True)


def receipt_array():
    return new_array(ReceiptStore(), shape=(8, 12), chunks=(2, 3), shards=(4, 6))


def test_receipts_of_worker_copies_are_merged_by_store_compute_true():
    """Tasks on copies of the store (as on worker processes) write into the copies only: the
    data reaches the client's store through the receipts, or not at all."""
    data, darr = source((8, 12), (4, 6))
    a = receipt_array()
    ReceiptStore.combined.clear()
    store(darr, a, scheduler=remote_get)
    np.testing.assert_array_equal(a[...], data)
    assert ReceiptStore.combined  # the count tree combined them on the way up

    b = receipt_array()
    d = store(darr * 2, b, compute=False)
    (result,) = dask.compute(d, scheduler=remote_get)  # not the Delayed's own compute: not merged
    assert result.count == 4 and len(result.receipts) == 1
    assert (b[...] == 0).all()  # dropping the receipts loses the writes
    b.store.merge_receipts(receipts_of(result))
    np.testing.assert_array_equal(b[...], data * 2)


def test_a_deferred_write_merges_its_receipts_when_computed():
    data, darr = source((8, 12), (4, 6))
    a = receipt_array()
    d = store(darr + 1, a, compute=False)
    assert d.compute(scheduler=remote_get).count == 4
    np.testing.assert_array_equal(a[...], data + 1)
    # a numpy value deferred, and a 0-d dask array, return receipts too
    b = receipt_array()
    store(data, b, compute=False).compute(scheduler=remote_get)
    np.testing.assert_array_equal(b[...], data)
    g = z3.open_group(ReceiptStore(), mode="w")
    s = g.create_array("s", shape=(), dtype="f8")
    store(da.from_array(np.float64(7.5)), s, (), scheduler=remote_get)
    assert s[()] == 7.5


def test_in_process_writes_return_no_receipts():
    """On the threaded scheduler the tasks write through the client's own store: nothing to merge."""
    data, darr = source((8, 12), (4, 6))
    a = receipt_array()
    result = store(darr, a, compute=False).compute(scheduler="threads")
    assert result.count == 4 and result.receipts == ()
    np.testing.assert_array_equal(a[...], data)


def test_to_zarr_merges_receipts_on_compute_and_returns_them_when_deferred():
    import xarray as xr

    data, darr = source((8, 12), (4, 6))
    ds = xr.Dataset({"v": (("y", "x"), darr)})
    zstore = ReceiptStore()
    with dask.config.set(scheduler=remote_get):
        z3.to_zarr(ds, zstore, mode="w", encoding={"v": {"chunks": (4, 6)}})
        np.testing.assert_array_equal(xr.open_dataset(zstore, engine="zarr3")["v"].values, data)
        appended = xr.Dataset({"v": (("y", "x"), darr[:4] * 3)})
        z3.to_zarr(appended, zstore, append_dim="y")
        np.testing.assert_array_equal(z3.open_array(zstore, path="v")[8:], data[:4] * 3)

        d = z3.to_zarr(
            xr.Dataset({"v": (("y", "x"), darr * 5)}), zstore, region={"y": slice(0, 8)}, compute=False
        )
        receipts = d.compute()
    assert len(receipts) == 1  # combined into one
    np.testing.assert_array_equal(z3.open_array(zstore, path="v")[:8], data)  # not merged yet
    zstore.merge_receipts(receipts)
    np.testing.assert_array_equal(z3.open_array(zstore, path="v")[:8], data * 5)
    # a store without receipts: the deferred write computes to None, as before
    plain = z3.to_zarr(ds, MemoryStore(), mode="w", compute=False)
    assert plain.compute(scheduler="sync") is None


def test_a_deep_tree_combines_the_receipts_at_every_level(monkeypatch):
    monkeypatch.setattr(tree_module, "FAN_IN", 2)  # 20 shards: five levels of partial sums
    for chunks in [(4, 6), (8, 12)]:  # Blockwise path, then one task per piece of a block
        a = new_array(ReceiptStore(), shape=(20, 24), chunks=(2, 3), shards=(4, 6))
        data, darr = source(shape=(20, 24), chunks=chunks)
        ReceiptStore.combined.clear()
        (result,) = dask.compute(store(darr, a, compute=False), scheduler=remote_get)
        assert result.count == 20 and len(result.receipts) == 1  # one receipt reaches the client
        assert len(ReceiptStore.combined) == 19  # its 21 nodes less the two with one child
        changed, _ = result.receipts[0]
        assert len([k for k in changed if "/c/" in k]) == 20  # every shard written is in it
        a.store.merge_receipts(result.receipts)
        np.testing.assert_array_equal(a[...], data)


# ---- rectilinear chunk grids ------------------------------------------------------------------
def test_store_into_a_rectilinear_array(tmp_path):
    """dask writes follow a rectilinear grid's units: aligned blocks, align_chunks, regions; a
    misaligned block is refused naming the units."""
    data = np.arange(70, dtype="i4").reshape(10, 7)
    a = z3.create_array(tmp_path / "r.zarr", shape=(10, 7), dtype="i4", chunks=[[2, 3, 5], [4, 3]])
    store(da.from_array(data, chunks=((2, 3, 5), (4, 3))), a, scheduler="threads")
    np.testing.assert_array_equal(a[...], data)
    assert (
        len(
            write_keys(
                dict(
                    store(da.from_array(data, chunks=((2, 3, 5), (4, 3))), a, compute=False).__dask_graph__()
                )
            )
        )
        == 6
    )

    b = z3.create_array(tmp_path / "b.zarr", shape=(10, 7), dtype="i4", chunks=[[2, 3, 5], [4, 3]])
    with pytest.raises(ChunkAlignmentError):
        store(da.from_array(data, chunks=(4, 7)), b)
    assert list(b.store.list_prefix("c/")) == []
    store(da.from_array(data, chunks=(4, 7)), b, align_chunks=True, scheduler="threads")
    np.testing.assert_array_equal(b[...], data)
    store(da.from_array(-data[2:5], chunks=(3, 7)), b, region=(slice(2, 5), slice(None)), scheduler="threads")
    store(-data[5:], b, region=(slice(5, 10), slice(None)))  # numpy, written at once
    expected = data.copy()
    expected[2:] *= -1
    np.testing.assert_array_equal(z3.open_array(tmp_path / "b.zarr")[...], expected)


def test_a_failed_numpy_write_into_a_rectilinear_array_writes_nothing():
    """``store(numpy, region=)`` into a rectilinear array is one transaction, as on regular
    grids: failing after one of its units was written leaves the old values. (dask writes are
    one transaction per task, and a task writes one unit here.)"""
    old = np.arange(70, dtype="i4").reshape(10, 7)
    s = ChunkWriteFailingStore(2, lambda key: OSError(f"disk full writing {key!r}"), armed=False)
    a = z3.create_array(s, shape=(10, 7), dtype="i4", chunks=[[2, 3, 5], [4, 3]])
    a[...] = old
    s.armed = True
    with pytest.raises(OSError, match="disk full"):
        store(-old[:5], a, region=(slice(0, 5), slice(None)))  # 4 units
    s.armed = False
    z3.repair(s)
    np.testing.assert_array_equal(z3.open_array(s)[...], old)
