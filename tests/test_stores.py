"""Stores: one contract suite run on every store, then what is specific to each one."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import pickle
import tempfile
import threading
import uuid

import fsspec
import numpy as np
import pytest
from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper
from fsspec.implementations.memory import MemoryFileSystem
from hypothesis import given, settings
from hypothesis import strategies as st

import zarr3_backend as z3
from zarr3_backend.byte_range import ByteRange
from zarr3_backend.errors import InvalidKeyError, ReadOnlyError, StoreError, Zarr3Error
from zarr3_backend.stores import (
    FsspecStore,
    LocalStore,
    MemoryStore,
    Store,
    StoreArgumentError,
    make_store,
    validate_key,
)
from zarr3_backend.stores import local as local_module

STORE_KINDS = ["memory", "local", "fsspec-memory", "fsspec-local"]
VALUE = bytes(range(256)) * 4  # 1024 bytes, every offset distinguishable


def _memory_root() -> str:
    return f"/z3-test-stores/{uuid.uuid4().hex}"


def _new_store(kind: str, directory: pathlib.Path) -> Store:
    if kind == "memory":
        return MemoryStore()
    if kind == "local":
        return LocalStore(directory / "store")
    if kind == "fsspec-memory":
        return FsspecStore(fsspec.filesystem("memory"), _memory_root())
    return FsspecStore(fsspec.filesystem("file"), str(directory / "fsstore"))


def _cleanup(store: Store) -> None:
    if isinstance(store, FsspecStore) and store.protocol == "memory":
        with contextlib.suppress(FileNotFoundError):
            store.fs.rm(store.root, recursive=True)


@pytest.fixture(params=STORE_KINDS)
def store(request, tmp_path):
    s = _new_store(request.param, tmp_path)
    yield s
    _cleanup(s)


def _fill(store: Store) -> dict[str, bytes]:
    data = {
        "zarr.json": b'{"zarr_format": 3}',
        "a/x": b"ax",
        "a/b/y": b"aby",
        "ab/z": b"abz",
        "a/b/c/0": VALUE,
    }
    store.set_many(data)
    return data


# ---- the contract: every store ---------------------------------------------------------------
def test_set_get_roundtrip_and_overwrite(store):
    assert store.get("k") is None
    store.set("k", b"first")
    assert store.get("k") == b"first"
    store.set("k", bytearray(b"second"))
    assert store.get("k") == b"second"
    store.set("deep/er/key", memoryview(VALUE))
    assert store.get("deep/er/key") == VALUE
    store.set("empty", b"")
    assert store.get("empty") == b""
    assert store.exists("empty") and store.exists("k") and not store.exists("nope")


def test_value_is_copied_on_set(store):
    buf = bytearray(b"abc")
    store.set("k", buf)
    buf[:] = b"xyz"
    assert store.get("k") == b"abc"


@pytest.mark.parametrize(
    ("byte_range", "expected"),
    [
        (ByteRange(0, 10), slice(0, 10)),
        (ByteRange(100, 28), slice(100, 128)),
        (ByteRange(1000, 100), slice(1000, 1024)),  # runs past the end: the available part
        (ByteRange(5, 0), slice(5, 5)),
        (ByteRange(2000, 5), slice(1024, 1024)),  # starts past the end: empty
        (ByteRange(0), slice(0, None)),
        (ByteRange(1000), slice(1000, None)),
        (ByteRange(5000), slice(1024, None)),
        (ByteRange.suffix(1), slice(-1, None)),
        (ByteRange.suffix(300), slice(-300, None)),
        (ByteRange.suffix(1024), slice(0, None)),
        (ByteRange.suffix(5000), slice(0, None)),  # longer than the value: the whole value
    ],
    ids=repr,
)
def test_get_byte_ranges(store, byte_range, expected):
    store.set("a/b/c/0", VALUE)
    assert store.get("a/b/c/0", byte_range) == VALUE[expected]
    assert store.get_partial_values([("a/b/c/0", byte_range)]) == [VALUE[expected]]
    assert store.get("missing/0", byte_range) is None


def test_get_many_keeps_order_and_reports_missing_as_none(store):
    data = _fill(store)
    keys = ["a/b/y", "nope", "zarr.json", "a/b/y", "a/nope/deeper", "a/b/c/0"]
    assert store.get_many(keys) == [data.get(k) for k in keys]
    assert store.get_many([]) == []


def test_get_partial_values_mixed(store):
    _fill(store)
    requests = [
        ("a/b/c/0", ByteRange(10, 5)),
        ("nope", ByteRange(0, 1)),
        ("a/b/c/0", ByteRange.suffix(16)),
        ("a/x", None),
        ("a/b/c/0", ByteRange(1020)),
    ]
    assert store.get_partial_values(requests) == [VALUE[10:15], None, VALUE[-16:], b"ax", VALUE[1020:]]


def test_a_directory_is_not_a_key(store):
    _fill(store)
    assert store.get("a") is None
    assert store.get("a/b") is None
    assert store.get_many(["a", "a/b"]) == [None, None]
    assert not store.exists("a")
    assert store.get("a/x/under-a-file") is None


def test_erase_and_erase_many(store):
    data = _fill(store)
    store.erase("a/x")
    store.erase("a/x")  # missing: no-op
    store.erase("never/was")
    assert store.get("a/x") is None
    store.erase_many(["a/b/y", "nope", "zarr.json"])
    assert sorted(store.list()) == sorted(set(data) - {"a/x", "a/b/y", "zarr.json"})
    assert store.get("ab/z") == b"abz"


def test_erase_leaves_no_empty_directory_behind(store):
    store.set("g/arr/c/0/0", b"1")
    store.set("zarr.json", b"{}")
    store.erase("g/arr/c/0/0")
    assert list(store.list_dir("")) == ["zarr.json"]
    assert list(store.list_dir("g/")) == []


def test_erase_prefix(store):
    _fill(store)
    store.erase_prefix("a/")
    assert sorted(store.list()) == ["ab/z", "zarr.json"]
    assert sorted(store.list_dir("")) == ["ab", "zarr.json"]
    store.erase_prefix("missing/")
    store.erase_prefix("")
    assert list(store.list()) == []


def test_erase_prefix_without_slash_is_a_string_prefix(store):
    _fill(store)
    store.erase_prefix("a")
    assert sorted(store.list()) == ["zarr.json"]


def test_listing(store):
    data = _fill(store)
    assert sorted(store.list()) == sorted(data)
    assert sorted(store.list_prefix("")) == sorted(data)
    assert sorted(store.list_prefix("a/")) == ["a/b/c/0", "a/b/y", "a/x"]
    assert sorted(store.list_prefix("a")) == ["a/b/c/0", "a/b/y", "a/x", "ab/z"]
    assert sorted(store.list_prefix("a/b/c/")) == ["a/b/c/0"]
    assert list(store.list_prefix("nope/")) == []
    assert sorted(store.list_dir("")) == ["a", "ab", "zarr.json"]
    assert sorted(store.list_dir("a/")) == ["b", "x"]
    assert sorted(store.list_dir("a")) == ["b", "x"]  # a missing trailing slash is added
    assert sorted(store.list_dir("a/b/")) == ["c", "y"]
    assert list(store.list_dir("nope/")) == []
    assert list(store.list_dir("zarr.json/")) == []


def test_empty_store_lists_nothing(store):
    assert list(store.list()) == []
    assert list(store.list_dir("")) == []
    assert list(store.list_prefix("a/")) == []


def test_keys_with_glob_characters_are_literal(store):
    store.set_many({"g[1]/c*": b"one", "g[1]/c?": b"two", "g1/c": b"three"})
    assert store.get_many(["g[1]/c*", "g[1]/c?", "g[1]/nope*"]) == [b"one", b"two", None]
    assert store.get("g[1]/c*", ByteRange.suffix(2)) == b"ne"
    assert sorted(store.list_dir("g[1]/")) == ["c*", "c?"]
    store.erase_many(["g[1]/c*", "g[1]/missing?"])
    assert sorted(store.list()) == ["g1/c", "g[1]/c?"]


@pytest.fixture(params=["dir_fd", "paths"])
def write_mode(request, monkeypatch):
    """LocalStore writes both ways: relative to a checked directory fd (Linux) and by full
    paths (platforms without ``/proc/self/fd`` or ``dir_fd``)."""
    monkeypatch.setattr(local_module, "_DIR_FD", request.param == "dir_fd")
    return request.param


@pytest.mark.parametrize("bad", ["../x", "/etc/x", "a\\b", "a/../../b", "a//b", "a/./b", "", "a/"])
def test_invalid_keys_are_refused_and_nothing_written(store, bad):
    with pytest.raises(InvalidKeyError) as info:
        store.set(bad, b"x")
    assert repr(bad) in str(info.value)
    for call in (
        lambda: store.get(bad),
        lambda: store.get_many(["fine", bad]),
        lambda: store.get_partial_values([(bad, ByteRange(0, 1))]),
        lambda: store.set_many({"fine": b"1", bad: b"2"}),
        lambda: store.erase(bad),
        lambda: store.erase_many(["fine", bad]),
    ):
        with pytest.raises(InvalidKeyError):
            call()
    assert list(store.list()) == []


def test_read_only_refuses_every_write(store):
    data = _fill(store)
    ro = store.with_read_only(True)
    assert ro.read_only and not store.read_only
    writes = {
        "a/x": lambda: ro.set("a/x", b"new"),
        "new/key": lambda: ro.set_many({"new/key": b"1"}),
        "zarr.json": lambda: ro.erase("zarr.json"),
        "ab/z": lambda: ro.erase_many(["ab/z"]),
        "a/": lambda: ro.erase_prefix("a/"),
    }
    for key, write in writes.items():
        with pytest.raises(ReadOnlyError) as info:
            write()
        assert repr(key) in str(info.value)
        assert type(store).__name__ in str(info.value)
    assert sorted(ro.list()) == sorted(data)
    assert ro.get_many(sorted(data)) == [data[k] for k in sorted(data)]


def test_with_read_only_shares_the_data(store):
    ro = store.with_read_only(True)
    store.set("later", b"1")
    assert ro.get("later") == b"1"
    rw = ro.with_read_only(False)
    rw.set("via-rw", b"2")
    assert store.get("via-rw") == b"2"
    assert rw == store and ro != store


def test_repr_and_equality(store):
    assert store == store.with_read_only(False)
    assert hash(store) == hash(store.with_read_only(False))
    assert store != store.with_read_only(True)
    if isinstance(store, LocalStore):
        assert store.root in repr(store)
    if isinstance(store, FsspecStore):
        assert store.url in repr(store) and store.root in store.url


def test_pickle_round_trip_sees_the_same_data(store):
    data = _fill(store)
    copy = pickle.loads(pickle.dumps(store))
    assert type(copy) is type(store) and copy.read_only == store.read_only
    assert sorted(copy.list()) == sorted(data)
    assert copy.get_many(sorted(data)) == [data[k] for k in sorted(data)]
    ro_copy = pickle.loads(pickle.dumps(store.with_read_only(True)))
    assert ro_copy.read_only
    if isinstance(store, MemoryStore):  # the copy carries its own data
        copy.set("only-in-copy", b"1")
        assert store.get("only-in-copy") is None
    else:  # the copy is configuration: it is equal and sees later writes
        assert copy == store
        store.set("written-after", b"2")
        assert copy.get("written-after") == b"2"


def test_many_keys_concurrently(store):
    data = {f"arr/c/{i // 20}/{i % 20}": os.urandom(64) + i.to_bytes(4, "little") for i in range(300)}
    store.set_many(data)
    keys = [*sorted(data), "arr/c/missing/0"]
    assert store.get_many(keys) == [data.get(k) for k in keys]
    ranges = [(k, ByteRange.suffix(4)) for k in sorted(data)]
    assert store.get_partial_values(ranges) == [data[k][-4:] for k in sorted(data)]
    store.erase_many(keys[:150])
    assert sorted(store.list()) == keys[150:300]


def test_concurrent_set_and_get_from_threads(store):
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(30):
                key = f"t{n}/k{i}"
                store.set(key, key.encode())
                assert store.get(key) == key.encode()
                if i % 3 == 0:
                    store.erase(key)
        except BaseException as e:  # collected and re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    expected = sorted(f"t{n}/k{i}" for n in range(4) for i in range(30) if i % 3)
    assert sorted(store.list()) == expected


_KEYS = ["zarr.json", "x/zarr.json", "x/c/0", "x/c/1", "y/c/0/0", "y/c/0/1", "y/zarr.json"]
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.sampled_from(_KEYS), st.binary(max_size=8)),
        st.tuples(st.just("erase"), st.sampled_from(_KEYS), st.just(b"")),
        st.tuples(st.just("erase_prefix"), st.sampled_from(["x/", "y/c/", "y", ""]), st.just(b"")),
    ),
    max_size=12,
)


@pytest.mark.parametrize("kind", STORE_KINDS)
@settings(max_examples=25, deadline=None)
@given(ops=_OPS)
def test_store_behaves_like_a_dict(kind, ops):
    with tempfile.TemporaryDirectory() as d:
        store = _new_store(kind, pathlib.Path(d))
        model: dict[str, bytes] = {}
        try:
            for op, key, value in ops:
                if op == "set":
                    store.set(key, value)
                    model[key] = value
                elif op == "erase":
                    store.erase(key)
                    model.pop(key, None)
                else:
                    store.erase_prefix(key)
                    model = {k: v for k, v in model.items() if not k.startswith(key)}
            assert sorted(store.list()) == sorted(model)
            assert store.get_many(_KEYS) == [model.get(k) for k in _KEYS]
            for prefix in ["", "x/", "y/", "y/c/"]:
                children = {k[len(prefix) :].split("/")[0] for k in model if k.startswith(prefix)}
                assert sorted(store.list_dir(prefix)) == sorted(children)
        finally:
            _cleanup(store)


# ---- MemoryStore ----------------------------------------------------------------------------
def test_memory_store_uses_the_given_dict():
    data = {"a/b": b"1"}
    store = MemoryStore(data)
    store.set("c", b"2")
    assert data == {"a/b": b"1", "c": b"2"}
    assert MemoryStore(data) == store and MemoryStore(dict(data)) != store


def test_memory_store_refuses_bad_keys_in_initial_data():
    with pytest.raises(InvalidKeyError, match=r"\.\./x"):
        MemoryStore({"../x": b"1"})


# ---- LocalStore -----------------------------------------------------------------------------
def test_local_store_key_is_a_file_under_root(tmp_path):
    store = LocalStore(tmp_path / "root")
    store.set("a/b/c", b"payload")
    assert (tmp_path / "root" / "a" / "b" / "c").read_bytes() == b"payload"
    (tmp_path / "root" / "x" / "y").mkdir(parents=True)
    (tmp_path / "root" / "x" / "y" / "z").write_bytes(b"external")
    assert store.get("x/y/z") == b"external"
    assert sorted(store.list()) == ["a/b/c", "x/y/z"]


def test_local_store_missing_root_reads_empty(tmp_path):
    store = LocalStore(tmp_path / "does" / "not" / "exist")
    assert store.get("k") is None and list(store.list()) == [] and list(store.list_dir("")) == []
    store.erase("k")
    store.erase_prefix("")
    assert not (tmp_path / "does").exists()


@pytest.mark.parametrize("bad", ["../x", "/etc/x", "a\\b", "a/../../b", "../store-sibling/x"])
def test_local_store_keys_cannot_escape_root(tmp_path, bad, write_mode):
    root = tmp_path / "store"
    store = LocalStore(root)
    for call in (lambda: store.set(bad, b"x"), lambda: store.set_many({bad: b"x"}), lambda: store.get(bad)):
        with pytest.raises(InvalidKeyError) as info:
            call()
        assert repr(bad) in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written anywhere, not even root


def test_local_store_symlinks_leading_outside_are_refused(tmp_path, write_mode):
    root, outside = tmp_path / "store", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    (root / "link").symlink_to(outside, target_is_directory=True)
    (root / "file-link").symlink_to(outside / "secret")
    store = LocalStore(root)
    for call in (
        lambda: store.set("link/x", b"x"),
        lambda: store.get("link/secret"),
        lambda: store.get("file-link"),
        lambda: store.set("file-link", b"overwrite"),
        lambda: store.erase("file-link"),
        lambda: store.erase_prefix("link/"),
        lambda: store.list_dir("link/"),
    ):
        with pytest.raises(InvalidKeyError, match="outside the store root"):
            call()
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert (outside / "secret").read_bytes() == b"secret"
    assert list(store.list()) == []  # escaping links are not listed as keys
    assert list(store.list_dir("")) == []


def test_local_store_symlinks_inside_root_are_followed(tmp_path, write_mode):
    root = tmp_path / "store"
    store = LocalStore(root)
    store.set("real/k", b"v")
    (root / "alias").symlink_to(root / "real", target_is_directory=True)
    assert store.get("alias/k") == b"v"
    assert LocalStore(root / "alias").get("k") == b"v"


def test_local_store_failed_write_keeps_old_value_and_leaves_no_temp(tmp_path, monkeypatch, write_mode):
    store = LocalStore(tmp_path / "store")
    store.set("a/chunk", b"old")

    def crash(src, dst, **dir_fds):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(local_module.os, "replace", crash)  # without directory fds
    monkeypatch.setattr(local_module.os, "rename", crash)  # with them (Linux)
    with pytest.raises(StoreError, match="'a/chunk'"):
        store.set("a/chunk", b"new" * 1000)
    with pytest.raises(StoreError):
        store.set_many({"a/chunk": b"new", "a/other": b"new"})
    monkeypatch.undo()
    assert store.get("a/chunk") == b"old"
    assert sorted(os.listdir(tmp_path / "store" / "a")) == ["chunk"]
    assert list(store.list()) == ["a/chunk"]


def test_local_store_interrupted_write_keeps_old_value(tmp_path, monkeypatch, write_mode):
    store = LocalStore(tmp_path / "store")
    store.set("k", b"old")
    real_write = os.write

    def torn_write(fd, data):
        real_write(fd, bytes(data)[:3])  # part of the bytes reach the disk, then the "crash"
        raise KeyboardInterrupt

    monkeypatch.setattr(local_module.os, "write", torn_write)
    with pytest.raises(KeyboardInterrupt):
        store.set("k", b"new value")
    monkeypatch.undo()
    assert store.get("k") == b"old"
    assert os.listdir(tmp_path / "store") == ["k"]


def test_local_store_never_lists_temp_files(tmp_path):
    store = LocalStore(tmp_path / "store")
    store.set("a/k", b"1")
    leftover = local_module.TEMP_PREFIX + "deadbeef"
    (tmp_path / "store" / "a" / leftover).write_bytes(b"torn")  # as a killed process leaves it
    (tmp_path / "store" / leftover).write_bytes(b"torn")
    assert list(store.list()) == ["a/k"]
    assert list(store.list_prefix("a/")) == ["a/k"]
    assert list(store.list_prefix("a/" + local_module.TEMP_PREFIX[:3])) == []
    assert list(store.list_dir("a/")) == ["k"]
    assert list(store.list_dir("")) == ["a"]
    with pytest.raises(InvalidKeyError, match="reserved"):
        store.get("a/" + leftover)
    with pytest.raises(InvalidKeyError, match="reserved"):
        store.set(leftover, b"x")


def test_local_store_directory_key_is_none_and_not_erased(tmp_path):
    store = LocalStore(tmp_path / "store")
    store.set("g/a/c/0", b"1")
    assert store.get("g/a") is None
    assert store.get("g/a", ByteRange.suffix(1)) is None
    store.erase("g/a")
    assert store.get("g/a/c/0") == b"1"


def test_local_store_write_under_a_file_fails_cleanly(tmp_path, write_mode):
    store = LocalStore(tmp_path / "store")
    store.set("k", b"file")
    with pytest.raises(StoreError, match="'k/x'"):
        store.set("k/x", b"x")
    assert store.get("k") == b"file" and list(store.list()) == ["k"]


def test_local_store_erase_prunes_directories(tmp_path):
    store = LocalStore(tmp_path / "store")
    store.set_many({"g/a/c/0/0": b"1", "g/a/c/0/1": b"2", "g/zarr.json": b"{}"})
    store.erase_many(["g/a/c/0/0", "g/a/c/0/1"])
    assert os.listdir(tmp_path / "store" / "g") == ["zarr.json"]
    store.erase_prefix("g/")
    assert os.listdir(tmp_path / "store") == []


def test_local_store_get_many_runs_on_the_io_pool(tmp_path, monkeypatch):
    store = LocalStore(tmp_path / "store")
    data = {f"c/{i}": i.to_bytes(2, "little") * 50 for i in range(400)}
    store.set_many(data)
    threads: set[str] = set()
    real_read = LocalStore._read

    def spy(self, key, path, byte_range):
        threads.add(threading.current_thread().name)
        return real_read(self, key, path, byte_range)

    monkeypatch.setattr(LocalStore, "_read", spy)
    keys = [f"c/{i}" for i in range(400)]
    assert store.get_many(keys) == [data[k] for k in keys]
    assert threads and all(name.startswith("zarr3-io") for name in threads)


def test_local_store_writers_and_erasers_sharing_a_directory(tmp_path, write_mode):
    """An erase that prunes an emptied directory must not break a concurrent write into it."""
    store = LocalStore(tmp_path / "store")
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(40):
                key = f"shared/dir/k{n}-{i}"
                store.set(key, b"v")
                if i % 2 == 0:
                    store.erase(key)
        except BaseException as e:  # collected and re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(store.list()) == sorted(f"shared/dir/k{n}-{i}" for n in range(4) for i in range(1, 40, 2))


def test_local_store_pickles_by_root(tmp_path):
    store = LocalStore(tmp_path / "store", read_only=True)
    blob = pickle.dumps(store)
    assert str(tmp_path / "store").encode() in blob
    assert pickle.loads(blob) == store


# ---- FsspecStore ----------------------------------------------------------------------------
class FlakyMemoryFS(MemoryFileSystem):
    """A memory filesystem whose reads of paths containing "broken" fail, and which (like some
    backends) refuses negative starts and ranges past the end."""

    protocol = "z3test-flaky"
    store: dict = {}  # noqa: RUF012 - fsspec's memory fs keeps its data on the class
    pseudo_dirs: list = [""]  # noqa: RUF012
    calls: list = []  # noqa: RUF012

    def cat_file(self, path, start=None, end=None, **kwargs):
        FlakyMemoryFS.calls.append((path, start, end))
        if "broken" in path:
            raise ConnectionError("endpoint unreachable")
        if start is not None and start < 0:
            raise ValueError("negative start is not supported")
        if start is not None and start >= self.size(path) and start != 0:
            raise OSError("416 requested range not satisfiable")
        return super().cat_file(path, start=start, end=end, **kwargs)

    def pipe_file(self, path, value, **kwargs):
        if "denied" in path:
            raise PermissionError("403 access denied")
        return super().pipe_file(path, value, **kwargs)

    def rm_file(self, path):
        if "denied" in path:
            raise PermissionError("403 access denied")
        return super().rm_file(path)

    def __reduce__(self):
        raise TypeError("a live connection must not be pickled")


fsspec.register_implementation("z3test-flaky", FlakyMemoryFS, clobber=True)


@pytest.fixture
def flaky():
    FlakyMemoryFS.calls.clear()
    store = FsspecStore(FlakyMemoryFS(), f"/{uuid.uuid4().hex}")
    yield store
    FlakyMemoryFS.store.clear()


def test_fsspec_errors_other_than_missing_raise_store_error_naming_the_url(flaky):
    flaky.set("broken/c/0", b"x")
    flaky.set("ok", b"fine")
    for call in (
        lambda: flaky.get("broken/c/0"),
        lambda: flaky.get_many(["ok", "broken/c/0"]),
        lambda: flaky.get_partial_values([("broken/c/0", ByteRange(0, 1))]),
    ):
        with pytest.raises(StoreError) as info:
            call()
        assert f"{flaky.url}/broken/c/0" in str(info.value)
        assert isinstance(info.value.__cause__, ConnectionError)
    assert flaky.get_many(["ok", "missing"]) == [b"fine", None]


def test_fsspec_write_and_erase_failures_raise_store_error_naming_the_url(flaky):
    with pytest.raises(StoreError, match=f"{flaky.url}/denied/k") as info:
        flaky.set("denied/k", b"x")
    assert isinstance(info.value.__cause__, PermissionError)
    with pytest.raises(StoreError, match=flaky.url):
        flaky.set_many({"ok": b"1", "denied/k": b"2"})
    MemoryFileSystem.pipe_file(flaky.fs, f"{flaky.root}/denied/old", b"old")  # plant it anyway
    with pytest.raises(StoreError, match=f"{flaky.url}/denied/old"):
        flaky.erase("denied/old")
    assert flaky.get("denied/old") == b"old"


def test_fsspec_suffix_and_past_end_ranges_fall_back_to_the_size(flaky):
    flaky.set("k", VALUE)
    assert flaky.get("k", ByteRange.suffix(10)) == VALUE[-10:]
    assert flaky.get("k", ByteRange.suffix(5000)) == VALUE
    assert flaky.get("k", ByteRange(4000, 3)) == b""
    assert flaky.get("k", ByteRange(1020, 30)) == VALUE[1020:]
    assert flaky.get("missing", ByteRange.suffix(10)) is None
    starts = [start for path, start, _ in FlakyMemoryFS.calls if path.endswith("/k")]
    assert -10 in starts and 1014 in starts  # tried the suffix request first, then absolute offsets


def test_fsspec_pickles_by_configuration_not_connection(flaky):
    flaky.set("k", b"v")
    with pytest.raises(TypeError):
        pickle.dumps(flaky.fs)
    copy = pickle.loads(pickle.dumps(flaky))
    assert copy == flaky and copy.get("k") == b"v"


def test_fsspec_pickle_keeps_storage_options(tmp_path):
    store = FsspecStore.from_url(f"file://{tmp_path}/s", storage_options={"auto_mkdir": True})
    copy = pickle.loads(pickle.dumps(store))
    assert copy.storage_options == {"auto_mkdir": True} and copy.protocol == "file"
    assert copy == store


def test_fsspec_from_url():
    root = _memory_root()
    store = FsspecStore.from_url(f"memory://{root}", read_only=False)
    try:
        store.set("a/b", b"1")
        assert store.root == root and store.url == f"memory://{root}"
        assert fsspec.filesystem("memory").cat_file(f"{root}/a/b") == b"1"
    finally:
        _cleanup(store)
    with pytest.raises(StoreArgumentError, match="nosuchproto://x"):
        FsspecStore.from_url("nosuchproto://x")


def test_fsspec_refuses_an_asynchronous_filesystem():
    fs = AsyncFileSystemWrapper(fsspec.filesystem("memory"), asynchronous=True)
    with pytest.raises(StoreArgumentError, match="asynchronous=False"):
        FsspecStore(fs, "/x")
    with pytest.raises(StoreArgumentError, match="dict"):
        FsspecStore({}, "/x")


def test_fsspec_on_an_async_filesystem():
    """The object-store paths (batched rm, no directories) on an async-implemented fs."""
    inner = fsspec.filesystem("memory")
    store = FsspecStore(AsyncFileSystemWrapper(inner), _memory_root())
    try:
        data = {f"c/{i}": bytes([i]) * 10 for i in range(20)}
        store.set_many(data)
        assert store.get_many(["c/3", "nope"]) == [data["c/3"], None]
        assert store.get_partial_values([("c/5", ByteRange.suffix(3)), ("c/6", ByteRange(8))]) == [
            data["c/5"][-3:],
            data["c/6"][8:],
        ]
        store.erase_many(["c/0", "c/1", "missing"])
        assert sorted(store.list()) == sorted(set(data) - {"c/0", "c/1"})
        store.erase_prefix("c/")
        assert list(store.list()) == []
    finally:
        _cleanup(FsspecStore(inner, store.root))


def test_sync_api_inside_a_running_event_loop():
    async def main() -> None:
        assert asyncio.get_running_loop().is_running()
        wrapped = AsyncFileSystemWrapper(fsspec.filesystem("memory"), asynchronous=False)
        for fs in (fsspec.filesystem("memory"), wrapped):
            store = FsspecStore(fs, _memory_root())
            store.set("a/b", b"0123")
            store.set_many({"a/c": b"c", "d": b"d"})
            assert store.get("a/b") == b"0123"
            assert store.get("a/b", ByteRange.suffix(2)) == b"23"
            assert store.get_many(["a/b", "x"]) == [b"0123", None]
            assert store.get_partial_values([("a/b", ByteRange(1, 2))]) == [b"12"]
            assert store.exists("d")
            assert sorted(store.list()) == ["a/b", "a/c", "d"]
            assert sorted(store.list_prefix("a/")) == ["a/b", "a/c"]
            assert sorted(store.list_dir("")) == ["a", "d"]
            store.erase("d")
            store.erase_many(["a/c"])
            store.erase_prefix("a/")
            assert list(store.list()) == []
            assert pickle.loads(pickle.dumps(store)).get("a/b") is None

    asyncio.run(main())


# ---- make_store -----------------------------------------------------------------------------
def test_make_store_from_paths(tmp_path):
    s = make_store(str(tmp_path / "a"), mode="w")
    assert isinstance(s, LocalStore) and s.root == str(tmp_path / "a") and not s.read_only
    s = make_store(tmp_path / "b")
    assert isinstance(s, LocalStore) and s.read_only  # mode "r" is the default
    s = make_store(pathlib.Path("relative.zarr"), mode="a")
    assert s.root == os.path.abspath("relative.zarr")


def test_make_store_from_urls(tmp_path):
    s = make_store((tmp_path / "with space").as_uri(), mode="w")  # file:///...with%20space
    assert isinstance(s, LocalStore) and s.root == str(tmp_path / "with space")
    s = make_store(f"file://{tmp_path}/x", mode="w", storage_options={"auto_mkdir": True})
    assert isinstance(s, FsspecStore) and s.protocol == "file"
    root = _memory_root()
    s = make_store(f"memory://{root}", mode="r+")
    assert isinstance(s, FsspecStore) and s.root == root and not s.read_only
    assert make_store(f"memory://{root}").read_only
    with pytest.raises(StoreArgumentError, match="otherhost"):
        make_store("file://otherhost/data")


def test_make_store_passes_stores_through():
    mem = MemoryStore()
    assert make_store(mem, mode="a") is mem
    ro = make_store(mem, mode="r")
    assert ro.read_only and ro.with_read_only(False) == mem
    mem.set("k", b"1")
    assert ro.get("k") == b"1"
    with pytest.raises(ReadOnlyError, match="'w'"):
        make_store(ro, mode="w")
    with pytest.raises(StoreArgumentError, match="storage_options"):
        make_store(mem, mode="a", storage_options={"anon": True})


def test_make_store_from_mappings():
    data = {"k": b"1"}
    s = make_store(data, mode="a")
    assert isinstance(s, MemoryStore) and s.get("k") == b"1"
    root = _memory_root()
    s = make_store(fsspec.get_mapper(f"memory://{root}"), mode="w")
    assert isinstance(s, FsspecStore) and s.root == root


def test_make_store_refuses_bad_arguments(tmp_path):
    with pytest.raises(StoreArgumentError) as info:
        make_store(str(tmp_path / "local"), mode="w", storage_options={"anon": True})
    assert str(tmp_path / "local") in str(info.value)
    assert not (tmp_path / "local").exists()
    with pytest.raises(StoreArgumentError, match="'x'"):
        make_store(str(tmp_path), mode="x")
    with pytest.raises(StoreArgumentError, match="int"):
        make_store(42)
    with pytest.raises(StoreArgumentError, match="nosuchproto"):
        make_store("nosuchproto://bucket/x")


def test_errors_are_in_the_package_hierarchy():
    assert issubclass(StoreArgumentError, Zarr3Error) and issubclass(StoreArgumentError, ValueError)
    assert validate_key("a/b") == "a/b"


def test_local_store_write_survives_its_directory_vanishing_inside_makedirs(
    tmp_path, monkeypatch, write_mode
):
    """A concurrent erase may remove a directory the writer just made, before it is used
    (makedirs then reports FileExistsError; the level-by-level path a missing directory): the
    write retries, as for a missing one."""
    store = LocalStore(tmp_path / "store")
    leaf = str(tmp_path / "store" / "shared" / "dir")
    calls = []
    if write_mode == "paths":
        real = os.makedirs

        def racing(path, *args, **kwargs):
            calls.append(path)
            if len(calls) == 1:
                raise FileExistsError(17, "File exists", path)
            return real(path, *args, **kwargs)

        monkeypatch.setattr(os, "makedirs", racing)
    else:
        real = os.mkdir

        def racing(path, *args, **kwargs):
            real(path, *args, **kwargs)
            calls.append(path)
            if path == "dir" and calls.count("dir") == 1:
                os.rmdir(leaf)  # the erase that pruned it, before the writer opens it

        monkeypatch.setattr(os, "mkdir", racing)
    store.set("shared/dir/k", b"v")
    monkeypatch.undo()
    assert store.get("shared/dir/k") == b"v"
    assert calls.count(leaf if write_mode == "paths" else "dir") == 2  # refused, then retried


def test_local_store_write_retries_when_its_opened_directory_is_pruned(tmp_path, monkeypatch, write_mode):
    """A concurrent erase may remove the (empty) directory after the writer opened it: creating
    the temporary file then fails with ENOENT, and the write makes the directory again."""
    store = LocalStore(tmp_path / "store")
    real_open = os.open
    failed = []

    def pruned_once(path, flags, *args, **kwargs):
        if os.path.basename(path).startswith(local_module.TEMP_PREFIX) and not failed:
            failed.append(path)
            os.rmdir(tmp_path / "store" / "d")  # the erase that pruned it
            raise FileNotFoundError(2, "No such file or directory", path)
        return real_open(path, flags, *args, **kwargs)

    store.set("d/old", b"x")
    store.erase("d/old")  # prunes d; make it again for the writer to open
    os.makedirs(tmp_path / "store" / "d")
    monkeypatch.setattr(local_module.os, "open", pruned_once)
    store.set("d/k", b"v")
    monkeypatch.undo()
    assert failed and store.get("d/k") == b"v" and os.listdir(tmp_path / "store" / "d") == ["k"]


def test_local_store_a_sibling_named_like_a_deleted_root_is_outside(tmp_path, write_mode):
    """/proc/self/fd shows an unlinked file as "<path> (deleted)": a real sibling with that
    name must not pass for the root itself."""
    root = tmp_path / "r"
    root.mkdir()
    (tmp_path / "r (deleted)").write_bytes(b"secret")  # a file named like the deleted root
    (root / "lnk").symlink_to(tmp_path / "r (deleted)")
    escape_dir = tmp_path / "s"
    escape_dir.mkdir()
    (escape_dir / "s (deleted)").mkdir()
    inner = escape_dir / "s"
    inner.mkdir()
    (inner / "esc").symlink_to(escape_dir / "s (deleted)", target_is_directory=True)
    store, store2 = LocalStore(root), LocalStore(inner)
    for call in (lambda: store.get("lnk"), lambda: store.set("lnk", b"x"), lambda: store2.set("esc/x", b"x")):
        with pytest.raises(InvalidKeyError, match="outside the store root"):
            call()
    assert (tmp_path / "r (deleted)").read_bytes() == b"secret"
    assert os.listdir(escape_dir / "s (deleted)") == []


def test_local_store_never_makes_a_directory_outside_root_when_one_is_swapped_for_a_link(
    tmp_path, monkeypatch
):
    """A directory replaced by a symlink to elsewhere between the check and the mkdir: the
    missing levels are made one at a time inside checked directories, so the swap is caught."""
    monkeypatch.setattr(local_module, "_DIR_FD", True)
    root, outside = tmp_path / "store", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    real_mkdir = os.mkdir
    swapped = []

    def swapping_mkdir(path, *args, **kwargs):
        if not swapped:  # the attacker's move, just before the first directory is made
            swapped.append(path)
            os.rmdir(root / "d")
            os.symlink(outside, root / "d", target_is_directory=True)
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", swapping_mkdir)
    with pytest.raises(InvalidKeyError, match="outside the store root"):
        LocalStore(root).set("d/sub/k", b"v")
    monkeypatch.undo()
    assert swapped and os.listdir(outside) == []


def test_a_file_url_with_store_settings_is_a_local_store(tmp_path):
    """``file://`` URLs keep LocalStore (positioned reads, atomic renames) when the options hold
    only store settings; any fsspec option gives fsspec's file system."""
    import numpy as np

    import zarr3_backend as z3
    from zarr3_backend.stores import make_store

    url = (tmp_path / "d.zarr").as_uri()
    s = make_store(url, mode="a", storage_options={"zarr3": {"io_threads": 3, "coalesce_gap": 0}})
    assert isinstance(s, LocalStore)
    assert s.settings.io_threads == 3 and s.settings.coalesce_gap == 0
    z3.create_array(s, shape=(4,), dtype="i4", chunks=(2,))[...] = np.arange(4)
    np.testing.assert_array_equal(z3.open_array(url)[...], np.arange(4))
    older = make_store(url, storage_options={"zarr3": {"batch_size": 8}})  # requests_in_flight's old name
    assert isinstance(older, LocalStore) and older.settings.requests_in_flight == 8
    with pytest.raises(StoreArgumentError, match="nonsense"):
        make_store(url, storage_options={"zarr3": {"nonsense": 1}})
    assert isinstance(make_store(url, storage_options={"auto_mkdir": True}), FsspecStore)
    assert isinstance(make_store(url, storage_options={"zarr3": {"backend": "fsspec"}}), FsspecStore)


