"""Read-only access over HTTP(S) to stores written earlier, served by a local server with Range
support (``servers.RangeHTTPServer``) on 127.0.0.1."""

from __future__ import annotations

import os
import re

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from servers import Proxy, RangeHTTPServer, parse_range

import zarr3_backend as z3
from zarr3_backend.byte_range import ByteRange
from zarr3_backend.errors import ReadOnlyError, StoreError
from zarr3_backend.stores import FsspecStore, make_store
from zarr3_backend.stores.fsspec_errors import StoreTimeoutError, StoreUnreachableError
from zarr3_backend.stores.fsspec_options import DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT
from zarr3_backend.stores.fsspec_store import DEFAULT_RETRIES

T = np.arange(48, dtype="f4").reshape(6, 8)
S = np.arange(256, dtype="i4").reshape(16, 16)


def dataset() -> xr.Dataset:
    rng = np.random.default_rng(3)
    return xr.Dataset(
        {"t2m": (("time", "lat"), rng.random((4, 3)).astype("f4"), {"units": "K"})},
        coords={"time": pd.date_range("2001-01-01", periods=4), "lat": [-30.0, 0.0, 30.0]},
        attrs={"title": "over http"},
    )


def _files(root) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}


@pytest.fixture(autouse=True)
def _fsspec_backend(monkeypatch):
    """These tests exercise FsspecStore (request counts, faults): URLs resolve to it, not to
    ObstoreStore (whose twins are in tests/test_obstore.py)."""
    monkeypatch.setenv("ZARR3_STORE_BACKEND", "fsspec")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A directory with stores written earlier (local files), and a server for it."""
    root = tmp_path_factory.mktemp("www")
    g = z3.open_group(root / "data.zarr", mode="w", attributes={"origin": "local"})
    t = g.create_array("t", shape=(6, 8), dtype="f4", chunks=(2, 4), fill_value=np.nan)
    t[2:, :] = T[2:, :]  # chunks (0, *) never written: they read as the fill value
    g.create_array("s", shape=(16, 16), dtype="i4", chunks=(4, 4), shards=(8, 8))[...] = S
    g.create_group("sub").create_array("b", shape=(3,), dtype="i8")[...] = [7, 8, 9]
    z3.to_zarr(dataset(), root / "ds.zarr", mode="w", consolidated=True)
    server = RangeHTTPServer(root)
    yield server, root
    server.stop()


@pytest.fixture
def server(served):
    server, _ = served
    server.log.clear()
    return server


def test_group_over_http_reads_values_and_is_read_only(served, server):
    _, root = served
    before = _files(root)
    url = f"{server.url}/data.zarr"
    g = z3.open_group(url)  # default mode "a": still read-only over HTTP
    assert g.store.read_only and g.attrs["origin"] == "local"
    # no consolidated metadata here: the hierarchy is found through the server's listings
    assert sorted(g.members(max_depth=None)) == ["s", "sub", "sub/b", "t"]
    expected = T.copy()
    expected[:2] = np.nan
    np.testing.assert_array_equal(g["t"][...], expected)
    np.testing.assert_array_equal(g["s"][...], S)
    assert g["sub/b"][...].tolist() == [7, 8, 9]
    with pytest.raises(ReadOnlyError):
        g["t"][0, 0] = 1.0
    with pytest.raises(ReadOnlyError):
        g.create_array("new", shape=(2,), dtype="i1")
    with pytest.raises(ReadOnlyError):
        g.attrs["x"] = 1
    assert {r.method for r in server.log.snapshot()} <= {"GET", "HEAD"}
    assert _files(root) == before


@pytest.mark.parametrize("mode", ["w", "w-", "r+"])
def test_writing_modes_are_refused_before_any_request(server, mode):
    url = f"{server.url}/data.zarr"
    with pytest.raises(ReadOnlyError, match=re.escape(url)):
        z3.open_group(url, mode=mode)
    with pytest.raises(ReadOnlyError, match=re.escape(url)):
        make_store(url, mode=mode)
    assert server.log.snapshot() == []


def test_whole_chunks_are_one_get_and_missing_ones_one_404(server):
    a = z3.open_array(f"{server.url}/data.zarr", "t")
    server.log.clear()
    out = a[...]
    assert np.isnan(out[:2]).all() and (out[2:] == T[2:]).all()
    log = server.log.snapshot()
    assert sorted(r.path.rsplit("/t/", 1)[1] for r in log) == [
        f"c/{i}/{j}" for i in range(3) for j in range(2)
    ]
    assert sorted(r.status for r in log) == [206] * 4 + [404] * 2


def test_sharded_reads_use_a_suffix_request_then_a_range(server):
    a = z3.open_array(f"{server.url}/data.zarr", "s")
    server.log.clear()
    with z3.settings.using(round_trip_bytes=0):  # never the whole shard
        assert a[1, 2] == S[1, 2]
    first, second = server.log.snapshot()
    assert first.range.startswith("bytes=-") and first.status == 206  # the index, at the end
    assert parse_range(second.range, 10**6) is not None and not second.range.startswith("bytes=-")
    server.log.clear()
    assert a[6, 7] == S[6, 7]  # same shard: the index is cached
    assert [r.status for r in server.log.snapshot()] == [206]
    np.testing.assert_array_equal(a[3:13, 5:11], S[3:13, 5:11])


def test_a_read_inside_a_small_shard_fetches_it_whole_in_one_request(server):
    """A shard within ``round_trip_bytes`` whose index is not cached is one request, not a suffix
    request for its index and then a range; its index is cached from it."""
    a = z3.open_array(f"{server.url}/data.zarr", "s")
    server.log.clear()
    assert a[1, 2] == S[1, 2]
    (only,) = server.log.snapshot()
    assert only.method == "GET" and only.range in (None, "bytes=0-")  # fsspec asks from byte 0 on
    server.log.clear()
    assert a[6, 7] == S[6, 7]  # same shard: the index is cached, one ranged read
    (ranged,) = server.log.snapshot()
    assert ranged.status == 206 and not ranged.range.startswith("bytes=-")


def test_xarray_open_dataset_over_http(served, server):
    url = f"{server.url}/ds.zarr"
    ds = xr.open_dataset(url, engine="zarr3")
    xr.testing.assert_identical(ds.load(), dataset())
    lazy = xr.open_dataset(url, engine="zarr3", chunks={})
    assert lazy.t2m.chunks is not None
    xr.testing.assert_identical(lazy.compute(), dataset())
    assert {r.method for r in server.log.snapshot()} <= {"GET", "HEAD"}


def test_transient_503s_are_retried_then_given_up(server):
    store = FsspecStore.from_url(f"{server.url}/data.zarr")
    assert store.read_only and store.retries is None
    server.fail(2)
    assert store.get("sub/b/zarr.json") is not None
    assert [r.status for r in server.log.snapshot()] == [503, 503, 206]
    server.log.clear()
    server.fail(100)
    try:
        with pytest.raises(StoreError, match=re.escape(f"{server.url}/data.zarr/sub/b/zarr.json")):
            store.get("sub/b/zarr.json")
    finally:
        server.clear_faults()
    assert len(server.log.snapshot()) == DEFAULT_RETRIES + 1


def test_defaults_bound_timeouts_and_exists_is_one_ranged_get(server):
    store = FsspecStore.from_url(f"{server.url}/data.zarr")
    timeout = store.fs.client_kwargs["timeout"]  # a private instance: fsspec's shared one untouched
    assert (timeout.sock_connect, timeout.sock_read) == (DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT)
    assert store.storage_options == {}
    assert store.exists_many(["zarr.json", "t/zarr.json", "nope/zarr.json"]) == [True, True, False]
    assert [(r.method, r.range) for r in server.log.snapshot()] == [("GET", "bytes=0-0")] * 3


def test_a_stalled_server_raises_timeout_after_a_bounded_number_of_requests(served):
    import aiohttp

    _, root = served
    origin = RangeHTTPServer(root)
    proxy = Proxy(origin.url)
    try:
        opts = {
            "client_kwargs": {"timeout": aiohttp.ClientTimeout(sock_read=1.0)},
            "zarr3": {"retries": 1, "batch_size": 2},
        }
        a = z3.open_array(f"{proxy.endpoint}/data.zarr", "t", storage_options=opts)
        proxy.log.clear()
        proxy.stall(30, match=lambda r: "/c/" in r.path)
        with pytest.raises(StoreTimeoutError, match=re.escape(f"{proxy.endpoint}/data.zarr/t/c/")):
            a[...]  # 6 chunks
        assert 2 <= len(proxy.log.snapshot()) <= 4  # one window of 2 per attempt, then it gives up
    finally:
        proxy.stop()
        origin.stop()


def test_a_server_that_went_away_raises_unreachable_naming_the_url(served):
    _, root = served
    gone = RangeHTTPServer(root)
    url = f"{gone.url}/data.zarr"
    a = z3.open_array(url, "t")
    gone.stop()
    with pytest.raises(StoreUnreachableError, match=re.escape(gone.url)) as info:
        a[...]
    assert isinstance(info.value, ConnectionError)
    with pytest.raises(StoreUnreachableError, match=re.escape(url)):
        z3.open_group(url, mode="r")


@pytest.mark.parametrize(
    ("header", "window"),
    [
        ("bytes=0-9", (0, 10)),
        ("bytes=5-", (5, 100)),
        ("bytes=-10", (90, 100)),
        ("bytes=-500", (0, 100)),
        ("bytes=95-200", (95, 100)),
        ("bytes=100-", None),
        ("bytes=-0", None),
    ],
)
def test_the_test_server_parses_ranges_like_http(header, window):
    assert parse_range(header, 100) == window


def test_a_server_that_ignores_range_still_gives_exactly_the_bytes_asked_for(served):
    _, root = served
    plain = RangeHTTPServer(root, ignore_range=True)
    try:
        a = z3.open_array(f"{plain.url}/data.zarr", "s")
        plain.log.clear()
        assert a[1, 2] == S[1, 2]  # shard index by a suffix range, then one inner chunk
        assert {r.status for r in plain.log.snapshot()} == {200}  # whole bodies, every time
        assert all(r.range for r in plain.log.snapshot())
        np.testing.assert_array_equal(a[3:13, 5:11], S[3:13, 5:11])
        np.testing.assert_array_equal(a[...], S)
        store = FsspecStore.from_url(f"{plain.url}/data.zarr")
        whole = (root / "data.zarr" / "s" / "c" / "1" / "0").read_bytes()
        got = store.get_partial_values(
            [
                ("s/c/1/0", ByteRange(3, 10)),
                ("s/c/1/0", ByteRange.suffix(7)),
                ("s/c/1/0", ByteRange(5)),
                ("s/c/1/0", None),
                ("s/c/1/0", ByteRange(len(whole) - 2, 10)),
            ]
        )
        assert got == [whole[3:13], whole[-7:], whole[5:], whole, whole[-2:]]
        assert store.exists("s/c/1/0") and not store.exists("s/c/9/9")
        # a range running past the end of a value shorter than the range: the size decides
        n = len(whole)
        got = store.get_partial_values(
            [("s/c/1/0", ByteRange(n - 3, n + 50)), ("s/c/1/0", ByteRange(1, n + 5))]
        )
        assert got == [whole[-3:], whole[1:]]
    finally:
        plain.stop()
