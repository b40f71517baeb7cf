"""Object storage for real: zarr3_backend over s3fs against moto's S3 server on 127.0.0.1.

Request counts, faults (5xx, denied access, stalls, a server that goes away) come from the
logging proxy in ``servers.py`` placed between s3fs and moto.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import pickle
import re
import subprocess
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import fsspec
import numpy as np
import pandas as pd
import pytest
import s3fs  # noqa: F401
import xarray as xr
from servers import Proxy, Request, free_port, s3_options

import zarr3_backend as z3
from zarr3_backend.byte_range import ByteRange
from zarr3_backend.errors import StoreError
from zarr3_backend.stores import FsspecStore, StoreArgumentError, make_store
from zarr3_backend.stores.fsspec_errors import (
    BucketNotFoundError,
    StoreAccessError,
    StoreTimeoutError,
    StoreUnreachableError,
    error_class,
    is_endpoint_down,
    is_range_refused,
    is_transient,
    is_unsatisfiable_range,
)
from zarr3_backend.stores.fsspec_options import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_RETRIES,
)


@pytest.fixture(autouse=True)
def _fsspec_backend(monkeypatch):
    """These tests exercise FsspecStore (request counts, faults): URLs resolve to it, not to
    ObstoreStore (whose twins are in tests/test_obstore.py)."""
    monkeypatch.setenv("ZARR3_STORE_BACKEND", "fsspec")


@pytest.fixture
def bucket(moto) -> str:
    return moto.create_bucket()


@pytest.fixture
def proxy(moto):
    p = Proxy(moto.endpoint)
    yield p
    p.stop()


def chunk_requests(log_entries: list[Request], method: str = "GET") -> list[Request]:
    return [r for r in log_entries if r.method == method and "/c/" in r.path]


def is_listing(r: Request) -> bool:
    return r.method == "GET" and "list-type=2" in r.query


def fs_options(opts: dict) -> dict:
    """What reaches the filesystem: storage_options without the store's own section."""
    return {k: v for k, v in opts.items() if k != "zarr3"}


def climate(ntime: int = 6, nlat: int = 4, nlon: int = 8, seed: int = 0) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    return xr.Dataset(
        {
            "t2m": (
                ("time", "lat", "lon"),
                (250 + 40 * rng.random((ntime, nlat, nlon))).astype("f4"),
                {"units": "K"},
            ),
            "tp": (("time", "lat", "lon"), rng.random((ntime, nlat, nlon)), {"units": "m"}),
        },
        coords={
            "time": pd.date_range("2000-01-01", periods=ntime, freq="D"),
            "lat": np.linspace(-60.0, 60.0, nlat),
            "lon": np.arange(nlon) * 45.0,
        },
        attrs={"title": "s3 round trip"},
    )


# ---- hierarchy, arrays, listing -----------------------------------------------------------------
def test_chunked_array_round_trip_and_listing(moto, bucket):
    url, opts = f"s3://{bucket}/data.zarr", s3_options(moto.endpoint)
    g = z3.open_group(url, mode="w", storage_options=opts, attributes={"source": "moto"})
    a = g.create_array(
        "t", shape=(10, 12), dtype="f4", chunks=(4, 5), fill_value=np.nan, dimension_names=("y", "x")
    )
    data = np.arange(120, dtype="f4").reshape(10, 12)
    a[...] = data
    a[2:7, 3:9] = -1  # a partial write: read-modify-write of the chunks it touches
    data[2:7, 3:9] = -1

    back = z3.open_group(url, mode="r", storage_options=opts)
    assert back.attrs["source"] == "moto" and list(back) == ["t"]
    t = back["t"]
    assert t.dimension_names == ("y", "x") and t.chunks == (4, 5)
    np.testing.assert_array_equal(t[...], data)
    np.testing.assert_array_equal(t[3:9:2, -4:], data[3:9:2, -4:])

    expected = {f"t/c/{i}/{j}" for i in range(3) for j in range(3)} | {"t/zarr.json", "zarr.json"}
    assert set(back.store.list()) == expected
    assert sorted(back.store.list_dir("")) == ["t", "zarr.json"]
    assert sorted(back.store.list_prefix("t/c/2/")) == ["t/c/2/0", "t/c/2/1", "t/c/2/2"]
    with pytest.raises(z3.errors.ReadOnlyError):
        t[0, 0] = 5
    assert t.store.storage_options == opts  # passed through unchanged


def test_sharded_array_is_one_put_per_shard_and_reads_back(moto, bucket, proxy):
    url, opts = f"s3://{bucket}/data.zarr", s3_options(proxy.endpoint)
    a = z3.create_array(
        url, "s", shape=(16, 16), dtype="i4", chunks=(4, 4), shards=(8, 8), storage_options=opts
    )
    data = np.arange(256, dtype="i4").reshape(16, 16)
    proxy.log.clear()
    a[...] = data
    # each shard is uploaded once, staged, then copied into place by the server (CopyObject is a
    # PUT without a body); the rest are the commit's small documents
    puts = [r.path for r in proxy.log.of("PUT") if "/s/c/" in r.path]
    staged = sorted(p.rsplit("s/", 1)[1] for p in puts if "/.z3-txn/" in p)
    placed = sorted(p.rsplit("s/", 1)[1] for p in puts if "/.z3-txn/" not in p)
    assert staged == placed == ["c/0/0", "c/0/1", "c/1/0", "c/1/1"]
    assert not a.store.exists(".z3-txn") and not list(a.store.list_prefix(".z3-txn/"))

    back = z3.open_array(url, "s", storage_options=s3_options(moto.endpoint))
    assert back.shards == (8, 8) and back.chunks == (4, 4)
    np.testing.assert_array_equal(back[...], data)
    np.testing.assert_array_equal(back[5:11, 3:13], data[5:11, 3:13])
    assert back[13, 2] == data[13, 2]


