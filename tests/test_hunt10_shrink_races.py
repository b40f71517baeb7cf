"""Writes into an array racing a shrink of it (``resize`` to fewer rows).

A write planned at the larger shape whose values were moved into place after the shrink erased
the units outside the new shape left them stored past the end: a later growth showed them
again instead of the fill value. Now a write that finds, once its values are in place, the
stored shape smaller than the one it planned at erases, under the array's claim, the units
wholly outside it; and a shrink does the same once its new shape is written (for a write that
moved its values before that), so a later growth shows fill.
"""

from __future__ import annotations

import numpy as np
import pytest
from store_doubles import CommitHookedStore

import zarr3_backend as z3

COLS = 2


def _array(store, zarr_format: int = 3, rows: int = 8, written: int = 8):
    """``a``: ``rows`` rows in chunks of 2 rows, fill 0, its first ``written`` rows set to 1."""
    a = z3.create_array(
        store,
        "a",
        shape=(rows, COLS),
        dtype="i4",
        chunks=(2, COLS),
        fill_value=0,
        zarr_format=zarr_format,
        dimension_names=("t", "x"),
    )
    a[:written] = 1
    return a


def _unit_keys(store) -> list[str]:
    return sorted(
        k for k in store.list_prefix("a/") if k.rpartition("/")[2] not in ("zarr.json", ".zarray", ".zattrs")
    )


@pytest.mark.parametrize("zarr_format", [3, 2])
@pytest.mark.parametrize("rows", [slice(4, 8), slice(5, 7)], ids=["whole-units", "partial-units"])
def test_a_write_committed_after_a_shrink_leaves_nothing_past_the_new_end(zarr_format, rows):
    """The write's values (two units: staged, then committed) are staged, then another writer
    shrinks ``a`` to 4 rows, then the write commits: nothing of it stays past row 4, and
    growing ``a`` again shows fill there."""
    store = CommitHookedStore()
    _array(store, zarr_format)
    mine = z3.open_array(store, "a", mode="r+")
    store.hook = lambda: z3.open_array(store, "a", mode="r+").resize((4, COLS))
    mine[rows] = 9
    assert store.hook is None  # the shrink ran
    assert len(_unit_keys(store)) == 2  # the units of rows 0-3 alone
    grown = z3.open_array(store, "a", mode="r+")
    grown.resize((8, COLS))
    np.testing.assert_array_equal(grown[:, 0], [1, 1, 1, 1, 0, 0, 0, 0])
    assert not list(store.list_prefix(".z3-txn/"))


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_a_shrink_erases_what_a_write_moved_in_after_it_listed_the_units(zarr_format):
    """The shrink found no unit outside its new shape when it planned (rows 4-7 never written),
    then a write of rows 6-7 committed before the shrink's new shape was stored (it found the
    shape unchanged): the shrink erases it once its shape is written."""
    store = CommitHookedStore()
    _array(store, zarr_format, written=4)
    other = z3.open_array(store, "a", mode="r+")

    def write_past_the_end() -> None:
        other[6:8] = 9

    store.hook = write_past_the_end
    z3.open_array(store, "a", mode="r+").resize((4, COLS))
    assert store.hook is None
    assert len(_unit_keys(store)) == 2
    grown = z3.open_array(store, "a", mode="r+")
    grown.resize((8, COLS))
    np.testing.assert_array_equal(grown[:, 0], [1, 1, 1, 1, 0, 0, 0, 0])


def test_a_to_zarr_region_write_committed_after_a_shrink_leaves_nothing_past_the_new_end():
    """As above, through ``to_zarr(region=...)`` (which stages, then commits)."""
    xr = pytest.importorskip("xarray")
    store = CommitHookedStore()
    _array(store)
    store.hook = lambda: z3.open_array(store, "a", mode="r+").resize((4, COLS))
    part = xr.Dataset({"a": (("t", "x"), np.full((2, COLS), 9, "i4"))})
    z3.to_zarr(part, store, region={"t": slice(6, 8)}, consolidated=False)
    assert store.hook is None
    assert len(_unit_keys(store)) == 2
    grown = z3.open_array(store, "a", mode="r+")
    grown.resize((8, COLS))
    np.testing.assert_array_equal(grown[:, 0], [1, 1, 1, 1, 0, 0, 0, 0])


