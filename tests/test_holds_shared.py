"""Concurrent adds no longer take turns: a commit holds the groups above the nodes it adds
SHARED (``node_claims.hold_modes``), so writers adding different variables to one group, or to
sibling groups, commit at once; an erase of the group (``mode="w"``) still takes turns with
them: it waits until no shared holder remains, and holders wait while it holds its claim.
Each writer below is paused in its commit window right after its claims (the record that they
are checked), before its documents."""

from __future__ import annotations

import threading

import pytest
import xarray as xr
from sample_data import small_dataset
from store_doubles import PausedInCommit, PausesInCommit

import zarr3_backend as z3
from zarr3_backend.core import commit, node_claims
from zarr3_backend.core.node_claims import CLAIMS_DIR, SHARED_DIR
from zarr3_backend.errors import WriteConflictError
from zarr3_backend.stores import LocalStore, MemoryStore


def _stored(store, group=None, consolidated=False) -> dict[str, list[float]]:
    got = xr.open_dataset(store, engine="zarr3", group=group, consolidated=consolidated).load()
    return {name: got[name].values.tolist() for name in sorted(got.data_vars)}


def _after_claims(key: str) -> bool:
    return key.endswith("/claims-checked")


class _Writer:
    """``write()`` in a thread of its own; ``join()`` re-raises what it raised."""

    def __init__(self, write):
        self.error: BaseException | None = None
        self.done = threading.Event()

        def run():
            try:
                write()
            except BaseException as e:
                self.error = e
            finally:
                self.done.set()

        self.thread = threading.Thread(target=run)
        self.thread.start()

    def join(self) -> None:
        self.thread.join(60)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error


class _LocalPaused(PausesInCommit, LocalStore):
    pass


@pytest.mark.parametrize("kind", ["memory", "local"])
@pytest.mark.parametrize("consolidated", [False, True])
@pytest.mark.parametrize("groups", [("g", "g"), ("g", "h")], ids=["one-group", "sibling-groups"])
def test_an_add_commits_while_another_add_is_paused_in_its_commit_window(
    tmp_path, kind, groups, consolidated
):
    # commit_wait small: on main the second add waited on the first's hold of the root and
    # failed with WriteConflictError
    settings = {"commit_wait": 1}
    store = (
        PausedInCommit(settings=settings)
        if kind == "memory"
        else _LocalPaused(str(tmp_path), settings=settings)
    )
    for group in sorted(set(groups)):
        z3.to_zarr(small_dataset(a=[1, 2, 3]), store, group=group, consolidated=consolidated)
    store.pause_after = _after_claims
    first = _Writer(
        lambda: z3.to_zarr(
            small_dataset(x=[4, 5, 6]), store, group=groups[0], mode="a", consolidated=consolidated
        )
    )
    assert store.paused.wait(60)

    z3.to_zarr(small_dataset(y=[7, 8, 9]), store, group=groups[1], mode="a", consolidated=consolidated)

    assert not first.done.is_set()  # the second committed while the first is still paused
    assert not store.waiting.is_set()
    store.resume.set()
    first.join()
    want = {groups[0]: {"x": [4, 5, 6]}, groups[1]: {"y": [7, 8, 9]}}
    if groups[0] == groups[1]:
        want = {groups[0]: {"x": [4, 5, 6], "y": [7, 8, 9]}}
    for group, added in want.items():
        assert _stored(store, group) == {"a": [1, 2, 3], **added}
        if consolidated:  # the root's consolidated metadata lists both
            assert _stored(store, group, consolidated=True) == {"a": [1, 2, 3], **added}
    assert not list(store.list_prefix(CLAIMS_DIR))