def test_append_by_resize_and_write(moto, bucket, proxy):
    url, opts = f"s3://{bucket}/data.zarr", s3_options(proxy.endpoint)
    a = z3.create_array(url, "t", shape=(4, 6), dtype="i2", chunks=(2, 3), storage_options=opts)
    first = np.arange(24, dtype="i2").reshape(4, 6)
    a[...] = first
    extra = -np.arange(18, dtype="i2").reshape(3, 6)
    proxy.log.clear()
    a.resize((7, 6))
    a[4:7] = extra
    written = [r.path for r in proxy.log.of("PUT") if "/.z3-txn/" not in r.path]
    chunks = sorted(p.rsplit("t/", 1)[1] for p in written if "/t/c/" in p)
    assert chunks == ["c/2/0", "c/2/1", "c/3/0", "c/3/1"]  # old chunks untouched

    back = z3.open_array(url, "t", storage_options=opts)
    assert back.shape == (7, 6)
    np.testing.assert_array_equal(back[...], np.concatenate([first, extra]))

    back = z3.open_array(url, "t", mode="r+", storage_options=opts)
    back.resize((2, 6))  # shrinking deletes the objects wholly outside
    assert sorted(back.store.list_prefix("t/c/")) == ["t/c/0/0", "t/c/0/1"]
    grown = z3.open_array(url, "t", mode="r+", storage_options=opts)
    grown.resize((6, 6))
    expected = np.zeros((6, 6), "i2")
    expected[:2] = first[:2]
    np.testing.assert_array_equal(grown[...], expected)


def test_missing_chunks_read_as_fill_one_get_each_and_nothing_else(moto, bucket, proxy):
    url, opts = f"s3://{bucket}/data.zarr", s3_options(proxy.endpoint)
    a = z3.create_array(
        url, "t", shape=(6, 6), dtype="f8", chunks=(2, 2), fill_value=-9.0, storage_options=opts
    )
    a[2:4, 2:4] = 1.0
    proxy.log.clear()
    out = a[...]
    expected = np.full((6, 6), -9.0)
    expected[2:4, 2:4] = 1.0
    np.testing.assert_array_equal(out, expected)
    log = proxy.log.snapshot()
    assert len(log) == 9 and all(r.method == "GET" and "/c/" in r.path for r in log)
    assert sorted(r.status for r in log) == [206] + [404] * 8


def test_batched_reads_are_concurrent_and_bounded_by_batch_size(moto, bucket, proxy):
    url = f"s3://{bucket}/data.zarr"
    writer = FsspecStore.from_url(url, s3_options(moto.endpoint))
    values = {f"k/{i}": bytes([i]) * (100 + i) for i in range(12)}
    writer.set_many(values)
    store = FsspecStore.from_url(url, s3_options(proxy.endpoint), batch_size=3)
    proxy.delay = 0.2  # hold each request so overlapping ones are seen overlapping
    got = store.get_many([*values, "k/missing"])
    assert got == [*values.values(), None]
    assert 2 <= proxy.log.max_in_flight <= 3
    assert len(proxy.log.of("GET")) == 13
    assert pickle.loads(pickle.dumps(store)).batch_size == 3


def test_batched_writes_are_bounded_by_batch_size(moto, bucket, proxy):
    url = f"s3://{bucket}/data.zarr"
    store = FsspecStore.from_url(url, s3_options(proxy.endpoint, zarr3={"batch_size": 3}))
    assert store.batch_size == 3
    values = {f"k/{i}": bytes([i]) * (50 + i) for i in range(12)}
    proxy.delay = 0.2
    store.set_many(values)
    assert 2 <= proxy.log.max_in_flight <= 3
    assert sorted(r.path for r in proxy.log.of("PUT")) == sorted(f"/{bucket}/data.zarr/{k}" for k in values)
    assert FsspecStore.from_url(url, s3_options(moto.endpoint)).get_many(list(values)) == list(
        values.values()
    )


def test_writes_pass_bytes_through_and_copy_views_only_for_botocore(moto, bucket, monkeypatch):
    store = FsspecStore.from_url(f"s3://{bucket}/data.zarr", s3_options(moto.endpoint))
    seen = []
    put = store.fs._pipe_file

    async def spy(path, data, **kwargs):
        seen.append(data)
        return await put(path, data, **kwargs)

    monkeypatch.setattr(store.fs, "_pipe_file", spy)
    payload, mutable = b"x" * 1000, bytearray(b"abc")
    values = np.arange(10, dtype="f8")
    store.set("b", payload)
    store.set_many({"ba": mutable, "view": memoryview(values)})
    assert seen[0] is payload and any(s is mutable for s in seen)  # no copy
    assert [s for s in seen if type(s) is bytes and s == values.tobytes()]  # botocore takes no views
    assert store.get_many(["b", "ba", "view"]) == [payload, b"abc", values.tobytes()]

    local = FsspecStore(fsspec.filesystem("memory"), f"/{uuid.uuid4().hex}")
    written = []
    monkeypatch.setattr(local.fs, "pipe_file", lambda path, value, **kw: written.append(value))
    local.set("view", memoryview(values))
    assert written[0].obj is values and written[0].format == "B"  # a flat view of the caller's data