def test_a_memory_store_subclass_stays_itself_read_only():
    """``with_read_only`` (how opens for reading wrap a writable store) keeps a subclass's
    behaviour: a store charging latency, or counting requests, went on as a plain MemoryStore
    for every read-only open."""

    class Counting(MemoryStore):
        gets = 0

        def get(self, key, byte_range=None):
            type(self).gets += 1
            return super().get(key, byte_range)

    store = Counting()
    z3.create_array(store, path="a", shape=(4,), dtype="i4")[...] = np.arange(4)
    view = store.with_read_only()
    assert type(view) is Counting and view.read_only and not store.read_only
    Counting.gets = 0
    np.testing.assert_array_equal(z3.open_array(store, path="a", mode="r")[...], np.arange(4))
    assert Counting.gets >= 1


def test_a_move_gives_its_destination_a_new_version():
    """A compare-and-swap read before a move into its key must lose to the moved value (the
    commit moves staged values into place): the move kept the destination's old version."""
    store = MemoryStore()
    store.set("k", b"old")
    _, version = store.get_versioned("k")
    store.set("t", b"moved")
    store.move("t", "k")
    assert store.get("k") == b"moved" and store.get_versioned("t") == (None, None)
    assert not store.set_if("k", b"stale", version)
    assert store.get("k") == b"moved"