def test_an_erase_waits_for_an_add_holding_its_group_shared():
    store = PausedInCommit()
    z3.to_zarr(small_dataset(a=[1, 2, 3]), store, group="g", consolidated=False)
    store.pause_after = _after_claims
    adder = _Writer(
        lambda: z3.to_zarr(small_dataset(x=[4, 5, 6]), store, group="g", mode="a", consolidated=False)
    )
    assert store.paused.wait(60)
    eraser = _Writer(
        lambda: z3.to_zarr(small_dataset(b=[7, 8, 9]), store, group="g", mode="w", consolidated=False)
    )
    assert store.waiting.wait(60)  # the eraser meets the adder's shared hold of g

    assert not eraser.done.is_set()
    assert "g/a/c/0" in set(store.list_prefix("g/"))  # nothing erased yet
    store.resume.set()
    adder.join()
    eraser.join()
    assert _stored(store, "g") == {"b": [7, 8, 9]}  # the erase after the add: x went with it
    assert not any(k.startswith("g/x/") for k in store.list_prefix("g/"))
    assert not list(store.list_prefix(CLAIMS_DIR))


def test_an_add_waits_while_an_erase_holds_its_group():
    store = PausedInCommit()
    z3.to_zarr(small_dataset(a=[1, 2, 3]), store, group="g", consolidated=False)
    store.pause_after = _after_claims
    eraser = _Writer(
        lambda: z3.to_zarr(small_dataset(b=[7, 8, 9]), store, group="g", mode="w", consolidated=False)
    )
    assert store.paused.wait(60)
    adder = _Writer(
        lambda: z3.to_zarr(small_dataset(x=[4, 5, 6]), store, group="g", mode="a", consolidated=False)
    )
    assert store.waiting.wait(60)  # the adder withdrew its shared hold: the eraser holds g

    assert not adder.done.is_set()
    assert not any(k.startswith("g/x/") for k in store.list_prefix("g/"))
    store.resume.set()
    eraser.join()
    adder.join()
    assert _stored(store, "g") == {"b": [7, 8, 9], "x": [4, 5, 6]}  # the add after the erase, whole
    assert not list(store.list_prefix(CLAIMS_DIR))


def test_a_paused_add_no_longer_makes_the_others_fail_with_a_short_commit_wait():
    store = PausedInCommit(settings={"commit_wait": 0.2})
    z3.to_zarr(small_dataset(a=[1, 2, 3]), store, consolidated=False)
    store.pause_after = _after_claims
    first = _Writer(lambda: z3.to_zarr(small_dataset(x=[4, 5, 6]), store, mode="a", consolidated=False))
    assert store.paused.wait(60)
    try:
        for name in ("y", "z"):  # each would have waited past commit_wait on the root's claim
            z3.to_zarr(small_dataset(**{name: [0, 1, 2]}), store, mode="a", consolidated=False)
    except WriteConflictError as e:  # pragma: no cover - the failure this test guards against
        pytest.fail(f"an add waited on another add's hold: {e}")
    finally:
        store.resume.set()
        first.join()
    assert _stored(store) == {"a": [1, 2, 3], "x": [4, 5, 6], "y": [0, 1, 2], "z": [0, 1, 2]}


class _DeadOnceMet(MemoryStore):
    """Judges the write ``dead`` dead from the moment a writer, holding an exclusive claim, lists
    the shared holds of that document and finds it there (a killed adder, met by an eraser)."""

    dead = ""
    met = False

    def list_prefix(self, prefix):
        keys = list(super().list_prefix(prefix))
        if (
            prefix.startswith(SHARED_DIR)
            and prefix != SHARED_DIR
            and any(k.endswith(self.dead) for k in keys)
        ):
            self.met = True
        return iter(keys)


