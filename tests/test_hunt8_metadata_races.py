"""Writers of different kinds changing one node's metadata from separate processes.

An attribute update changes the attributes it names and nothing else; a resize changes the shape
and nothing else. Each used to write the whole document from the metadata its handle read at
open, so a concurrent writer's attributes, or its new shape, were silently reverted.
"""

from __future__ import annotations

import json

import hunt8_metadata_writers as writers
import numpy as np
import pytest
from concurrent_writers import run_at_once

import zarr3_backend as z3


def test_a_stale_handle_changes_only_what_it_names():
    """Two handles opened together: each change keeps what the other wrote meanwhile."""
    store = z3.MemoryStore()
    z3.create_array(store, "a", shape=(4, 3), dtype="i4", chunks=(2, 3), attributes={"keep": 0})
    g = z3.open_group(store, mode="r+")
    one, two = z3.open_array(store, "a", mode="r+"), z3.open_array(store, "a", mode="r+")
    g_two = z3.open_group(store, mode="r+")
    one.attrs["x"] = 1
    two.attrs["y"] = 2
    assert dict(z3.open_array(store, "a").attrs) == {"keep": 0, "x": 1, "y": 2}
    one.resize((6, 3))
    two.attrs.update(z=3)  # the handle still believes the shape is (4, 3)
    stored = z3.open_array(store, "a")
    assert stored.shape == (6, 3)
    assert dict(stored.attrs) == {"keep": 0, "x": 1, "y": 2, "z": 3}
    del one.attrs["x"]  # only "x" goes, though this handle never saw y and z
    assert dict(z3.open_array(store, "a").attrs) == {"keep": 0, "y": 2, "z": 3}
    two.resize((6, 5))  # a stale handle's resize keeps the attributes written since
    assert dict(z3.open_array(store, "a").attrs) == {"keep": 0, "y": 2, "z": 3}
    assert z3.open_array(store, "a").shape == (6, 5)
    g.attrs["p"] = 1
    g_two.attrs["q"] = 2
    assert dict(z3.open_group(store).attrs) == {"p": 1, "q": 2}


@pytest.mark.slow
@pytest.mark.parametrize("path", ["", "a"], ids=["group", "array"])
def test_processes_updating_attributes_and_growing_lose_nothing(tmp_path, path):
    """Three processes set their own attributes while (for the array) a fourth grows it row by
    row: every attribute and the full shape with every row's values are there at the end."""
    root = str(tmp_path / "s.zarr")
    g = z3.open_group(root, mode="w")
    g.create_array("a", shape=(0, 3), dtype="i4", chunks=(4, 3), fill_value=0, attributes={"keep": True})
    rounds, n = 25, 3
    targets: list[tuple] = [(writers.attribute_writer, (root, path, w, rounds)) for w in range(n)]
    if path:
        targets.append((writers.grower, (root, path, rounds)))
    run_at_once(targets)
    node = z3.open_group(root)[path] if path else z3.open_group(root)
    want = {f"w{w}-{i}": i for w in range(n) for i in range(rounds)}
    if path:
        want["keep"] = True
    assert dict(node.attrs) == want
    if path:
        assert node.shape == (rounds, 3)
        np.testing.assert_array_equal(node[:, 0], np.arange(1, rounds + 1))


class _InterleavingStore(z3.MemoryStore):
    """A MemoryStore that runs ``before_write`` once, just before the first write of
    ``hooked`` (a concurrent writer getting in between a writer's read and its write)."""

    before_write = None
    hooked = "zarr.json"

    def _interleave(self, key):
        if key == self.hooked and self.before_write is not None:
            hook, self.before_write = self.before_write, None
            hook()

    def set(self, key, value):
        self._interleave(key)
        super().set(key, value)

    def set_if(self, key, value, expected):
        self._interleave(key)
        return super().set_if(key, value, expected)


