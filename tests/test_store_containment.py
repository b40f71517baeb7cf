"""Every store over local files keeps reads, writes, erases and listings inside its root, with
``FsspecStore.from_url("file://...")`` held to the same rules as ``LocalStore``; symlink loops
are skipped by listings (they hold no value) instead of failing them."""

from __future__ import annotations

import pytest

from zarr3_backend.errors import InvalidKeyError, StoreError
from zarr3_backend.stores import FsspecStore, LocalStore


def open_store(kind: str, root):
    if kind == "local":
        return LocalStore(root)
    return FsspecStore.from_url("file://" + str(root))


@pytest.fixture(params=["local", "file-url"])
def kind(request) -> str:
    return request.param


@pytest.fixture
def escape(tmp_path):
    """A root holding a symlinked directory and a symlinked file that both lead outside it."""
    root, outside = tmp_path / "store", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    (root / "link").symlink_to(outside, target_is_directory=True)
    (root / "file-link").symlink_to(outside / "secret")
    (root / "inside").write_bytes(b"in")
    return root, outside


def test_symlinks_leading_outside_are_refused_for_every_call(kind, escape):
    root, outside = escape
    store = open_store(kind, root)
    _, version = store.get_versioned("inside")
    calls = {
        "get": lambda: store.get("link/secret"),
        "get file": lambda: store.get("file-link"),
        "get_many": lambda: store.get_many(["link/secret"]),
        "exists": lambda: store.exists("file-link"),
        "get_versioned": lambda: store.get_versioned("link/secret"),
        "set": lambda: store.set("link/x", b"x"),
        "set over file": lambda: store.set("file-link", b"overwrite"),
        "set_many": lambda: store.set_many({"link/secret": b"x"}),
        "set_if": lambda: store.set_if("link/secret", b"x", version),
        "erase": lambda: store.erase("file-link"),
        "erase_many": lambda: store.erase_many(["link/secret"]),
        "erase_if": lambda: store.erase_if("link/secret", version),
        "erase_prefix": lambda: store.erase_prefix("link/"),
        "list_dir": lambda: store.list_dir("link/"),
        "list_prefix": lambda: list(store.list_prefix("link/")),
    }
    for name, call in calls.items():
        with pytest.raises(InvalidKeyError, match="outside the store root") as info:
            call()
        assert "'link" in str(info.value) or "'file-link'" in str(info.value), name
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert (outside / "secret").read_bytes() == b"secret"
    assert list(store.list()) == ["inside"]  # escaping links are not listed
    assert sorted(store.list_dir("")) == ["inside"]
    assert store.get("inside") == b"in"


def test_symlink_loops_are_skipped_by_listings(kind, tmp_path):
    root = tmp_path / "store"
    store = open_store(kind, root)
    store.set("a/k", b"v")
    store.set("top", b"t")
    (root / "loop1").symlink_to(root / "loop2")
    (root / "loop2").symlink_to(root / "loop1")
    (root / "a" / "self").symlink_to(root / "a" / "self")
    assert sorted(store.list()) == ["a/k", "top"]
    assert sorted(store.list_dir("")) == ["a", "top"]
    assert sorted(store.list_dir("a/")) == ["k"]
    assert sorted(store.list_prefix("a/")) == ["a/k"]
    assert sorted(store.list_prefix("loo")) == []
    with pytest.raises(StoreError, match="'loop1'"):  # reading one names it
        store.get("loop1")


def test_file_url_store_writes_atomically_and_lists_no_temporary_files(tmp_path):
    store = FsspecStore.from_url("file://" + str(tmp_path / "s"))
    store.set("a/b", b"1")
    (tmp_path / "s" / "a" / ".z3tmp-123-x-x.abc").write_bytes(b"half")  # a live-looking writer's
    assert list(store.list()) == ["a/b"]
    assert store.get("a/b") == b"1"
    assert store.supports_conditional_writes
