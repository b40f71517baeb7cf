"""Two writers creating one node at once: one of them is refused (NodeExistsError), the other's
metadata stays; neither goes on to write its data under the other's metadata."""

from __future__ import annotations

import numpy as np
import pytest

import zarr3_backend as z3
from zarr3_backend.errors import NodeExistsError


class _RacingStore(z3.MemoryStore):
    """Runs ``hook`` once, when a create lists the node's prefix to see that nothing is there:
    another writer creating the same node between that check and the documents."""

    hook = None

    def list_dir(self, prefix):
        found = list(super().list_dir(prefix))
        if self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return iter(found)


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_an_array_created_meanwhile_refuses_the_second_create(zarr_format):
    store = _RacingStore()
    store.hook = lambda: z3.create_array(
        store, "x", shape=(4,), dtype="i8", chunks=(2,), zarr_format=zarr_format
    )
    with pytest.raises(NodeExistsError, match=r"'x'.*meanwhile"):
        z3.create_array(store, "x", shape=(6,), dtype="f4", chunks=(3,), zarr_format=zarr_format)
    assert store.hook is None  # the other writer ran
    a = z3.open_array(store, "x", mode="r+")
    assert (a.shape, a.dtype) == ((4,), np.dtype("i8"))
    a[...] = [1, 2, 3, 4]
    np.testing.assert_array_equal(z3.open_array(store, "x")[...], [1, 2, 3, 4])


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_a_group_created_meanwhile_refuses_the_second_create(zarr_format):
    store = _RacingStore()
    store.hook = lambda: z3.create_group(store, "g", attributes={"first": 1}, zarr_format=zarr_format)
    with pytest.raises(NodeExistsError, match=r"'g'"):
        z3.create_group(store, "g", attributes={"second": 2}, zarr_format=zarr_format)
    assert dict(z3.open_group(store, "g").attrs) == {"first": 1}


def test_without_a_race_create_and_overwrite_work_as_before():
    store = _RacingStore()
    z3.create_array(store, "x", shape=(4,), dtype="i8", chunks=(2,))
    with pytest.raises(NodeExistsError):
        z3.create_array(store, "x", shape=(4,), dtype="i8", chunks=(2,))
    b = z3.create_array(store, "x", shape=(6,), dtype="f4", chunks=(3,), overwrite=True)
    assert z3.open_array(store, "x").shape == (6,) and b.dtype == np.dtype("f4")