def test_consolidating_keeps_a_root_attribute_written_while_it_ran():
    """consolidate_metadata reads the root, lists the members, then writes the root: an
    attribute set on the root in between used to be dropped by that write."""
    store = _InterleavingStore()
    g = z3.open_group(store, mode="w", attributes={"title": "t"})
    g.create_array("a", shape=(4,), dtype="i4", chunks=(2,))
    other = z3.open_group(store, mode="r+")
    store.before_write = lambda: other.attrs.update(late=1)
    z3.consolidate_metadata(store)
    root = z3.open_group(store, mode="r")
    assert dict(root.attrs) == {"title": "t", "late": 1}
    assert set(root.metadata.consolidated_metadata["metadata"]) == {"a"}


@pytest.mark.parametrize("change", ["append", "shrink"])
def test_an_append_or_a_shrink_keeps_attributes_set_since_the_handle_was_opened(change):
    """append and a shrinking resize commit a transaction whose new zarr.json was built from the
    handle's metadata: an attribute another handle set since was dropped at the commit."""
    store = z3.MemoryStore()
    z3.create_array(store, "a", shape=(4, 3), dtype="i4", chunks=(2, 3), fill_value=0, attributes={"keep": 0})
    z3.open_array(store, "a", mode="r+")[...] = 7
    mine, other = z3.open_array(store, "a", mode="r+"), z3.open_array(store, "a", mode="r+")
    other.attrs["late"] = 1
    if change == "append":
        mine.append(np.full((2, 3), 9, dtype="i4"))
        want_shape, want = (6, 3), np.concatenate([np.full((4, 3), 7), np.full((2, 3), 9)])
    else:
        mine.resize((1, 3))
        want_shape, want = (1, 3), np.full((1, 3), 7)
    stored = z3.open_array(store, "a")
    assert stored.shape == want_shape
    assert dict(stored.attrs) == {"keep": 0, "late": 1}
    np.testing.assert_array_equal(stored[...], want)


@pytest.mark.slow
def test_processes_appending_and_updating_attributes_lose_nothing(tmp_path):
    """One process appends row by row (Array.append: a transaction) while three set their own
    attributes: every row and every attribute are there at the end."""
    root = str(tmp_path / "s.zarr")
    g = z3.open_group(root, mode="w")
    g.create_array("a", shape=(0, 3), dtype="i4", chunks=(4, 3), fill_value=0)
    rounds, n = 25, 3
    targets: list[tuple] = [(writers.attribute_writer, (root, "a", w, rounds)) for w in range(n)]
    targets.append((writers.appender, (root, "a", rounds)))
    run_at_once(targets)
    a = z3.open_array(root, "a")
    assert dict(a.attrs) == {f"w{w}-{i}": i for w in range(n) for i in range(rounds)}
    assert a.shape == (rounds, 3)
    np.testing.assert_array_equal(a[:, 0], np.arange(1, rounds + 1))


@pytest.mark.slow
def test_consolidating_while_others_set_root_attributes_and_append_loses_nothing(tmp_path):
    """One process consolidates the root over and over while two set root attributes and one
    appends to a member: every root attribute and row is there at the end, and the consolidated
    copy of the member is a document it had (a shape it went through)."""
    root = str(tmp_path / "s.zarr")
    g = z3.open_group(root, mode="w", attributes={"title": "t"})
    g.create_array("a", shape=(0, 3), dtype="i4", chunks=(4, 3), fill_value=0)
    z3.consolidate_metadata(root)
    rounds = 20
    run_at_once(
        [
            (writers.attribute_writer, (root, "", 0, rounds)),
            (writers.attribute_writer, (root, "", 1, rounds)),
            (writers.appender, (root, "a", rounds)),
            (writers.consolidator, (root, rounds)),
        ]
    )
    g = z3.open_group(root, mode="r", use_consolidated=False)
    want = {"title": "t", **{f"w{w}-{i}": i for w in range(2) for i in range(rounds)}}
    assert dict(g.attrs) == want
    assert g["a"].shape == (rounds, 3)
    np.testing.assert_array_equal(g["a"][:, 0], np.arange(1, rounds + 1))
    doc = json.loads((tmp_path / "s.zarr" / "zarr.json").read_text())
    entry = doc["consolidated_metadata"]["metadata"]["a"]
    assert entry["shape"][0] <= rounds and entry["shape"][1] == 3
    assert entry["attributes"] == {}