def test_anonymous_access_to_a_public_bucket(moto, bucket):
    url = f"s3://{bucket}/public.zarr"
    a = z3.create_array(
        url, "t", shape=(4, 6), dtype="i2", chunks=(2, 3), storage_options=s3_options(moto.endpoint)
    )
    a[...] = np.arange(24, dtype="i2").reshape(4, 6)
    anon = s3_options(moto.endpoint, anon=True)
    with pytest.raises(StoreAccessError, match=re.escape(f"{url}/zarr.json")):
        z3.open_group(url, mode="r", storage_options=anon)  # still private
    moto.make_public(bucket)
    g = z3.open_group(url, mode="r", storage_options=anon)
    assert g.store.storage_options == anon and "key" not in g.store.storage_options
    assert list(g) == ["t"]
    np.testing.assert_array_equal(g["t"][...], np.arange(24, dtype="i2").reshape(4, 6))


def test_consolidated_open_is_one_get_and_never_lists(moto, bucket, proxy):
    url = f"s3://{bucket}/data.zarr"
    g = z3.open_group(url, mode="w", storage_options=s3_options(moto.endpoint))
    g.create_array("a", shape=(4,), dtype="i4", chunks=(2,))
    sub = g.create_group("sub", attributes={"level": 1})
    sub.create_array("b", shape=(3, 3), dtype="f4", chunks=(3, 3))
    z3.consolidate_metadata(url, storage_options=s3_options(moto.endpoint))

    proxy.log.clear()
    back = z3.open_group(url, mode="r", storage_options=s3_options(proxy.endpoint))
    members = back.members(max_depth=None)
    assert sorted(members) == ["a", "sub", "sub/b"]
    assert back["sub/b"].shape == (3, 3) and back["sub"].attrs["level"] == 1
    log = proxy.log.snapshot()
    assert [(r.method, r.path) for r in log] == [("GET", f"/{bucket}/data.zarr/zarr.json")]


def test_creating_nodes_checks_existence_by_one_ranged_get_never_a_head(moto, bucket, proxy):
    url, opts = f"s3://{bucket}/new.zarr", s3_options(proxy.endpoint)
    steps = {
        "open_group(mode='w')": lambda: z3.open_group(url, mode="w", storage_options=opts),
        "create_group": lambda: z3.create_group(url, "sub", storage_options=opts),
        "create_array": lambda: z3.create_array(url, "sub/x", shape=(4,), dtype="i4", storage_options=opts),
    }
    checked = {
        "open_group(mode='w')": "zarr.json",
        "create_group": "sub/zarr.json",
        "create_array": "sub/x/zarr.json",
    }
    for step, run in steps.items():
        proxy.log.clear()
        run()
        log = proxy.log.snapshot()
        checks = [r for r in log if r.method == "GET" and r.range == "bytes=0-0"]
        assert [r.path.rsplit("new.zarr/", 1)[1] for r in checks] == [checked[step]], step
        assert not [r for r in log if r.method == "HEAD"], step
        assert len([r for r in log if is_listing(r)]) <= 1, step  # was 3 LISTs: s3fs' isfile and ls
        assert len([r for r in log if r.method == "PUT"]) == 1, step
        reads = [r for r in log if r.method == "GET" and not is_listing(r)]
        assert all(r.path.endswith("zarr.json") for r in reads), step  # the node and its parents only
        assert len(log) == len(reads) + len([r for r in log if is_listing(r)]) + 1, step
    assert sorted(z3.open_group(url, mode="r", storage_options=opts).members(max_depth=None)) == [
        "sub",
        "sub/x",
    ]


def test_exists_many_is_one_ranged_get_per_key(moto, bucket, proxy):
    store = FsspecStore.from_url(f"s3://{bucket}/data.zarr", s3_options(proxy.endpoint))
    store.set_many({"full": b"abc", "empty": b"", "a/b/c": b"deep"})
    proxy.log.clear()
    assert store.exists_many(["full", "empty", "missing", "a/b", "a/b/c"]) == [True, True, False, False, True]
    assert store.exists("empty") and not store.exists("missing")
    log = proxy.log.snapshot()
    assert len(log) == 7 and all(r.method == "GET" and r.range == "bytes=0-0" and not r.query for r in log)
    assert sorted(r.status for r in log) == [206, 206, 404, 404, 404, 416, 416]  # empty: 416, yet it exists
    assert store.get_partial_values([("empty", ByteRange(0, 0)), ("missing", ByteRange(3, 0))]) == [b"", None]


