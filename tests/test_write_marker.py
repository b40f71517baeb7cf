"""The in-flight write marker makes every read refuse with a typed error; 0-d text writes."""

import json

import numpy as np
import pytest

import zarr3_backend as z3
from zarr3_backend.core.metadata import WRITE_IN_PROGRESS_FIELD
from zarr3_backend.errors import InterruptedWriteError


@pytest.mark.parametrize("node", ["array", "group"])
def test_marker_refuses_with_typed_error(node):
    store = z3.MemoryStore()
    if node == "array":
        z3.create_array(store, path="x", shape=(3,), dtype="i4")
    else:
        z3.create_group(store, path="x")
    doc = json.loads(store.get("x/zarr.json"))
    doc[WRITE_IN_PROGRESS_FIELD] = {"must_understand": True, "id": "txn-1"}
    store.set("x/zarr.json", json.dumps(doc).encode())
    with pytest.raises(InterruptedWriteError, match="txn-1") as info:
        z3.open_node(store, path="x")
    assert "'x'" in str(info.value)


@pytest.mark.parametrize("dtype,value", [("str", "x"), ("bytes", b"ab"), ("float64", 2.5), ("bool", True)])
def test_zero_dimensional_write(dtype, value):
    a = z3.create_array(z3.MemoryStore(), shape=(), dtype=dtype)
    a[...] = value
    assert a[...] == value
    a[()] = value
    assert np.asarray(a[()]).shape == ()
