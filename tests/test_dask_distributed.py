"""Writes on a LocalCluster of two worker processes: stores and tasks pickle, no lock, and a
write task whose worker dies mid-write is retried and rewrites its shard whole."""

from __future__ import annotations

import os

import dask.array as da
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.dask import from_array, store
from zarr3_backend.stores import LocalStore

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


class DyingStore(LocalStore):
    """A LocalStore whose first write of a ``victim`` key in a worker process kills the process,
    tearing the file first when ``tear`` (as a non-atomic store would leave it).

    The marker file makes the failure happen once: the retried task writes normally.
    """

    def __init__(self, root, marker, victim, tear=True, test_pid=None, *, read_only=False):
        super().__init__(root, read_only=read_only)
        self.marker = marker
        self.victim = victim
        self.tear = tear
        self.test_pid = os.getpid() if test_pid is None else test_pid  # never kill the test itself

    def __reduce__(self):
        args = (self.root, self.marker, self.victim, self.tear, self.test_pid)
        return DyingStore, args, {"read_only": self.read_only}

    def __setstate__(self, state):
        self.read_only = state["read_only"]

    def _victim(self, key):  # the key itself, or its staged copy (to_zarr stages, then commits)
        return key.startswith(self.victim) or f"/data/{self.victim}" in key

    def set_many(self, items):
        hit = [k for k in items if self._victim(k)]
        if hit and not os.path.exists(self.marker) and os.getpid() != self.test_pid:
            with open(self.marker, "w") as f:
                f.write(str(os.getpid()))
            if self.tear:
                path = os.path.join(self.root, *hit[0].split("/"))
                os.makedirs(os.path.dirname(path), exist_ok=True)
                data = bytes(items[hit[0]])
                with open(path, "wb") as f:
                    f.write(data[: len(data) // 2])
            os._exit(1)
        super().set_many(items)

    def set(self, key, value):
        self.set_many({key: value})

    def set_if(self, key, value, expected):  # a partial shard rewrite is a conditional write
        if self._victim(key) and not os.path.exists(self.marker) and os.getpid() != self.test_pid:
            with open(self.marker, "w") as f:
                f.write(str(os.getpid()))
            os._exit(1)
        return super().set_if(key, value, expected)


@pytest.fixture(scope="module")
def client():
    import distributed

    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0", silence_logs=40
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


def climate(ntime=24, nlat=8, nlon=12, seed=0):
    rng = np.random.default_rng(seed)
    return xr.Dataset(
        {
            "t2m": (
                ("time", "lat", "lon"),
                (250 + 40 * rng.random((ntime, nlat, nlon))).astype("float32"),
                {"units": "K"},
            ),
            "tp": (("time", "lat", "lon"), rng.random((ntime, nlat, nlon)), {"units": "m"}),
        },
        coords={
            "time": pd.date_range("2000-01-01", periods=ntime, freq="D"),
            "lat": np.linspace(-87.5, 87.5, nlat),
            "lon": np.arange(nlon) * 30.0,
        },
    )


def test_sharded_round_trip_on_two_worker_processes(client, tmp_path, capsys):
    ds = climate()
    src = ds.chunk({"time": 8, "lat": 8, "lon": 6})
    encoding = {"t2m": {"chunks": (4, 4, 6), "shards": (8, 8, 6)}, "tp": {"chunks": (8, 8, 6)}}
    z3.to_zarr(src, tmp_path / "out.zarr", mode="w", encoding=encoding, progress=True)
    assert "100%" in capsys.readouterr().out  # distributed's progress bar
    for engine in ("zarr3", "zarr"):
        back = xr.open_dataset(tmp_path / "out.zarr", engine=engine).load()
        xr.testing.assert_identical(back, ds)
    # the graph builders directly: read on the workers, write with rechunking to shard boundaries
    a = z3.open_array(tmp_path / "out.zarr", "t2m")
    b = z3.create_array(
        tmp_path / "copy.zarr",
        "t2m",
        shape=a.shape,
        dtype=a.dtype,
        chunks=(2, 2, 2),
        shards=(6, 4, 4),
        dimension_names=a.dimension_names,
    )
    store(from_array(a), b, align_chunks=True)
    np.testing.assert_array_equal(z3.open_array(tmp_path / "copy.zarr", "t2m")[...], ds.t2m.values)


def test_worker_killed_mid_write_is_retried_and_reads_back_exactly(client, tmp_path):
    ds = climate(ntime=32)
    marker = str(tmp_path / "died-once")
    root = str(tmp_path / "out.zarr")
    dying = DyingStore(root, marker, victim="t2m/c/")
    encoding = {"t2m": {"chunks": (4, 4, 6), "shards": (8, 8, 6)}}
    z3.to_zarr(ds.chunk({"time": 8, "lat": 8, "lon": 6}), dying, mode="w", encoding=encoding)
    assert os.path.exists(marker)  # a worker process really died while writing a shard
    assert int(open(marker).read()) != os.getpid()
    back = xr.open_dataset(root, engine="zarr3").load()
    xr.testing.assert_identical(back, ds)
    np.testing.assert_array_equal(z3.open_array(root, "t2m")[...], ds.t2m.values)


def test_an_append_whose_worker_dies_in_the_partial_shard_rewrite_completes_exactly(client, tmp_path):
    """The append starts inside shard [4, 8) of ``t``: its task reads that shard, merges rows
    6..7 and writes it back. The worker dies before the write; the retry does it all again
    from the intact shard."""
    rng = np.random.default_rng(5)
    jobs = [
        xr.Dataset(
            {"t": (("time", "x"), rng.random((n, 6)).astype("float32"))},
            coords={"time": pd.date_range(start, periods=n, freq="D")},
        )
        for start, n in (("2000-01-01", 6), ("2000-01-07", 10))
    ]
    root = str(tmp_path / "a.zarr")
    marker = str(tmp_path / "died-once")
    z3.to_zarr(jobs[0], root, encoding={"t": {"chunks": (2, 3), "shards": (4, 6)}})  # here, not on a worker
    dying = DyingStore(root, marker, victim="t/c/1/0", tear=False)
    z3.to_zarr(jobs[1].chunk({"time": (2, 4, 4)}), dying, append_dim="time")
    assert int(open(marker).read()) != os.getpid()  # a worker died rewriting the partial shard
    expected = xr.concat(jobs, "time")
    for engine in ("zarr3", "zarr"):
        xr.testing.assert_identical(xr.open_dataset(root, engine=engine).load(), expected)


def test_from_array_never_serves_an_earlier_read_held_by_the_cluster(client, tmp_path):
    a = z3.create_array(tmp_path / "s.zarr", "v", shape=(8,), dtype="float64", chunks=(4,))
    a[...] = 1.0
    held = from_array(a).persist()  # the cluster keeps these results under their keys
    from distributed import wait

    wait(held)  # persist returns at once: let the reads finish before the rewrite
    store(da.full((8,), 2.0, chunks=4), a)
    reopened = z3.open_array(tmp_path / "s.zarr", "v")  # same store, path and metadata as `a`
    np.testing.assert_array_equal(from_array(reopened).compute(), np.full(8, 2.0))
    np.testing.assert_array_equal(held.compute(), np.full(8, 1.0))  # what was read then