def test_refused_ranges_fall_back_by_size_and_nothing_else_does(moto, bucket, proxy):
    url = f"s3://{bucket}/data.zarr"
    store = FsspecStore.from_url(url, s3_options(proxy.endpoint))
    store.set_many({"e/0": b"", "e/1": b"", "full": b"0123456789"})
    proxy.log.clear()
    got = store.get_partial_values(
        [("e/0", None), ("e/1", ByteRange(0, 5)), ("full", ByteRange(20, 5)), ("full", ByteRange.suffix(4))]
    )
    assert got == [b"", b"", b"", b"6789"]
    log = proxy.log.snapshot()
    refused = [r for r in log if r.status == 416]
    assert len(refused) == 3 and [r.method for r in log].count("GET") == 4
    assert sorted(r.path for r in log if r.method == "HEAD") == sorted(r.path for r in refused)

    a = z3.create_array(
        url, "t", shape=(8, 8), dtype="i4", chunks=(2, 2), storage_options=s3_options(moto.endpoint)
    )
    a[...] = 1
    reader = z3.open_array(url, "t", storage_options=s3_options(proxy.endpoint))
    proxy.deny(lambda r: "/c/" in r.path)
    proxy.log.clear()
    with pytest.raises(StoreAccessError, match=re.escape(f"{url}/t/c/")):
        reader[...]
    # denied: at most one GET per chunk (the stream stops sending once the first refusal reaches
    # the reader), no size lookup, no second GET
    log = proxy.log.snapshot()
    assert 1 <= len(log) <= 16 and all(r.method == "GET" and r.status == 403 for r in log)
    assert len({r.path for r in log}) == len(log)


def test_open_dataset_on_a_consolidated_store_is_one_get(moto, bucket, proxy):
    url = f"s3://{bucket}/data.zarr"
    ds = climate().drop_vars(["time", "lat", "lon"])  # no index coordinates: nothing is loaded eagerly
    z3.to_zarr(ds, url, mode="w", consolidated=True, storage_options=s3_options(moto.endpoint))
    proxy.log.clear()
    lazy = xr.open_dataset(url, engine="zarr3", storage_options=s3_options(proxy.endpoint))
    assert set(lazy.data_vars) == {"t2m", "tp"}
    assert [(r.method, r.path) for r in proxy.log.snapshot()] == [("GET", f"/{bucket}/data.zarr/zarr.json")]
    xr.testing.assert_identical(lazy.load(), ds)
    assert all(r.method == "GET" and "/c/" in r.path for r in proxy.log.snapshot()[1:])


def test_xarray_round_trip_sharded_and_appended(moto, bucket):
    url, opts = f"s3://{bucket}/climate.zarr", s3_options(moto.endpoint)
    ds = climate(ntime=8)
    encoding = {"t2m": {"chunks": (2, 2, 4), "shards": (4, 4, 8)}, "tp": {"chunks": (4, 4, 4)}}
    z3.to_zarr(ds.isel(time=slice(0, 4)), url, mode="w", encoding=encoding, storage_options=opts)
    z3.to_zarr(ds.isel(time=slice(4, 8)), url, append_dim="time", storage_options=opts)

    back = xr.open_dataset(url, engine="zarr3", storage_options=opts)
    assert back.t2m.encoding["shards"] == (4, 4, 8)
    xr.testing.assert_identical(back.load(), ds)
    lazy = xr.open_dataset(url, engine="zarr3", storage_options=opts, chunks={})
    assert lazy.t2m.chunks == ((8,), (4,), (8,))  # object storage: tasks of several whole shards
    xr.testing.assert_identical(lazy.compute(), ds)
    with z3.settings.using(remote_task_bytes=0):
        lazy = xr.open_dataset(url, engine="zarr3", storage_options=opts, chunks={})
    assert lazy.t2m.chunks == ((4, 4), (4,), (8,))  # one dask task per shard
    xr.testing.assert_identical(lazy.compute(), ds)


@pytest.mark.interop
def test_zarr_python_reads_what_we_wrote_to_s3(moto, bucket):
    import zarr

    url, opts = f"s3://{bucket}/data.zarr", s3_options(moto.endpoint)
    data = np.arange(200, dtype="f8").reshape(10, 20)
    a = z3.create_array(
        url, "x", shape=data.shape, dtype=data.dtype, chunks=(2, 5), shards=(4, 10), storage_options=opts
    )
    a[...] = data
    theirs = zarr.open_array(url, path="x", mode="r", storage_options=opts)
    np.testing.assert_array_equal(theirs[...], data)


# ---- request counting on sharded reads ----------------------------------------------------------
def _sharded(url, opts):
    a = z3.create_array(
        url, "s", shape=(16, 16), dtype="i4", chunks=(4, 4), shards=(8, 8), storage_options=opts
    )
    data = np.arange(256, dtype="i4").reshape(16, 16)
    a[...] = data
    return data


def test_reading_one_inner_chunk_is_at_most_two_ranged_gets(moto, bucket, proxy):
    url = f"s3://{bucket}/data.zarr"
    data = _sharded(url, s3_options(moto.endpoint))
    a = z3.open_array(url, "s", storage_options=s3_options(proxy.endpoint))
    proxy.log.clear()
    assert a[1, 2] == data[1, 2]
    log = proxy.log.snapshot()
    assert 1 <= len(log) <= 2
    assert all(r.method == "GET" and r.path.endswith("/s/c/0/0") and r.range for r in log)


def test_cached_shard_index_makes_the_next_inner_chunk_one_get(moto, bucket, proxy):
    url = f"s3://{bucket}/data.zarr"
    data = _sharded(url, s3_options(moto.endpoint))
    a = z3.open_array(url, "s", storage_options=s3_options(proxy.endpoint))
    assert a[1, 2] == data[1, 2]  # reads the index of shard (0, 0)
    proxy.log.clear()
    assert a[6, 5] == data[6, 5]  # another inner chunk of the same shard
    log = proxy.log.snapshot()
    assert len(log) == 1 and log[0].range and log[0].path.endswith("/s/c/0/0")


