"""Store.move_prefix: a transaction's staged values put in place at once (whole new directories
renamed in one step on a LocalStore), merging into what exists, never escaping the root."""

from __future__ import annotations

import os

import pytest

from zarr3_backend.errors import InvalidKeyError
from zarr3_backend.stores import LocalStore, MemoryStore


@pytest.fixture(params=["local", "memory"])
def store(request, tmp_path):
    return LocalStore(tmp_path / "root") if request.param == "local" else MemoryStore()


def test_moves_new_and_existing_keys_and_replaces_values(store):
    store.set_many({"x/c/0/0": b"old", "x/zarr.json": b"{}", "y/keep": b"k"})
    store.set_many({"s/id/x/c/0/0": b"new", "s/id/x/c/0/1": b"n1", "s/id/x/c/5/0": b"n5", "s/id/z/c/0": b"z"})
    store.move_prefix("s/id/", "")
    assert store.get("x/c/0/0") == b"new" and store.get("x/c/0/1") == b"n1"
    assert store.get("x/c/5/0") == b"n5" and store.get("z/c/0") == b"z"
    assert store.get("y/keep") == b"k" and store.get("x/zarr.json") == b"{}"
    assert not [k for k in store.list() if k.startswith("s/")]
    store.move_prefix("s/id/", "")  # nothing left to move: a re-run does nothing


def test_a_new_directory_moves_in_one_rename(tmp_path, monkeypatch):
    store = LocalStore(tmp_path / "root")
    store.set("x/zarr.json", b"{}")
    store.set_many({f"s/id/x/c/{i}/{j}": b"v" for i in range(4) for j in range(4)})
    renames = []
    real = os.rename
    monkeypatch.setattr(os, "rename", lambda a, b, **kw: (renames.append((a, b)), real(a, b, **kw))[1])
    store.move_prefix("s/id/", "")
    assert len(renames) == 1 and renames[0][1].endswith(os.path.join("x", "c"))
    assert sorted(store.list_prefix("x/c/")) == sorted(f"x/c/{i}/{j}" for i in range(4) for j in range(4))


def test_never_follows_a_link_out_of_the_root(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    store = LocalStore(tmp_path / "root")
    store.set("x/zarr.json", b"{}")
    os.symlink(outside, tmp_path / "root" / "x" / "c")
    store.set("s/id/x/c/0", b"v")
    with pytest.raises(InvalidKeyError):
        store.move_prefix("s/id/", "")
    assert not list(outside.iterdir())
