"""The ``durable`` setting: a local store flushes its file system between the steps of a write,
so that after a crash of the machine (power loss) each step is kept only with the ones before it.

A power loss cannot be made in a test; what can be checked is the order of the flushes
(``Store.barrier``) among the store operations of a write, which is what the guarantee rests
on, and that a barrier on a durable local store really flushes (``syncfs``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.core.txn_records import TXN_DIR
from zarr3_backend.errors import StoreError
from zarr3_backend.settings import Settings, current
from zarr3_backend.stores import LocalStore, MemoryStore
from zarr3_backend.stores import local as local_module

_LOGGED = (
    "set",
    "set_if",
    "set_many",
    "erase",
    "erase_if",
    "erase_many",
    "erase_prefix",
    "move",
    "move_prefix",
)


class LoggingStore(LocalStore):
    """A LocalStore that logs its writes and barriers, in order, as (operation, keys)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.log: list[tuple[str, tuple[str, ...]]] = []

    def barrier(self) -> None:
        self.log.append(("barrier", ()))
        super().barrier()

    def __reduce__(self):
        return (_rebuild, (self.root, dict(self.setting_overrides)))


def _rebuild(root, overrides):
    return LoggingStore(root, settings=overrides)


def _logged(name):
    def method(self, *args, **kwargs):
        first = args[0] if args else None
        keys = tuple(first) if name in ("set_many", "erase_many") else (first,)
        if name in ("move", "move_prefix"):
            keys = (args[0], args[1])
        self.log.append((name, tuple(keys)))
        return getattr(LocalStore, name)(self, *args, **kwargs)

    return method


for _name in _LOGGED:
    setattr(LoggingStore, _name, _logged(_name))


def dataset(t0: int, n: int) -> xr.Dataset:
    rng = np.random.default_rng(t0)
    return xr.Dataset(
        {"t": (("time", "x"), rng.random((n, 6)).astype("float32"))},
        coords={"time": pd.date_range("2000-01-01", periods=n, freq="D") + pd.Timedelta(days=t0)},
    )


def _is_record(key: str) -> bool:
    return key.startswith(TXN_DIR + "/")


def _staged(key: str) -> bool:
    return _is_record(key) and "/data/" in key


def _document(key: str) -> bool:
    return key.rsplit("/", 1)[-1] == "zarr.json"


def _first(log, predicate, start=0):
    return next(i for i in range(start, len(log)) if predicate(log[i]))


def _last(log, predicate, stop):
    return max(i for i in range(stop) if predicate(log[i]))


def _barrier_between(log, a: int, b: int) -> bool:
    return any(op == "barrier" for op, _ in log[a + 1 : b])


def _touches(predicate):
    return lambda entry: any(k is not None and predicate(k) for k in entry[1])


def test_each_step_of_a_commit_is_flushed_before_the_next(tmp_path):
    store = LoggingStore(str(tmp_path / "s.zarr"), settings={"durable": True})
    z3.to_zarr(dataset(0, 4).chunk({"time": 2}), store, encoding={"t": {"chunks": (2, 6)}})
    store.log.clear()
    z3.to_zarr(dataset(4, 4).chunk({"time": 2}), store, append_dim="time")  # staged, then committed
    log = store.log
    manifest = _first(log, _touches(lambda k: k.endswith("/manifest.json")))
    last_staged = _last(log, _touches(_staged), manifest)
    assert _barrier_between(log, last_staged, manifest), "staged values must be kept before the manifest"
    first_mark = _first(log, _touches(lambda k: not _is_record(k)), manifest)
    assert _barrier_between(log, manifest, first_mark), "the manifest must be kept before any marker"
    moved = _first(log, lambda e: e[0] == "move_prefix", first_mark)
    first_final = _first(log, _touches(_document), moved)
    assert _barrier_between(log, moved, first_final), "values must be kept in place before the documents"
    records_gone = _first(
        log, lambda e: e[0] in ("erase", "erase_prefix") and _touches(_is_record)(e), first_final
    )
    last_document = _last(log, _touches(_document), records_gone)
    assert _barrier_between(log, last_document, records_gone), "documents must be kept before the records go"
    got = xr.open_dataset(store, engine="zarr3").load()
    xr.testing.assert_equal(got, xr.concat([dataset(0, 4), dataset(4, 4)], dim="time"))


def test_one_chunk_writes_and_document_changes_are_flushed_when_they_return(tmp_path):
    store = LoggingStore(str(tmp_path / "s.zarr"), settings={"durable": True})
    a = z3.create_array(store, shape=(8,), chunks=(4,), dtype="int32")
    store.log.clear()
    a[0:4] = np.arange(4)  # one chunk: written in place, no commit
    assert store.log[-1] == ("barrier", ())
    store.log.clear()
    a.attrs["units"] = "K"
    assert store.log[-1] == ("barrier", ())


def test_a_durable_local_store_flushes_its_file_system(tmp_path, monkeypatch):
    calls = []
    real = local_module._SYNCFS
    monkeypatch.setattr(local_module, "_SYNCFS", lambda fd: calls.append(fd) or (real(fd) if real else 0))
    plain = z3.create_array(LocalStore(str(tmp_path / "plain")), shape=(8,), chunks=(4,), dtype="int32")
    plain[:] = np.arange(8)
    assert calls == []  # the default: as durable as the page cache
    durable = LocalStore(str(tmp_path / "durable"), settings={"durable": True})
    a = z3.create_array(durable, shape=(8,), chunks=(4,), dtype="int32")
    before = len(calls)
    a[:] = np.arange(8)  # two chunks: one commit
    assert len(calls) - before >= 4
    np.testing.assert_array_equal(z3.open_array(str(tmp_path / "durable"))[:], np.arange(8))