# ---- threads, pickling, fork, a two-process cluster --------------------------------------------
def test_threaded_writes_through_one_store(moto, bucket, proxy):
    url = f"s3://{bucket}/data.zarr"
    a = z3.create_array(
        url,
        "t",
        shape=(32, 12),
        dtype="f8",
        chunks=(2, 6),
        shards=(4, 12),
        storage_options=s3_options(proxy.endpoint),
    )
    data = np.random.default_rng(1).random((32, 12))
    proxy.log.clear()
    with ThreadPoolExecutor(4) as pool:  # each thread owns whole shards
        list(pool.map(lambda i: a.__setitem__(slice(i, i + 4), data[i : i + 4]), range(0, 32, 4)))
    shard_puts = [r.path for r in chunk_requests(proxy.log.snapshot(), "PUT")]
    assert sorted(shard_puts) == sorted(f"/{bucket}/data.zarr/t/c/{i}/0" for i in range(8))
    np.testing.assert_array_equal(
        z3.open_array(url, "t", storage_options=s3_options(moto.endpoint))[...], data
    )


_UNPICKLER = """
import json, pickle, sys
store = pickle.loads(sys.stdin.buffer.read())
value = store.get("k")
store.set("from-child", b"written by the child")
print(json.dumps({
    "value": value.decode(), "url": store.url, "options": store.storage_options,
    "retries": store.retries, "batch_size": store.batch_size, "s3fs_retries": store.fs.retries,
}))
"""


def test_store_pickles_by_configuration_and_reconnects_in_another_process(moto, bucket):
    url = f"s3://{bucket}/data.zarr"
    opts = s3_options(moto.endpoint, zarr3={"retries": 2, "batch_size": 7})
    store = make_store(url, mode="a", storage_options=opts)
    store.set("k", b"value")
    blob = pickle.dumps(store)
    assert b"aiohttp" not in blob and b"aiobotocore" not in blob  # no session, no connection
    child = subprocess.run(
        [sys.executable, "-c", _UNPICKLER], input=blob, capture_output=True, timeout=120, check=False
    )
    assert child.returncode == 0, child.stderr.decode()
    assert json.loads(child.stdout) == {
        "value": "value",
        "url": url,
        "options": fs_options(opts),
        "retries": 2,
        "batch_size": 7,
        "s3fs_retries": 1,  # the rebuilt private instance is tuned too
    }
    assert store.get("from-child") == b"written by the child"


def _child_uses_inherited_store(store, array, queue) -> None:
    try:
        values = array[...].tolist()
        store.set("from-child", b"written after fork")
        queue.put(("ok", values))
    except BaseException as e:  # report anything to the parent
        queue.put(("error", f"{type(e).__name__}: {e}"))


def test_store_used_before_fork_works_in_the_forked_child(moto, bucket):
    url, opts = f"s3://{bucket}/data.zarr", s3_options(moto.endpoint)
    a = z3.create_array(url, "t", shape=(4, 4), dtype="i4", chunks=(2, 2), storage_options=opts)
    a[...] = np.arange(16).reshape(4, 4)
    assert a[...].sum() == 120  # the parent's event loop and session now exist
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_uses_inherited_store, args=(a.store, a, queue))
    child.start()
    status, payload = queue.get(timeout=60)
    child.join(timeout=30)
    assert status == "ok", payload
    assert payload == np.arange(16).reshape(4, 4).tolist()
    assert child.exitcode == 0
    assert a.store.get("from-child") == b"written after fork"  # and the parent still works


@pytest.mark.slow
@pytest.mark.distributed
def test_two_process_cluster_writes_and_reads(moto, bucket):
    import dask.array as da
    import distributed

    from zarr3_backend.dask import from_array
    from zarr3_backend.dask import store as dask_store

    url, opts = f"s3://{bucket}/data.zarr", s3_options(moto.endpoint)
    old, data = np.random.default_rng(2).random((2, 24, 16))
    a = z3.create_array(
        url, "t", shape=data.shape, dtype="f8", chunks=(4, 8), shards=(8, 16), storage_options=opts
    )
    a[...] = old
    assert a[1, 2] == old[1, 2]  # the client reads shard (0, 0) (and keeps its index)
    ds = climate(ntime=8)
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0", silence_logs=40
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        dask_store(da.from_array(data, chunks=(8, 16)), a)
        pids = set(client.run(os.getpid).values())
        assert len(pids) == 2 and os.getpid() not in pids  # the writes ran in other processes
        fresh = z3.open_array(url, "t", storage_options=opts)
        assert fresh[1, 2] == data[1, 2]  # the same shard, rewritten elsewhere: new values
        np.testing.assert_array_equal(fresh[...], data)
        np.testing.assert_array_equal(
            from_array(z3.open_array(url, "t", storage_options=opts)).compute(), data
        )

        z3.to_zarr(ds.chunk({"time": 4}), f"s3://{bucket}/ds.zarr", mode="w", storage_options=opts)
        back = xr.open_dataset(f"s3://{bucket}/ds.zarr", engine="zarr3", storage_options=opts, chunks={})
        xr.testing.assert_identical(back.compute(), ds)
    np.testing.assert_array_equal(z3.open_array(url, "t", storage_options=opts)[...], data)


# ---- errors -------------------------------------------------------------------------------------
def test_unreachable_endpoint_raises_typed_error_naming_the_url():
    url = "s3://some-bucket/data.zarr"
    opts = s3_options(f"http://127.0.0.1:{free_port()}", attempts=1, connect_timeout=1)
    with pytest.raises(StoreUnreachableError, match=re.escape(url)) as info:
        z3.open_group(url, mode="r", storage_options=opts)
    assert isinstance(info.value, StoreError) and isinstance(info.value, ConnectionError)
    with pytest.raises(StoreUnreachableError, match=re.escape(url)):
        z3.create_array(url, "x", shape=(2,), dtype="i1", storage_options=opts)


