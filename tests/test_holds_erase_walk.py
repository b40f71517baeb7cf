"""A ``mode="w"`` over a stored dataset finds the node documents it erases by walking the
hierarchy (``node_claims.stored_node_documents``), never listing an array's chunks: it listed
every key below the erased prefix twice more (the held claims, the documents to mark), besides
the erase itself, so on a big store every chunk was listed three times."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.core.node_claims import stored_node_documents
from zarr3_backend.stores import MemoryStore


class CountingListings(MemoryStore):
    """Counts the keys below ``watched`` (an array's directory) that listings hand out, and the
    listings of that directory itself."""

    watched = "old/"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.keys_listed = 0
        self.dir_listings = 0
        self._in_list_dir = False

    def list_prefix(self, prefix):
        keys = list(super().list_prefix(prefix))
        if not self._in_list_dir:
            self.keys_listed += sum(k.startswith(self.watched) for k in keys)
        return iter(keys)

    def list_dir(self, prefix):
        if prefix.startswith(self.watched):
            self.dir_listings += 1
        self._in_list_dir = True
        try:
            names = list(super().list_dir(prefix))
        finally:
            self._in_list_dir = False
        self.keys_listed += sum((prefix + n).startswith(self.watched) for n in names)
        return iter(names)


def _chunk_keys(store) -> list[str]:
    return [
        k
        for k in store.list_prefix("old/")
        if k.rpartition("/")[2] not in ("zarr.json", ".zarray", ".zattrs")
    ]


@pytest.mark.parametrize("zarr_format", [3, 2])
@pytest.mark.parametrize("n_chunks", [4, 40])
def test_mode_w_lists_the_replaced_arrays_chunks_once_whatever_their_number(zarr_format, n_chunks):
    store = CountingListings()
    old = xr.Dataset({"old": ("t", np.arange(n_chunks * 2.0)), "kept": ("u", np.arange(3.0))})
    z3.to_zarr(old, store, mode="w", encoding={"old": {"chunks": (2,)}}, zarr_format=zarr_format)
    chunks = len(_chunk_keys(store))
    assert chunks == n_chunks
    below = len(list(store.list_prefix("old/")))  # the chunks and the array's documents
    store.keys_listed = store.dir_listings = 0

    z3.to_zarr(xr.Dataset({"new": ("t", np.arange(2.0))}), store, mode="w", zarr_format=zarr_format)

    assert store.dir_listings == 0  # the array's directory was never listed
    assert store.keys_listed == below  # each key below it listed once: by the erase itself
    assert not _chunk_keys(store)
    assert list(xr.open_dataset(store, engine="zarr3").data_vars) == ["new"]


def test_the_walk_finds_every_node_document_of_both_formats_and_implicit_groups():
    store = MemoryStore()
    z3.create_array(store, "g/a", shape=(10,), chunks=(2,), dtype="i4")[...] = 1
    z3.create_array(store, "g/h/b", shape=(10,), chunks=(2,), dtype="i4", chunk_key_encoding={"name": "v2"})[
        ...
    ] = 1
    v2 = MemoryStore()
    z3.to_zarr(xr.Dataset({"v": ("t", np.arange(4.0))}), v2, zarr_format=2, consolidated=False)
    for key in v2.list():  # a v2 group below a v3 one (the walk finds every document)
        store.set(f"g/two/{key}", v2.get(key))
    store.set("g/i/deep/zarr.json", store.get("g/h/zarr.json"))  # below an implicit group
    store.set("g/stray", b"not a node")
    store.erase("g/zarr.json")  # g itself implicit now

    want = sorted(
        k for k in store.list_prefix("g/") if k.rpartition("/")[2] in ("zarr.json", ".zarray", ".zgroup")
    )
    assert stored_node_documents(store, "g/") == want
    assert "g/two/v/.zarray" in want and "g/i/deep/zarr.json" in want
    assert stored_node_documents(store, "") == sorted(["zarr.json", *want])
