"""review16: writers that erase or change a node outside the holds (found by reading)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import xarray as xr
from sample_data import small_dataset
from store_doubles import PausedAfterMove, PausedInEraseGap

import zarr3_backend as z3
from zarr3_backend.core.node_claims import SHARED_DIR


def _left(store, path):
    """The values of the array at ``path``, None when it is gone."""
    try:
        return z3.open_array(store, path=path)[:].tolist()
    except z3.errors.Zarr3Error:
        return None


class _ErasesToo(PausedAfterMove):
    """PausedAfterMove whose ``other`` also counts as having reached the window when it erases
    a prefix outside a transaction (``del group[name]``)."""

    def erase_prefix(self, prefix):
        super().erase_prefix(prefix)
        if self._in_other() and not prefix.startswith(".z3-txn/"):
            self.race["reached"].set()


def test_del_of_an_array_and_an_append_to_it_never_bring_it_back_with_holes():
    # group.Group.__delitem__ erases the array's prefix at once (store.erase_prefix): no
    # transaction, no claim, no hold. An append paused after its values moved in (document not
    # yet written) loses its rows and the old ones to the delete, then writes the array's
    # document back: the array is back, all fill.
    store = _ErasesToo()
    g = z3.open_group(store, mode="w").create_group("g")
    arr = g.create_array("x", shape=(2,), chunks=(2,), dtype="f8", fill_value=np.nan)
    arr[:] = [1.0, 2.0]
    errors = []

    def delete():
        try:
            del g["x"]
        except z3.errors.Zarr3Error as e:  # refused: allowed
            errors.append(e)

    store.race["other"] = delete
    try:
        arr.append(np.array([3.0, 4.0]))
    except z3.errors.Zarr3Error:
        pass  # refused once the delete went first: allowed
    store.race["thread"].join(60)
    # the delete last: gone; the append last (the delete refused or waited): whole
    assert _left(store, "g/x") in (None, [1.0, 2.0, 3.0, 4.0]), _left(store, "g/x")


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_resize_of_an_array_added_after_the_erase_listed_its_nodes_is_whole_or_gone(zarr_format):
    # review15 F3 for resize: a growth with no unit to cut is a claimed_shape_change
    # (commit.claimed_shape_change), whose manifest holds the array's claim only, not the
    # groups above it (F3 put shape_from into Transaction.commit's held_nodes only). The erase
    # of g, which listed its nodes before n was added, does not wait for it: the resize checks
    # n's shape, the erase takes n, and a v2 resize (metadata_v2_store._update_v2_node falls
    # back to the handle's metadata when the node is gone) writes .zattrs and .zarray back:
    # n is back in the new g with shape 4 and all fill.
    store = PausedInEraseGap()
    z3.to_zarr(
        small_dataset(a=[0, 0]), store, mode="w", group="g", consolidated=False, zarr_format=zarr_format
    )
    errors = []

    def resize():
        try:
            z3.open_array(store, path="g/n", mode="r+").resize((4,))
        except z3.errors.Zarr3Error as e:  # refused (the array erased first): allowed
            errors.append(e)

    store.add = lambda: z3.to_zarr(
        small_dataset(n=[1, 2]), store, mode="a", group="g", consolidated=False, zarr_format=zarr_format
    )
    store.racer = resize
    z3.to_zarr(
        small_dataset(x=[5, 6]), store, mode="w", group="g", consolidated=False, zarr_format=zarr_format
    )
    assert not store.thread.is_alive()
    left = _left(store, "g/n")
    assert left is None or left[:2] == [1.0, 2.0], left  # gone, or resized with its values
    got = xr.open_dataset(store, engine="zarr3", group="g", consolidated=False).load()
    assert got["x"].values.tolist() == [5.0, 6.0]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_an_add_of_an_array_and_a_mode_w_of_a_group_at_its_path_never_make_both(zarr_format):
    # A v2 mode="a" that adds variable x to g claims g/x/.zarray (to be missing); a v2
    # mode="w" of the group g/x, committing after the add was planned, writes g/x/.zgroup and
    # holds g/x/zarr.json and g/x/.zgroup (node_claims.held_nodes: "both formats" of a group,
    # not .zarray). The add's check finds no .zarray and writes it next to the .zgroup: one
    # directory holding a group and an array (v3 checks the one zarr.json: NodeAddedError).
    from store_doubles import CommitHookedStore

    store = CommitHookedStore()
    z3.to_zarr(
        small_dataset(a=[0, 0]), store, mode="w", group="g", consolidated=False, zarr_format=zarr_format
    )
    store.hook = lambda: z3.to_zarr(
        small_dataset(e=[5, 6]), store, mode="w", group="g/x", consolidated=False, zarr_format=zarr_format
    )
    try:
        z3.to_zarr(
            xr.Dataset({"x": ("u", np.array([1.0, 2.0]))}),
            store,
            mode="a",
            group="g",
            consolidated=False,
            zarr_format=zarr_format,
        )
    except z3.errors.Zarr3Error:
        pass  # refused: x is a group now (what running the two one after the other gives)
    assert not store.exists("g/x/.zarray")  # the group is left alone
    assert z3.open_group(store, path="g/x", mode="r").attrs is not None
    got = xr.open_dataset(store, engine="zarr3", group="g/x", consolidated=False).load()
    assert got["e"].values.tolist() == [5.0, 6.0]


def test_an_append_that_commits_while_migrate_runs_is_not_lost():
    # cli.migrate.apply_migration writes the zarr.json documents translated from the v2
    # documents plan_migration read, and erases the v2 documents, with no claim or check: a v2
    # append committing between the two (its .zarray grown to 4) is hidden by the migrated
    # zarr.json (shape 2), and its .zarray erased: the append returned, its rows are gone.
    from zarr3_backend.cli.migrate import apply_migration, plan_migration

    store = z3.MemoryStore()
    root = z3.open_group(store, mode="w", zarr_format=2)
    root.create_array("n", shape=(2,), chunks=(2,), dtype="f8", fill_value=np.nan)[:] = [1.0, 2.0]
    plan = plan_migration(store, "")
    z3.open_array(store, path="n", mode="r+").append(np.array([3.0, 4.0]))  # another writer
    try:
        apply_migration(store, plan, "")
    except z3.errors.Zarr3Error:
        pass  # refused (the node changed since it was planned): allowed
    assert _left(store, "n") == [1.0, 2.0, 3.0, 4.0]


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("added_in", ["a", "a/b/c", "a/b"])
def test_a_mode_w_of_a_nested_group_and_an_add_above_or_below_it_are_whole(added_in, zarr_format):
    # checked sound: the adder (paused after its values moved in) holds every group above its
    # variable shared, the eraser of a/b holds a/b's documents in every format exclusive (a/b/c
    # and a/b: they take turns) and a's shared (a: they commit at once)
    store = PausedAfterMove()
    for group in ("a", "a/b", "a/b/c"):
        z3.to_zarr(
            small_dataset(k=[0, 0]), store, mode="w", group=group, consolidated=False, zarr_format=zarr_format
        )
    store.race["other"] = lambda: z3.to_zarr(
        small_dataset(e=[5, 6]), store, mode="w", group="a/b", consolidated=False, zarr_format=zarr_format
    )
    try:
        z3.to_zarr(
            small_dataset(n=[1, 2]),
            store,
            mode="a",
            group=added_in,
            consolidated=False,
            zarr_format=zarr_format,
        )
    except z3.errors.Zarr3Error:
        pass  # refused once the erase went first (its group gone): allowed
    store.race["thread"].join(60)
    assert _left(store, "a/b/e") == [5.0, 6.0]
    assert _left(store, f"{added_in}/n") in (None, [1.0, 2.0])
    if added_in == "a":
        assert _left(store, "a/n") == [1.0, 2.0]  # not erased: outside what mode="w" replaces
    assert not list(store.list_prefix(".z3-txn/"))


class _EraseAfterFirstChunk(z3.MemoryStore):
    """Once the first chunk under ``below`` is stored, runs ``other`` in a thread and goes on
    when that writer has finished, having erased what it replaces (``/erased``), or meets a
    shared hold (then it waits for this writer)."""

    below = ""
    other = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.thread, self.reached, self.erased = None, threading.Event(), False

    def _after(self, keys):
        if threading.current_thread() is self.thread:
            if any(k.endswith("/erased") for k in keys):
                self.erased = True
                self.reached.set()
            return
        if self.other is not None and any(k.startswith(self.below) for k in keys):
            self.thread, self.other = threading.Thread(target=self.other), None
            self.thread.start()
            assert self.reached.wait(60)
            if self.erased:  # it did not wait for this writer: let it finish first
                self.thread.join(60)

    def set(self, key, value):
        super().set(key, value)
        self._after([key])

    def set_many(self, items):
        items = dict(items)
        super().set_many(items)
        self._after(list(items))

    def _waits(self, prefix, keys):
        return (
            threading.current_thread() is self.thread
            and keys
            and prefix.startswith(SHARED_DIR)
            and prefix != SHARED_DIR
        )

    def list_prefix(self, prefix):
        keys = list(super().list_prefix(prefix))
        if self._waits(prefix, keys):
            self.reached.set()  # the erase drains a document's shared holds: it waits for them
        return iter(keys)


def test_a_copy_into_a_group_that_a_mode_w_replaces_meanwhile_is_whole_or_absent(monkeypatch):
    # cli.copy writes each destination unit straight to its key, then publishes the documents
    # (publish: store_node_metadata / write_node_documents), holding nothing: a mode="w" of the
    # destination's group between the two erases the units written so far, and the published
    # document shows the array with holes.
    import importlib

    copy_cli = importlib.import_module("zarr3_backend.cli.copy")  # the module (cli exports the command)

    src, dst = z3.MemoryStore(), _EraseAfterFirstChunk()
    z3.create_array(src, path="g/n", shape=(4,), chunks=(2,), dtype="f8")[:] = [1.0, 2.0, 3.0, 4.0]
    z3.to_zarr(small_dataset(a=[0, 0]), dst, mode="w", group="g", consolidated=False)
    stores = {"src": src, "dst": dst}
    monkeypatch.setattr(copy_cli, "store_for", lambda location, mode: stores[location])
    dst.below = "g/n/c"
    dst.other = lambda: z3.to_zarr(small_dataset(x=[5, 6]), dst, mode="w", group="g", consolidated=False)
    try:
        copy_cli.copy_hierarchy("src", "dst", "g/n", scheduler="synchronous")
    except z3.errors.Zarr3Error:
        pass  # refused: allowed, as long as nothing is half there
    dst.thread.join(60)
    assert _left(dst, "g/x") == [5.0, 6.0]
    assert _left(dst, "g/n") in (None, [1.0, 2.0, 3.0, 4.0]), _left(dst, "g/n")


@pytest.mark.parametrize("paused", ["eraser", "adder"])
def test_a_writer_that_gives_up_waiting_on_a_hold_leaves_no_record(paused):
    # checked sound: past commit_wait the waiter (an add waiting on the erase's exclusive claim,
    # or an erase draining the add's shared hold, having taken its exclusive claim) raises
    # WriteConflictError and leaves neither records nor claims nor shared holds; the paused
    # writer then commits whole
    from store_doubles import PausedInCommit

    from zarr3_backend.core.node_claims import CLAIMS_DIR, claim_key
    from zarr3_backend.errors import WriteConflictError

    store = PausedInCommit(settings={"commit_wait": 0.2})
    z3.to_zarr(small_dataset(a=[1, 2]), store, group="g", consolidated=False)
    store.pause_after = lambda key: key.endswith("/claims-checked")
    erase = lambda: z3.to_zarr(small_dataset(b=[7, 8]), store, group="g", mode="w", consolidated=False)  # noqa: E731
    add = lambda: z3.to_zarr(small_dataset(x=[4, 5]), store, group="g", mode="a", consolidated=False)  # noqa: E731
    first, second = (erase, add) if paused == "eraser" else (add, erase)
    thread = threading.Thread(target=first)
    thread.start()
    assert store.paused.wait(60)
    (held_by,) = [k for k in store.list_prefix(".z3-txn/") if k.endswith("/manifest.json")]
    with pytest.raises(WriteConflictError):
        second()
    left = [k for k in store.list_prefix(".z3-txn/") if not k.startswith(CLAIMS_DIR)]
    assert {k.split("/")[1] for k in left} == {held_by.split("/")[1]}  # the paused writer's only
    holders = {
        (store.get(k) or b"").decode() for k in store.list_prefix(CLAIMS_DIR) if not k.startswith(SHARED_DIR)
    }
    holders |= {k.rsplit("/", 1)[1] for k in store.list_prefix(SHARED_DIR)}
    assert holders == {held_by.split("/")[1]}
    assert store.get(claim_key("g/zarr.json")) in (None, held_by.split("/")[1].encode())
    store.resume.set()
    thread.join(60)
    want = {"b": [7.0, 8.0]} if paused == "eraser" else {"a": [1.0, 2.0], "x": [4.0, 5.0]}
    got = xr.open_dataset(store, engine="zarr3", group="g", consolidated=False).load()
    assert {n: got[n].values.tolist() for n in got.data_vars} == want
    assert not list(store.list_prefix(".z3-txn/"))