def test_missing_bucket_is_not_a_missing_key(moto):
    url, opts = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/data.zarr", s3_options(moto.endpoint)
    with pytest.raises(BucketNotFoundError, match=re.escape(url)):
        z3.open_group(url, mode="r", storage_options=opts)
    with pytest.raises(BucketNotFoundError, match=re.escape(url)):
        z3.create_array(url, "x", shape=(2,), dtype="i1", storage_options=opts)
    store = FsspecStore.from_url(url, opts)
    with pytest.raises(BucketNotFoundError, match=re.escape(url)):
        list(store.list())
    with pytest.raises(BucketNotFoundError, match=re.escape(url)):
        store.set("k", b"v")
    with pytest.raises(BucketNotFoundError, match=re.escape(url)):
        store.exists("k")


def test_denied_access_raises_typed_error_and_keeps_the_old_object(moto, bucket, proxy):
    url = f"s3://{bucket}/data.zarr"
    a = z3.create_array(
        url, "t", shape=(4, 4), dtype="i4", chunks=(2, 2), storage_options=s3_options(proxy.endpoint)
    )
    a[...] = 1
    old = a.store.get("t/c/1/0")
    proxy.deny(lambda r: r.method == "PUT" and r.path.endswith("/t/c/1/0"))
    with pytest.raises(StoreAccessError, match=re.escape(url) + ".*" + re.escape("/t/c/1/0")):
        a[...] = 2
    assert a.store.get("t/c/1/0") == old  # the denied object is untouched, never torn
    # the write failed while staging: none of it became visible, and its staging is gone
    np.testing.assert_array_equal(a[...], np.full((4, 4), 1))
    assert not list(a.store.list_prefix(".z3-txn/"))

    proxy.deny(lambda r: r.method == "GET")
    with pytest.raises(StoreAccessError, match=re.escape(f"{url}/zarr.json")):
        z3.open_group(url, mode="r", storage_options=s3_options(proxy.endpoint))


def test_stalled_server_raises_timeout_after_the_store_retries_only(moto, bucket, proxy):
    url = f"s3://{bucket}/data.zarr"
    FsspecStore.from_url(url, s3_options(moto.endpoint)).set("k", b"v")
    opts = s3_options(proxy.endpoint, attempts=None, read_timeout=1.0, zarr3={"retries": 1})
    shared = fsspec.filesystem("s3", **fs_options(opts))  # what fsspec hands everyone else
    proxy.stall(30, match=lambda r: r.method == "GET")
    store = FsspecStore.from_url(url, opts)
    with pytest.raises(StoreTimeoutError, match=re.escape(f"{url}/k")) as info:
        store.get("k")
    assert isinstance(info.value, TimeoutError)
    assert len(proxy.log.snapshot()) == 2  # one try, one retry: s3fs' and botocore's own retries are off
    assert store.fs is not shared and store.fs.retries == 1
    assert "retries" not in vars(shared)  # the shared instance was not tuned


def test_a_stalled_batch_stops_sending_after_the_first_timeouts(moto, bucket, proxy):
    url = f"s3://{bucket}/data.zarr"
    keys = [f"k/{i}" for i in range(12)]
    FsspecStore.from_url(url, s3_options(moto.endpoint)).set_many(dict.fromkeys(keys, b"v"))
    proxy.stall(30, match=lambda r: r.method == "GET")
    opts = s3_options(proxy.endpoint, attempts=None, read_timeout=1.0, zarr3={"retries": 1, "batch_size": 3})
    with pytest.raises(StoreTimeoutError, match=re.escape(url)):
        FsspecStore.from_url(url, opts).get_many(keys)
    assert 2 <= len(proxy.log.snapshot()) <= 6  # one window of 3 per attempt, not 12 / 3 windows of timeouts


def test_defaults_bound_timeouts_and_leave_one_retry_layer(moto, bucket, proxy):
    url = f"s3://{bucket}/data.zarr"
    FsspecStore.from_url(url, s3_options(moto.endpoint)).set("k", b"v")
    opts = s3_options(proxy.endpoint, attempts=None, connect_timeout=None, read_timeout=None)
    store = FsspecStore.from_url(url, opts)
    assert store.storage_options == opts  # as given; the defaults live on the private instance
    config = store.fs.connect().meta.config  # the botocore client actually built
    assert (config.connect_timeout, config.read_timeout) == (DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT)
    assert config.retries["total_max_attempts"] == 1
    proxy.fail(2, match=lambda r: r.method == "GET" and r.path.endswith("/k"))
    assert store.get("k") == b"v"
    assert [r.status for r in proxy.log.snapshot()] == [500, 500, 206]
    proxy.log.clear()
    proxy.fail(100, match=lambda r: r.path.endswith("/k"))
    with pytest.raises(StoreError, match=re.escape(f"{url}/k")):
        store.get("k")
    assert len(proxy.log.of("GET")) == DEFAULT_RETRIES + 1

    # the settings ride in storage_options wherever those go
    tuned = s3_options(proxy.endpoint, attempts=None, zarr3={"retries": 1, "batch_size": 16})
    g = z3.open_group(f"s3://{bucket}/g.zarr", mode="w", storage_options=tuned)
    assert (g.store.retries, g.store.batch_size) == (1, 16)
    assert g.store.storage_options == fs_options(tuned)
    proxy.log.clear()
    with pytest.raises(StoreError, match=re.escape(f"s3://{bucket}/g.zarr/k")):
        g.store.get("k")
    assert len(proxy.log.of("GET")) == 2


