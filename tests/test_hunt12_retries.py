"""Transient failures (503 answers, connections reset unanswered) in the middle of a read of
many chunks or shard ranges, streamed a bounded number at a time: with retries the read
returns the stored values; without, it fails typed naming a key, and leaves nothing wedged (a
second read in the same process works) and no thread behind. fsspec HTTP and obstore HTTP."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import xarray as xr
from servers import Proxy, RangeHTTPServer, Request

import zarr3_backend as z3
from zarr3_backend.errors import StoreError

DATA = np.arange(2048, dtype="i4")
BACKENDS = ("fsspec", "obstore")
# chunks in the middle of the read: 64 chunks of 32 ("many"); 4 shards of 16 inner chunks ("sh")
MIDDLE = {"many": ("/c/20", "/c/21", "/c/40"), "sh": ("/c/1", "/c/2")}
# every other element: no shard is read whole, each is read by its index, then inner ranges
SEL = np.s_[1::2]
# a hang guard, not a timing assertion: a wedged read never finishes
HANG = 120.0


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    g = z3.open_group(root / "d.zarr", mode="w")
    g.create_array(
        "many", shape=DATA.shape, dtype="i4", chunks=(32,), compressors=None, dimension_names=("x",)
    )[...] = DATA
    g.create_array(
        "sh",
        shape=DATA.shape,
        dtype="i4",
        chunks=(32,),
        shards=(512,),
        compressors=None,
        dimension_names=("x",),
    )[...] = DATA
    z3.consolidate_metadata(root / "d.zarr")
    server = RangeHTTPServer(root)
    proxy = Proxy(server.url)
    yield proxy
    proxy.stop()
    server.stop()


@pytest.fixture
def proxy(site) -> Proxy:
    site.clear_faults()
    site.clear_rewrites()
    site.log.clear()
    return site


def in_middle(name: str):
    """Requests for the chunks (or shards' inner ranges) in the middle of ``name``'s read."""
    ends = MIDDLE[name]
    return lambda r: r.path.startswith(f"/d.zarr/{name}/") and r.path.endswith(ends) and _data(r)


def _data(r: Request) -> bool:
    # a shard's inner chunks, not its index: so the failures fall in the RequestFeed's middle
    return r.range is None or not r.range.startswith("bytes=-")


def options(backend: str, retries: int) -> dict:
    """Few requests in flight (the window turns over many times), every inner chunk its own
    request, shards read by their index first."""
    settings = {"requests_in_flight": 4, "coalesce_gap": 0, "round_trip_bytes": 0}
    return {"zarr3": {"backend": backend, "retries": retries, **settings}}


def finishing(fn):
    """``fn()``'s result, or its exception, from a thread that must finish (a hang guard)."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the test
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(HANG)
    assert not t.is_alive(), "the read hung"
    if "error" in box:
        raise box["error"]
    return box["value"]


def inject(proxy: Proxy, fault: str, name: str, times: int = 1) -> None:
    """``fault`` on each middle request of ``name``'s read, ``times`` over (aiohttp itself sends
    a request again once when its connection is reset unanswered)."""
    match, n = in_middle(name), times * len(MIDDLE[name])
    if fault == "503":
        proxy.fail(n, 503, "ServiceUnavailable", match=match)
    else:
        proxy.reset(n, match=match)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fault", ["503", "reset"])
@pytest.mark.parametrize("name", ["many", "sh"])
def test_transient_failures_mid_read_are_retried_to_the_stored_values(proxy, backend, fault, name):
    a = z3.open_array(f"{proxy.endpoint}/d.zarr", name, storage_options=options(backend, retries=2))
    inject(proxy, fault, name)
    np.testing.assert_array_equal(finishing(lambda: a[SEL]), DATA[SEL])
    hit = [r for r in proxy.log.snapshot() if in_middle(name)(r)]
    assert len(hit) >= 2 * len(MIDDLE[name])  # each failed once, then was sent again
    assert name == "many" or all(r.range and r.range != "bytes=0-" for r in hit)  # inner ranges


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_dask_read_through_xarray_retries_too(proxy, backend):
    ds = xr.open_dataset(
        f"{proxy.endpoint}/d.zarr", engine="zarr3", chunks={}, storage_options=options(backend, 2)
    )
    inject(proxy, "503", "sh")
    inject(proxy, "reset", "many")
    got = finishing(lambda: ds.compute())
    np.testing.assert_array_equal(got["sh"].values, DATA)
    np.testing.assert_array_equal(got["many"].values, DATA)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fault", ["503", "reset"])
@pytest.mark.parametrize("name", ["many", "sh"])
def test_a_failure_mid_read_without_retries_is_typed_and_leaves_nothing_wedged(proxy, backend, fault, name):
    a = z3.open_array(f"{proxy.endpoint}/d.zarr", name, storage_options=options(backend, retries=0))
    np.testing.assert_array_equal(finishing(lambda: a[SEL]), DATA[SEL])  # pools and connections warm
    threads = _ours(threading.enumerate())
    for _ in range(3):
        inject(proxy, fault, name, times=2)
        with pytest.raises(StoreError, match=rf"{name}/c/\d"):
            finishing(lambda: a[SEL])
        proxy.clear_faults()  # those of requests the failed read no longer sent
        proxy.log.clear()
        np.testing.assert_array_equal(finishing(lambda: a[SEL]), DATA[SEL])  # the same array, again
    assert _ours(threading.enumerate()) <= threads


def _ours(threads) -> int:
    """Threads other than the test proxy's per-connection handlers (those end on their own)."""
    return sum(1 for t in threads if "process_request_thread" not in t.name)
