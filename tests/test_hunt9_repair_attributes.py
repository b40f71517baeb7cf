"""A roll-forward by ``repair`` of a write that changed an array's shape, and attributes set on
the array while that write was in flight.

The live commit writes the stored document with its new shape (attributes set meanwhile are
kept); a roll-forward of the same write, left by a writer that died inside its commit, wrote the
document the manifest held, built from the attributes the writer had read: an attribute another
writer set while the dead write's marker was on the array was dropped.
"""

from __future__ import annotations

import numpy as np
import pytest
from store_doubles import CommitHookedStore

import zarr3_backend as z3
from zarr3_backend.core.commit import pending_writes, repair


class _Crash(Exception):
    """Stands for the writer's death: its process ends here, its records stay."""


class _DyingStore(z3.MemoryStore):
    """Runs ``meanwhile`` and then raises ``_Crash`` at the ``at``-th conditional write of
    ``a/zarr.json`` (the first marks the array, the second writes its new document)."""

    meanwhile = None
    at = 0

    def set_if(self, key, value, expected):
        if key == "a/zarr.json" and self.meanwhile is not None:
            self.at -= 1
            if self.at == 0:
                hook, self.meanwhile = self.meanwhile, None
                hook()
                raise _Crash
        return super().set_if(key, value, expected)


@pytest.mark.parametrize("change", ["append", "shrink"])
def test_a_rolled_forward_shape_change_keeps_an_attribute_set_while_it_was_marked(change):
    """The writer dies just before writing the array's new document; meanwhile another handle
    set an attribute (attribute writes keep other writers' markers, and do not wait for them).
    The roll-forward keeps it, with the new shape and the write's data."""
    store = _DyingStore()
    a = z3.create_array(
        store, "a", shape=(4, 3), dtype="i4", chunks=(2, 3), fill_value=0, attributes={"keep": 0}
    )
    a[...] = 1
    mine, other = z3.open_array(store, "a", mode="r+"), z3.open_array(store, "a", mode="r+")
    store.at, store.meanwhile = 2, lambda: other.attrs.update(late=1)
    with pytest.raises(_Crash):
        if change == "append":
            mine.append(np.full((2, 3), 9, dtype="i4"))
        else:
            mine.resize((2, 3))  # erases units: a transaction (a growth writes one document)
    assert pending_writes(store)  # the write is left for repair
    repair(store, only_dead=False)
    assert not pending_writes(store)
    got = z3.open_array(store, "a")
    assert dict(got.attrs) == {"keep": 0, "late": 1}
    want = {"append": [1, 1, 1, 1, 9, 9], "shrink": [1, 1]}[change]
    np.testing.assert_array_equal(got[:, 0], want)


@pytest.mark.parametrize("change", ["append", "grow"])
def test_a_zarr_v2_shape_change_keeps_an_attribute_set_while_it_was_staged(change):
    """Zarr v2: an append committed ``.zattrs`` with the attributes it had read along with the
    new ``.zarray``, dropping an attribute another handle set while it was staged. (A growing
    resize, now committed the same way, must not either: only ``.zarray`` is the change's.)"""
    store = CommitHookedStore()
    a = z3.create_array(store, "a", shape=(4, 3), dtype="i4", chunks=(2, 3), fill_value=0, zarr_format=2)
    a[...] = 1
    mine, other = z3.open_array(store, "a", mode="r+"), z3.open_array(store, "a", mode="r+")
    store.hook = lambda: other.attrs.update(late=1)
    if change == "append":
        mine.append(np.full((2, 3), 9, dtype="i4"))
    else:
        mine.resize((6, 3))
    assert store.hook is None
    got = z3.open_array(store, "a")
    assert dict(got.attrs) == {"late": 1}
    np.testing.assert_array_equal(
        got[:, 0], [1, 1, 1, 1, 9 if change == "append" else 0, 9 if change == "append" else 0]
    )