def test_server_stopped_mid_read_raises_typed_error(moto, bucket, proxy):
    url = f"s3://{bucket}/data.zarr"
    a = z3.create_array(
        url, "t", shape=(8, 8), dtype="i4", chunks=(2, 2), storage_options=s3_options(moto.endpoint)
    )
    a[...] = np.arange(64).reshape(8, 8)
    store = FsspecStore.from_url(url, s3_options(proxy.endpoint, attempts=2, connect_timeout=1), batch_size=2)
    b = z3.Array(store, "t", a.metadata)
    proxy.cut_after(5)  # 5 chunk reads get through, then the server is gone
    with pytest.raises(StoreUnreachableError, match=re.escape(url)):
        b[...]
    assert sum(r.status == 206 for r in proxy.log.snapshot()) == 5


def test_transient_500s_are_retried_for_reads_and_writes(moto, bucket, proxy):
    url = f"s3://{bucket}/data.zarr"
    a = z3.create_array(
        url, "t", shape=(4, 4), dtype="i4", chunks=(2, 2), storage_options=s3_options(proxy.endpoint)
    )
    data = np.arange(16, dtype="i4").reshape(4, 4)
    proxy.fail(2, match=lambda r: r.method == "PUT" and r.path.endswith("/t/c/0/1"))
    a[...] = data
    proxy.fail(
        2, status=503, code="SlowDown", match=lambda r: r.method == "GET" and r.path.endswith("/t/c/1/1")
    )
    proxy.log.clear()
    np.testing.assert_array_equal(a[...], data)
    statuses = [r.status for r in proxy.log.snapshot() if r.path.endswith("/t/c/1/1")]
    assert statuses == [503, 503, 206]


def test_persistent_500s_give_up_with_a_store_error_naming_the_key(moto, bucket, proxy):
    url = f"s3://{bucket}/data.zarr"
    store = FsspecStore.from_url(url, s3_options(proxy.endpoint, attempts=2))
    store.set("k", b"v")
    proxy.fail(100, match=lambda r: r.path.endswith("/k"))
    with pytest.raises(StoreError, match=re.escape(f"{url}/k")):
        store.get("k")
    assert 2 <= len(proxy.log.of("GET")) <= 4  # bounded: botocore's attempts, nothing endless


_WRITER = """
import sys, json, numpy as np, zarr3_backend as z3
url, opts = sys.argv[1], json.loads(sys.argv[2])
arrays = [z3.open_array(url, name, mode="r+", storage_options=opts) for name in ("chunked", "sharded")]
base = np.arange(256 * 256, dtype="f8").reshape(256, 256)
gen = 1
while True:
    gen += 1
    for a in arrays:
        a[...] = base + gen * 1e6
    print(gen, flush=True)
"""


@pytest.mark.slow
def test_killed_writer_leaves_every_object_old_or_new(moto, bucket, proxy):
    url = f"s3://{bucket}/data.zarr"
    opts = s3_options(moto.endpoint)
    base = np.arange(256 * 256, dtype="f8").reshape(256, 256)
    for name, shards in (("chunked", None), ("sharded", (128, 128))):
        a = z3.create_array(
            url, name, shape=(256, 256), dtype="f8", chunks=(64, 64), shards=shards, storage_options=opts
        )
        a[...] = base + 1e6
    proxy.delay = 0.02  # the writer spends its time mid-request: the kill lands there
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, url, json.dumps(s3_options(proxy.endpoint))],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        timer = threading.Timer(60, writer.kill)  # bound the test even if the writer hangs
        timer.start()
        seen = [writer.stdout.readline() for _ in range(2)]  # two whole generations written
        assert all(seen), "the writer died before writing"
        proxy.log.clear()
        while not proxy.log.of("PUT") and writer.poll() is None:  # kill after some new PUTs
            threading.Event().wait(0.01)
        writer.kill()
        timer.cancel()
    finally:
        writer.kill()
        writer.wait()
    gens = set()
    for name in ("chunked", "sharded"):
        values = z3.open_array(url, name, storage_options=opts)[...]
        for i in range(0, 256, 64):
            for j in range(0, 256, 64):
                block = values[i : i + 64, j : j + 64] - base[i : i + 64, j : j + 64]
                gen = block[0, 0] / 1e6
                assert gen == math.floor(gen) and np.all(block == block[0, 0]), (name, i, j)
                gens.add(gen)
    assert min(gens) >= 3  # generations 2 and 3 were complete before the kill