def test_a_failed_flush_before_the_manifest_writes_nothing(tmp_path, monkeypatch):
    path = str(tmp_path / "s.zarr")
    store = LocalStore(path, settings={"durable": True})
    a = z3.create_array(store, shape=(8,), chunks=(4,), dtype="int32", fill_value=-1)
    monkeypatch.setattr(local_module, "_SYNCFS", lambda fd: -1)
    with pytest.raises(StoreError, match="flushing the file system"):
        a[:] = np.arange(8)
    monkeypatch.undo()
    np.testing.assert_array_equal(z3.open_array(path)[:], np.full(8, -1))
    assert not any(k.startswith(TXN_DIR) for k in LocalStore(path).list())


def test_the_setting_reaches_stores_from_the_environment_and_is_a_switch(monkeypatch):
    assert Settings().durable is False
    monkeypatch.setenv("ZARR3_DURABLE", "yes")
    assert current().durable is True and LocalStore("/nonexistent").settings.durable is True
    monkeypatch.setenv("ZARR3_DURABLE", "sometimes")
    with pytest.warns(UserWarning, match="ZARR3_DURABLE='sometimes'"):
        assert current().durable is False
    with pytest.raises(ValueError, match=r"durable.*True or False"):
        MemoryStore(settings={"durable": 1})
    MemoryStore(settings={"durable": True}).barrier()  # nothing to keep: a no-op


def test_an_overwrite_keeps_its_erases_before_recording_them(tmp_path):
    # a re-run (repair) trusts the record and does not erase again: lost erases under a kept
    # record would leave the old chunks beside the new documents
    store = LoggingStore(str(tmp_path / "s.zarr"), settings={"durable": True})
    z3.to_zarr(dataset(0, 4), store)
    store.log.clear()
    z3.to_zarr(dataset(9, 2), store, mode="w")
    log = store.log
    recorded = _first(log, _touches(lambda k: _is_record(k) and k.endswith("/erased")))
    last_erase = _last(
        log, lambda e: e[0].startswith("erase") and _touches(lambda k: not _is_record(k))(e), recorded
    )
    assert _barrier_between(log, last_erase, recorded)
    xr.testing.assert_equal(xr.open_dataset(store, engine="zarr3").load(), dataset(9, 2))


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_copied_node_documents_are_flushed(tmp_path, zarr_format):
    from zarr3_backend.core.metadata_v2_store import store_node_metadata

    src = z3.create_array(
        str(tmp_path / "src"), shape=(4,), chunks=(2,), dtype="int8", zarr_format=zarr_format
    )
    store = LoggingStore(str(tmp_path / "dst"), settings={"durable": True})
    store_node_metadata(store, "", src.metadata)
    assert store.log[-1] == ("barrier", ())
    assert any(_touches(lambda k: k in ("zarr.json", ".zarray"))(e) for e in store.log[:-1])


def test_a_durable_store_writes_each_value_to_disk_before_renaming_it_into_place(tmp_path, monkeypatch):
    # a renamed file's name can reach the disk before its blocks: an empty document or chunk
    # after a power loss (the power-loss simulation assumes durable stores never leave one)
    synced = []
    real = local_module.os.fsync
    monkeypatch.setattr(local_module.os, "fsync", lambda fd: synced.append(fd) or real(fd))
    durable = LocalStore(str(tmp_path / "d"), settings={"durable": True})
    durable.set("a/b", b"1")
    durable.set("a/b", b"2")
    assert len(synced) == 2 and durable.get("a/b") == b"2"
    LocalStore(str(tmp_path / "d")).set("a/b", b"3")
    assert len(synced) == 2  # not durable: the page cache's pace


def test_a_file_url_through_fsspec_is_durable_as_a_local_store(tmp_path, monkeypatch):
    import fsspec

    from zarr3_backend.stores import FsspecStore

    calls = []
    monkeypatch.setattr(local_module, "_SYNCFS", lambda fd: calls.append(fd) or 0)
    store = FsspecStore(fsspec.filesystem("file"), str(tmp_path / "f"), settings={"durable": True})
    a = z3.create_array(store, shape=(8,), chunks=(4,), dtype="int32")
    a[:] = np.arange(8)
    assert len(calls) >= 4
    np.testing.assert_array_equal(z3.open_array(str(tmp_path / "f"))[:], np.arange(8))


def test_a_platform_without_any_flush_refuses_a_durable_write_typed(tmp_path, monkeypatch):
    monkeypatch.setattr(local_module, "_SYNCFS", None)
    monkeypatch.delattr(local_module.os, "sync")  # as on Windows
    with pytest.raises(StoreError, match="no syncfs or sync"):
        z3.create_array(
            LocalStore(str(tmp_path / "s"), settings={"durable": True}), shape=(4,), chunks=(2,), dtype="i1"
        )
    z3.create_array(
        LocalStore(str(tmp_path / "p")), shape=(4,), chunks=(2,), dtype="i1"
    )  # not durable: no flush