@pytest.mark.parametrize("killed", ["after-its-claims", "holding-them-unchecked"])
def test_a_dead_shared_holder_is_cleared_so_the_erase_goes_on(monkeypatch, killed):
    from store_doubles import SnapshotOnSetStore

    source = SnapshotOnSetStore()
    z3.to_zarr(small_dataset(a=[1, 2, 3]), source, group="g", consolidated=False)
    source.when = _after_claims
    z3.to_zarr(small_dataset(x=[4, 5, 6]), source, group="g", mode="a", consolidated=False)  # snapshot taken
    contents = dict(source.snapshot)
    (dead,) = commit.pending_writes(MemoryStore(contents))
    assert any(k.startswith(SHARED_DIR) and k.endswith(dead) for k in contents)  # it holds g (and /) shared
    if killed == "holding-them-unchecked":
        del contents[f".z3-txn/{dead}/claims-checked"]
    store = _DeadOnceMet(contents)
    store.dead = dead
    real = commit.writer_is_dead
    fake = lambda txn_id: (store.met and txn_id == dead) or real(txn_id)  # noqa: E731
    monkeypatch.setattr(commit, "writer_is_dead", fake)
    monkeypatch.setattr(node_claims, "writer_is_dead", fake)

    z3.to_zarr(small_dataset(b=[7, 8, 9]), store, group="g", mode="w", consolidated=False)

    assert store.met  # the eraser met the dead adder's shared hold, and finished (or dropped) it
    assert _stored(store, "g") == {"b": [7, 8, 9]}
    assert not any(k.startswith("g/x/") for k in store.list_prefix("g/"))
    assert not list(store.list_prefix(".z3-txn/"))


class _Stops(MemoryStore):
    """Stops a thread at each store call the next unreached stop picks (``pick(name, key)``, before
    the call), until that stop's ``go`` is set; ``reached`` is set meanwhile."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.stops: list[tuple[object, threading.Event, threading.Event]] = []
        self.doc_writer: dict[str, threading.Thread] = {}  # who wrote each document first

    def add_stop(self, pick) -> tuple[threading.Event, threading.Event]:
        reached, go = threading.Event(), threading.Event()
        self.stops.append((pick, reached, go))
        return reached, go

    def _stop(self, name, key):
        for pick, reached, go in self.stops:
            if not reached.is_set() and pick(name, key):
                reached.set()
                assert go.wait(60)
                return

    def set(self, key, value):
        super().set(key, value)
        self._stop("set", key)

    def set_if(self, key, value, expected):
        self.doc_writer.setdefault(key, threading.current_thread())
        return super().set_if(key, value, expected)

    def get_versioned(self, key):
        self._stop("get_versioned", key)
        return super().get_versioned(key)


def test_two_adds_consolidating_at_once_both_land_in_the_roots_consolidated_metadata():
    """The first add lists the members for the root's consolidated metadata before the second
    add's variable is stored, and writes the root after the second add wrote its own: the
    members are listed again within the root's compare-and-swap, so neither is lost (the adds
    took turns on the root before, so their consolidations never crossed)."""
    store = _Stops()
    z3.to_zarr(small_dataset(a=[1, 2, 3]), store, consolidated=True)
    first_claimed, first_go = store.add_stop(lambda name, key: name == "set" and _after_claims(key))
    second_claimed, second_go = store.add_stop(lambda name, key: name == "set" and _after_claims(key))
    first_listed, first_writes_root = store.add_stop(
        lambda name, key: (
            name == "get_versioned"
            and key == "zarr.json"
            and store.doc_writer.get("x/zarr.json") is threading.current_thread()
        )
    )
    first = _Writer(lambda: z3.to_zarr(small_dataset(x=[4, 5, 6]), store, mode="a", consolidated=True))
    assert first_claimed.wait(60)
    second = _Writer(lambda: z3.to_zarr(small_dataset(y=[7, 8, 9]), store, mode="a", consolidated=True))
    assert second_claimed.wait(60)  # planned and claimed before the first marked the root
    first_go.set()
    assert first_listed.wait(60)  # x written, the members listed: a and x
    second_go.set()
    second.join()  # y written, the root's table made of a, x and y
    first_writes_root.set()
    first.join()
    assert _stored(store, consolidated=True) == {"a": [1, 2, 3], "x": [4, 5, 6], "y": [7, 8, 9]}
