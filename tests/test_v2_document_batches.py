"""A commit writes Zarr v2 documents in a few concurrent batches (every ``.zattrs``, then every
``.zarray``/``.zgroup``), not one request after another: on an object store each sequential
request is a round trip. The order a v2 reader relies on is kept: a node's ``.zattrs`` is
written before the ``.zarray``/``.zgroup`` by which the reader finds the node."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.stores import MemoryStore

V2_NAMES = (".zattrs", ".zarray", ".zgroup", ".zmetadata")


class DocumentCallStore(MemoryStore):
    """A MemoryStore that records each call writing v2 documents: (method, their keys)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.doc_calls: list[tuple[str, list[str]]] = []

    def _note(self, method, keys):
        docs = [k for k in keys if k.rpartition("/")[2] in V2_NAMES]
        if docs:
            self.doc_calls.append((method, docs))

    def set(self, key, value):
        self._note("set", [key])
        super().set(key, value)

    def set_many(self, items):
        self._note("set_many", list(items))
        super().set_many(items)

    def move(self, src, dst):
        self._note("move", [dst])
        super().move(src, dst)

    def set_if(self, key, value, expected):
        self._note("set_if", [key])
        return super().set_if(key, value, expected)


def dataset(nvars: int) -> xr.Dataset:
    rng = np.random.default_rng(0)
    data = {
        f"v{i}": (("time", "x"), rng.random((4, 3)).astype("f4"), {"units": "K", "i": i})
        for i in range(nvars)
    }
    return xr.Dataset(data, coords={"time": np.arange(4), "x": [1.0, 2.0, 3.0]}, attrs={"title": "t"})


def _order_kept(calls: list[tuple[str, list[str]]]) -> None:
    """Each node's .zattrs, when written, goes out in an earlier call than its .zarray/.zgroup."""
    first_call = {}
    for i, (_, keys) in enumerate(calls):
        for k in keys:
            first_call.setdefault(k, i)
    for key, i in first_call.items():
        node, _, name = key.rpartition("/")
        if name in (".zarray", ".zgroup"):
            attrs = f"{node}/.zattrs" if node else ".zattrs"
            assert first_call.get(attrs, -1) < i, (key, calls)


@pytest.mark.parametrize("consolidated", [False, True])
def test_v2_documents_of_a_new_dataset_go_out_in_batches(consolidated):
    """20 variables and 2 coordinates: their 46 documents in a handful of calls, not 46."""
    store = DocumentCallStore()
    ds = dataset(20)
    z3.to_zarr(ds, store, zarr_format=2, consolidated=consolidated)
    calls = store.doc_calls
    written = {k for _, keys in calls for k in keys}
    assert {f"v{i}/.zarray" for i in range(20)} | {f"v{i}/.zattrs" for i in range(20)} <= written
    assert len(calls) <= 5, calls  # before: one call per document
    _order_kept(calls)
    got = xr.open_dataset(store, engine="zarr3").load()
    xr.testing.assert_identical(got, ds)


def test_v2_append_rewrites_its_documents_in_batches():
    """An append to 20 variables rewrites their documents (the new shape) in a few calls."""
    store = DocumentCallStore()
    ds = dataset(20)
    z3.to_zarr(ds, store, zarr_format=2)
    store.doc_calls.clear()
    more = dataset(20).assign_coords(time=np.arange(4, 8))
    z3.to_zarr(more, store, mode="a", append_dim="time")
    calls = store.doc_calls
    assert {f"v{i}/.zarray" for i in range(20)} <= {k for _, keys in calls for k in keys}
    assert len(calls) <= 5, calls
    _order_kept(calls)
    got = xr.open_dataset(store, engine="zarr3").load()
    xr.testing.assert_identical(got, xr.concat([ds, more], dim="time"))