@pytest.mark.slow
def test_processes_updating_attributes_of_a_zarr_v2_group_lose_nothing(tmp_path):
    """Zarr v2: three processes set their own attributes of one group (its .zattrs)."""
    root = str(tmp_path / "v2.zarr")
    z3.create_group(root, zarr_format=2, attributes={"keep": True})
    rounds, n = 25, 3
    run_at_once([(writers.attribute_writer, (root, "", w, rounds)) for w in range(n)])
    want = {"keep": True, **{f"w{w}-{i}": i for w in range(n) for i in range(rounds)}}
    assert dict(z3.open_group(root, mode="r").attrs) == want


def test_an_append_through_a_handle_opened_before_another_append_goes_after_it():
    """A long-lived handle appends after another process appended: its rows go after those
    rows (it used to write from the shape it had read at open, over the other rows)."""
    store = z3.MemoryStore()
    z3.create_array(store, "a", shape=(2, 3), dtype="i4", chunks=(2, 3), fill_value=0)[...] = 1
    old, other = z3.open_array(store, "a", mode="r+"), z3.open_array(store, "a", mode="r+")
    other.append(np.full((2, 3), 2, dtype="i4"))
    old.append(np.full((1, 3), 3, dtype="i4"))
    stored = z3.open_array(store, "a")
    assert stored.shape == (5, 3) and old.shape == (5, 3)
    np.testing.assert_array_equal(stored[:, 0], [1, 1, 2, 2, 3])


@pytest.mark.slow
def test_an_append_after_a_writer_died_inside_its_append_commit_finishes_that_one_first(tmp_path):
    """A handle opened before another process's append, which was killed inside its commit
    (the array marked): this handle's append rolls the dead one forward, then goes after it."""
    import test_fault_injection as fi

    fi.make_old(tmp_path, "raw")
    handle = z3.open_array(str(tmp_path), path="x", mode="r+")
    assert fi.run_child(tmp_path, "append", "raw", env={"KILL_AT": "set_if:zarr.json:1"}) is None
    mine = np.full((4, fi.SHAPE[1]), 7.0)
    handle.append(mine)
    old, new = fi.old_values(), fi.new_values()
    want = np.concatenate([old, new[:30], mine])
    np.testing.assert_array_equal(z3.open_array(str(tmp_path), path="x")[...], want)
    assert not fi.leftovers(tmp_path)


def test_a_shrink_through_a_handle_opened_before_another_growth_drops_the_grown_rows():
    """A handle that never saw another writer grow the array shrinks it back: the rows outside
    the new shape are erased (it judged the resize from its own shape, a no-op, and left them
    stored, so a later growth brought the old values back instead of the fill value)."""
    store = z3.MemoryStore()
    z3.create_array(store, "a", shape=(4, 3), dtype="i4", chunks=(2, 3), fill_value=0)[...] = 1
    stale, other = z3.open_array(store, "a", mode="r+"), z3.open_array(store, "a", mode="r+")
    other.resize((8, 3))
    other[4:] = 5
    stale.resize((4, 3))
    again = z3.open_array(store, "a", mode="r+")
    assert again.shape == (4, 3)
    again.resize((8, 3))
    np.testing.assert_array_equal(again[...], np.concatenate([np.ones((4, 3)), np.zeros((4, 3))]))