def _client_errors():
    import aiohttp
    import botocore.exceptions as bx
    import yarl

    def client_error(code, status):
        return bx.ClientError(
            {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject"
        )

    def http_error(status):
        url = yarl.URL("http://127.0.0.1/x")
        return aiohttp.ClientResponseError(aiohttp.RequestInfo(url, "GET", {}, url), (), status=status)

    def translated(cause, exc):  # what s3fs raises: a builtin error with the client error as cause
        exc.__cause__ = cause
        return exc

    return [
        (bx.EndpointConnectionError(endpoint_url="http://x"), StoreUnreachableError, True),
        (bx.ReadTimeoutError(endpoint_url="http://x"), StoreTimeoutError, True),
        (bx.ConnectTimeoutError(endpoint_url="http://x"), StoreTimeoutError, True),
        (aiohttp.ServerDisconnectedError(), StoreUnreachableError, True),
        (ConnectionResetError(104, "reset"), StoreUnreachableError, True),
        (translated(client_error("AccessDenied", 403), PermissionError("denied")), StoreAccessError, False),
        (
            translated(client_error("NoSuchBucket", 404), FileNotFoundError("gone")),
            BucketNotFoundError,
            False,
        ),
        (translated(client_error("InternalError", 500), OSError(5, "internal")), StoreError, True),
        (http_error(503), StoreError, True),
        (http_error(429), StoreError, True),
        (http_error(403), StoreAccessError, False),
        (FileNotFoundError("k"), StoreError, False),
        (ValueError("bad range"), StoreError, False),
        (bx.NoCredentialsError(), StoreAccessError, False),
        (
            bx.PartialCredentialsError(provider="env", cred_var="AWS_SECRET_ACCESS_KEY"),
            StoreAccessError,
            False,
        ),
    ]


@pytest.mark.parametrize(("exc", "kind", "transient"), _client_errors())
def test_client_exceptions_are_classified(exc, kind, transient):
    assert error_class(exc) is kind
    assert is_transient(exc) is transient


def test_refused_ranges_and_dead_endpoints_are_recognised():
    import aiohttp
    import botocore.exceptions as bx
    import yarl

    url = yarl.URL("http://127.0.0.1/x")
    info = aiohttp.RequestInfo(url, "GET", {}, url)
    invalid_range = bx.ClientError(
        {"Error": {"Code": "InvalidRange"}, "ResponseMetadata": {"HTTPStatusCode": 416}}, "GetObject"
    )
    translated = OSError(22, "The requested range is not satisfiable")
    translated.__cause__ = invalid_range
    denied = bx.ClientError(
        {"Error": {"Code": "AccessDenied"}, "ResponseMetadata": {"HTTPStatusCode": 403}}, "Get"
    )
    for exc in (translated, aiohttp.ClientResponseError(info, (), status=416), ValueError("no suffix")):
        assert is_range_refused(exc), exc
    # only a 416 says an empty value exists; a ValueError says nothing about the value
    assert is_unsatisfiable_range(translated) and not is_unsatisfiable_range(ValueError("no suffix"))
    for exc in (
        denied,
        PermissionError("denied"),
        FileNotFoundError("k"),
        aiohttp.ClientResponseError(info, (), status=503),
    ):
        assert not is_range_refused(exc), exc
    for exc in (
        bx.EndpointConnectionError(endpoint_url="x"),
        bx.ReadTimeoutError(endpoint_url="x"),
        ConnectionRefusedError(),
    ):
        assert is_endpoint_down(exc), exc
    for exc in (bx.ConnectionClosedError(endpoint_url="x"), aiohttp.ServerDisconnectedError(), denied):
        assert not is_endpoint_down(exc), exc  # a dropped connection: the next request may succeed


def test_missing_credentials_raise_an_access_error_naming_the_url(moto, bucket, monkeypatch):
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    url = f"s3://{bucket}/data.zarr"
    opts = {"client_kwargs": {"endpoint_url": moto.endpoint, "region_name": "us-east-1"}}
    with pytest.raises(StoreAccessError, match=re.escape(url)) as info:
        z3.open_group(url, mode="r", storage_options=opts)
    assert "NoCredentialsError" in str(info.value)


# ---- URLs and options ---------------------------------------------------------------------------
def test_any_fsspec_protocol_and_unknown_ones_name_the_url():
    url = f"memory://z3-test-s3/{uuid.uuid4().hex}/data.zarr"
    g = z3.open_group(url, mode="w")
    g.create_array("x", shape=(3,), dtype="i4")[...] = [1, 2, 3]
    assert z3.open_group(url, mode="r")["x"][...].tolist() == [1, 2, 3]
    with pytest.raises(StoreArgumentError, match=re.escape("gs://bucket/data.zarr")):
        z3.open_group("gs://bucket/data.zarr", mode="r", storage_options={"token": "anon"})


def test_store_options_are_validated():
    fs = FsspecStore.from_url("memory://x").fs
    for bad in ({"batch_size": 0}, {"batch_size": -1}, {"retries": -1}, {"retries": 1.5}):
        with pytest.raises(StoreArgumentError, match=next(iter(bad))):
            FsspecStore(fs, "/x", **bad)
        with pytest.raises(StoreArgumentError, match=next(iter(bad))):
            FsspecStore.from_url("s3://b/x", storage_options={"anon": True, "zarr3": bad})
    with pytest.raises(StoreArgumentError, match="'retry'"):
        z3.open_group("s3://b/x", mode="r", storage_options={"anon": True, "zarr3": {"retry": 2}})
    with pytest.raises(StoreArgumentError, match="retries given twice"):
        FsspecStore.from_url("s3://b/x", {"zarr3": {"retries": 2}}, retries=3)
    with pytest.raises(StoreArgumentError, match="zarr3"):
        FsspecStore.from_url("s3://b/x", {"zarr3": 2})
    store = FsspecStore.from_url("memory://x", {"zarr3": {"retries": 0, "batch_size": 2}}, retries=0)
    assert (store.retries, store.batch_size, store.storage_options) == (0, 2, {})
