"""Store.move_prefix on object storage (moto's S3 behind a logging proxy), as a commit puts its
staged values in place: one server-side copy per key sent in one batch, then the sources
erased in bulk (DeleteObjects), not a copy and a delete per key; a re-run, with some or all
sources already moved, completes without error."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from servers import Proxy, s3_options

import zarr3_backend as z3
from zarr3_backend.stores import make_store

N = 40


@pytest.fixture
def proxy(moto):
    p = Proxy(moto.endpoint)
    p._server.socket.listen(256)  # a burst of connections is not held back by the backlog of 5
    yield p
    p.stop()


def _store(moto, proxy, backend):
    url = f"s3://{moto.create_bucket()}/root"
    options = {**s3_options(proxy.endpoint), "zarr3": {"backend": backend}}
    return make_store(url, mode="a", storage_options=options)


def _copies(proxy):
    """PUTs of chunk keys in place: server-side copies of staged values (nothing else writes there)."""
    return [
        r for r in proxy.log.snapshot() if r.method == "PUT" and "/v/c/" in r.path and ".z3-txn" not in r.path
    ]


def _deletes(proxy):
    return [
        r
        for r in proxy.log.snapshot()
        if r.method == "DELETE" or (r.method == "POST" and "delete" in r.query)
    ]


@pytest.mark.parametrize("backend", ["obstore", "fsspec"])
def test_staged_values_are_copied_then_erased_in_bulk(moto, proxy, backend):
    store = _store(moto, proxy, backend)
    staged = {f".z3-txn/t1/data/v/c/{i}/0": f"value {i}".encode() for i in range(N)}
    store.set_many({**staged, "v/c/0/0": b"old"})
    proxy.log.clear()
    store.move_prefix(".z3-txn/t1/data/", "")
    assert len(_copies(proxy)) == N
    assert len(_deletes(proxy)) <= 2  # one bulk request (a listing's page may add a second)
    assert store.get_many([f"v/c/{i}/0" for i in range(N)]) == list(staged.values())
    assert not list(store.list_prefix(".z3-txn/"))


@pytest.mark.parametrize("backend", ["obstore", "fsspec"])
def test_a_rerun_skips_sources_already_moved(moto, proxy, backend):
    store = _store(moto, proxy, backend)
    store.set_many({f".z3-txn/t1/data/v/c/{i}": b"%d" % i for i in range(6)})
    listed = list(store.list_prefix(".z3-txn/t1/data/"))
    store.erase_many(listed[:3])  # moved by an earlier run killed before its bulk erase
    store.set_many({f"v/c/{i}": b"%d" % i for i in range(3)})
    real_list = store.list_prefix
    store.list_prefix = lambda prefix: iter(listed)  # that run's listing, some keys gone since
    store.move_prefix(".z3-txn/t1/data/", "")
    store.list_prefix = real_list
    assert store.get_many([f"v/c/{i}" for i in range(6)]) == [b"%d" % i for i in range(6)]
    assert not list(store.list_prefix(".z3-txn/"))
    store.move_prefix(".z3-txn/t1/data/", "")  # nothing left: does nothing


@pytest.mark.parametrize("backend", ["obstore", "fsspec"])
def test_a_commit_on_s3_takes_two_requests_per_new_chunk(moto, proxy, backend):
    """A new 48-chunk variable: a staged PUT and a server-side copy per chunk, and a handful of
    requests for the rest of the commit (it took a delete per chunk more)."""
    store = _store(moto, proxy, backend)
    ds = xr.Dataset({"v": (("t", "x"), np.arange(48 * 8.0).reshape(48, 8))}).chunk({"t": 1})
    proxy.log.clear()
    z3.to_zarr(ds, store)
    chunks = 48
    assert len(_copies(proxy)) == chunks
    assert len(_deletes(proxy)) < 10
    assert len(proxy.log.snapshot()) < 2 * chunks + 60
    np.testing.assert_array_equal(xr.open_dataset(store, engine="zarr3")["v"].values, ds["v"].values)