def test_a_write_committed_after_a_growth_keeps_everything():
    """The other way round (the array grew meanwhile): nothing of the write is erased, and the
    rows the growth added stay fill."""
    store = CommitHookedStore()
    _array(store)
    mine = z3.open_array(store, "a", mode="r+")
    store.hook = lambda: z3.open_array(store, "a", mode="r+").resize((12, COLS))
    mine[5:8] = 9
    np.testing.assert_array_equal(z3.open_array(store, "a")[:, 0], [1] * 5 + [9, 9, 9] + [0] * 4)


@pytest.mark.parametrize(
    ("zarr_format", "layout"),
    [(3, {"chunks": (2, 2)}), (2, {"chunks": (2, 2)}), (3, {"chunks": (2, 2), "shards": (4, 4)})],
    ids=["v3", "v2", "sharded"],
)
def test_a_shrink_resets_what_it_cuts_off_a_unit_so_a_growth_shows_fill(zarr_format, layout):
    """A shrink to 5 x 3 cuts through units along both axes (and their corner): growing back,
    every element outside 5 x 3 reads the fill value (the old values came back before)."""
    store = z3.MemoryStore()
    a = z3.create_array(store, "a", shape=(6, 5), dtype="i4", fill_value=0, zarr_format=zarr_format, **layout)
    a[...] = 1
    a.resize((5, 3))
    np.testing.assert_array_equal(a[...], np.ones((5, 3)))
    a.resize((6, 5))
    expected = np.zeros((6, 5), "i4")
    expected[:5, :3] = 1
    np.testing.assert_array_equal(z3.open_array(store, "a")[...], expected)
    assert not list(store.list_prefix(".z3-txn/"))


def test_a_shrink_racing_a_write_into_the_unit_it_cuts_still_cuts_it():
    """Another writer rewrites the unit the shrink cuts (rows 4-5) while the shrink is staged:
    the shrink cuts it again from the new value (its commit redoes the cut), so the row past
    the end is fill and the row kept is the other writer's."""
    store = CommitHookedStore()
    _array(store, rows=6)
    other = z3.open_array(store, "a", mode="r+")
    store.hook = lambda: other.__setitem__(slice(4, 6), 7)
    z3.open_array(store, "a", mode="r+").resize((5, COLS))
    assert store.hook is None
    grown = z3.open_array(store, "a", mode="r+")
    grown.resize((6, COLS))
    np.testing.assert_array_equal(grown[:, 0], [1, 1, 1, 1, 7, 0])


def test_a_write_into_a_unit_the_shrink_cut_leaves_nothing_past_the_new_end():
    """The write (rows 3-5, units 1 and 2) is staged; the shrink to 5 rows cuts unit 2 and
    commits; the write's commit redoes its part of unit 2 over the cut one, row 5 included:
    the write then finds the shape smaller and resets row 5 to fill (it showed 9 on growth)."""
    store = CommitHookedStore()
    _array(store)
    mine = z3.open_array(store, "a", mode="r+")
    store.hook = lambda: z3.open_array(store, "a", mode="r+").resize((5, COLS))
    mine[3:6] = 9
    assert store.hook is None
    grown = z3.open_array(store, "a", mode="r+")
    np.testing.assert_array_equal(grown[:, 0], [1, 1, 1, 9, 9])
    grown.resize((8, COLS))
    np.testing.assert_array_equal(grown[:, 0], [1, 1, 1, 9, 9, 0, 0, 0])
