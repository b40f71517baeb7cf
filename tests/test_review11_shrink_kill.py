"""A shrinking ``resize`` that changes the shape document alone (nothing stored outside the new
shape when it looked) killed right after writing that document, while a write planned at the
larger shape had put values past the new end meanwhile: the shrink's sweep of what lies outside
never ran, and its repair dropped it (the stored shape no longer being the one it started from)
without the sweep, so a later growth showed those values instead of the fill value."""

from __future__ import annotations

import numpy as np
import pytest
from store_doubles import CommitHookedStore, judge_dead

import zarr3_backend as z3
from zarr3_backend.core import commit

COLS = 2


class _SnapshotOnShape(CommitHookedStore):
    """Snapshots its contents (``seen["snapshot"]``) right after the first write of ``a``'s shape
    document once ``seen["armed"]`` (what a writer killed then leaves). The state is one dict
    that the store's read-only and writable copies share."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: dict = {"armed": False, "snapshot": None}

    def _after(self, key: str) -> None:
        if self.seen["armed"] and self.seen["snapshot"] is None and key in ("a/zarr.json", "a/.zarray"):
            self.seen["snapshot"] = dict(self._data)

    def set(self, key, value):
        super().set(key, value)
        self._after(key)

    def set_if(self, key, value, expected):
        ok = super().set_if(key, value, expected)
        if ok:
            self._after(key)
        return ok


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_a_shrink_killed_after_its_document_still_clears_what_a_racing_write_left_past_the_end(
    monkeypatch, zarr_format
):
    store = _SnapshotOnShape()
    a = z3.create_array(
        store, "a", shape=(10, COLS), dtype="i4", chunks=(2, COLS), fill_value=0, zarr_format=zarr_format
    )
    a[:4] = 1  # rows 4-9 never written: a shrink to 4 rows erases nothing and cuts no unit
    late = z3.open_array(store, "a", mode="r+")  # planned at 10 rows

    def racing_write() -> None:  # after the shrink looked for units outside, before its claim
        late[6:10] = 9  # two units: one transaction
        store.seen["armed"] = True

    store.hook = racing_write
    z3.open_array(store, "a", mode="r+").resize((4, COLS))
    assert store.seen["snapshot"] is not None

    left = z3.MemoryStore(store.seen["snapshot"])  # the shrink killed right after its new shape
    assert z3.open_array(left, "a").shape == (4, COLS)
    judge_dead(monkeypatch, left)
    commit.repair(left)
    assert not list(left.list_prefix(".z3-txn/"))
    grown = z3.open_array(left, "a", mode="r+")
    grown.resize((10, COLS))
    np.testing.assert_array_equal(grown[:, 0], [1, 1, 1, 1, 0, 0, 0, 0, 0, 0])