@pytest.mark.slow
def test_processes_updating_attributes_of_zarr_v2_arrays_keep_the_zmetadata_current(tmp_path):
    """Zarr v2 with a consolidated .zmetadata: three processes set attributes of three arrays.
    Each write patches .zmetadata too; a patch read before another's write and written after it
    dropped that one, leaving .zmetadata (what a read-only open uses) stale for good."""
    root = str(tmp_path / "v2.zarr")
    g = z3.create_group(root, zarr_format=2)
    n, rounds = 3, 20
    for w in range(n):
        g.create_array(f"a{w}", shape=(4,), dtype="i4", chunks=(2,), zarr_format=2)
    z3.consolidate_metadata(root)
    run_at_once([(writers.attribute_writer, (root, f"a{w}", w, rounds)) for w in range(n)])
    zmetadata = json.loads((tmp_path / "v2.zarr" / ".zmetadata").read_text())["metadata"]
    for w in range(n):
        want = {f"w{w}-{i}": i for i in range(rounds)}
        assert json.loads((tmp_path / "v2.zarr" / f"a{w}" / ".zattrs").read_text()) == want
        assert zmetadata[f"a{w}/.zattrs"] == want, w
        assert dict(z3.open_group(root, mode="r")[f"a{w}"].attrs) == want


def test_a_zarr_v2_attribute_write_keeps_the_zmetadata_patch_of_another_node_written_meanwhile():
    """Two v2 arrays' attributes written at once: each write patches the root's .zmetadata;
    the patch read before the other's write and written after it used to drop that one."""
    store = _InterleavingStore()
    g = z3.create_group(store, zarr_format=2)
    for name in ("a", "b"):
        g.create_array(name, shape=(4,), dtype="i4", chunks=(2,), zarr_format=2)
    z3.consolidate_metadata(store)
    a, b = z3.open_array(store, "a", mode="r+"), z3.open_array(store, "b", mode="r+")
    store.hooked = ".zmetadata"
    store.before_write = lambda: b.attrs.update(mine="b")
    a.attrs["mine"] = "a"
    zmetadata = json.loads(store.get(".zmetadata"))["metadata"]
    assert zmetadata["a/.zattrs"] == {"mine": "a"}
    assert zmetadata["b/.zattrs"] == {"mine": "b"}


class _ListingStore(z3.MemoryStore):
    """Runs ``during_listing`` once, at the first listing after a transaction's manifest is
    written (the commit listing the members to consolidate the root)."""

    during_listing = None
    armed = False

    def set(self, key, value):
        super().set(key, value)
        self.armed = self.armed or key.endswith("manifest.json")

    def list_dir(self, prefix):
        if self.armed and self.during_listing is not None:
            hook, self.during_listing = self.during_listing, None
            hook()
        return super().list_dir(prefix)


def test_a_consolidating_to_zarr_keeps_a_root_attribute_set_while_it_listed_the_members():
    """to_zarr(group=..., consolidated=True) rebuilds the root's consolidated metadata at its
    commit by listing the members, then wrote the root as it had read it before the listing: a
    root attribute another writer set meanwhile was dropped."""
    xr = pytest.importorskip("xarray")
    store = _ListingStore()
    z3.open_group(store, mode="w", attributes={"title": "t"})
    z3.to_zarr(xr.Dataset({"v": ("x", np.arange(4.0))}), store, group="sub", mode="w", consolidated=True)
    other = z3.open_group(store, mode="r+")
    store.armed, store.during_listing = False, lambda: other.attrs.update(late=1)
    z3.to_zarr(xr.Dataset({"w": ("x", np.arange(4.0))}), store, group="sub", mode="a", consolidated=True)
    assert store.during_listing is None  # the hook ran
    root = z3.open_group(store, mode="r")
    assert dict(root.attrs) == {"title": "t", "late": 1}
    assert set(root.metadata.consolidated_metadata["metadata"]) == {"sub", "sub/v", "sub/w"}
