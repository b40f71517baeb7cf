"""Property tests: an Array reads and writes exactly what numpy reads and writes on the same data.

Every example builds a random array (data type, 0-4 dimensions with size-0 and size-1 axes, chunk
shape, optional sharding) on a MemoryStore or a LocalStore in a fresh temporary directory, keeps
a numpy twin, and applies random basic, orthogonal and vectorized reads and writes to both.
"""

from __future__ import annotations

import tempfile
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import zarr3_backend as z3
from zarr3_backend import errors

DTYPES = ["i4", "f8", "u1", "bool", "complex64"]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- helpers -----------------------------------------------------------------------------------
@contextmanager
def fresh_store(kind: str):
    """A new empty store; a LocalStore lives in its own temporary directory for one example."""
    if kind == "memory":
        yield z3.MemoryStore()
        return
    with tempfile.TemporaryDirectory() as d:
        yield z3.LocalStore(d)


def random_values(dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random values of ``dtype`` (a few distinct ones, so chunks sometimes equal the fill)."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(shape) > 0.5
    if dt.kind in "iu":
        return rng.integers(0, 200, size=shape).astype(dt)
    if dt.kind == "c":
        return (rng.integers(-3, 4, size=shape) + 1j * rng.standard_normal(shape)).astype(dt)
    return np.where(rng.random(shape) < 0.2, 0.0, rng.standard_normal(shape)).astype(dt)


def assert_same(got: Any, expected: Any) -> None:
    """Same shape, data type and bits (NaN equals NaN only when the bits agree)."""
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    if got.tobytes() != expected.tobytes():
        np.testing.assert_array_equal(got, expected)  # a readable report of the differences
        raise AssertionError(f"same values, different bits:\n{got!r}\n{expected!r}")


@st.composite
def array_setups(draw, min_ndim: int = 0, min_extent: int = 0):
    """(store kind, dtype, shape, chunks, shards or None, fill value)."""
    kind = draw(st.sampled_from(["memory", "local"]))
    dtype = draw(st.sampled_from(DTYPES))
    ndim = draw(st.integers(min_ndim, 4))
    max_extent = [12, 9, 6, 4, 4][ndim]
    shape = tuple(draw(st.lists(st.integers(min_extent, max_extent), min_size=ndim, max_size=ndim)))
    chunks = tuple(draw(st.integers(1, 4)) for _ in range(ndim))
    shards = None
    if ndim and draw(st.booleans()):
        shards = tuple(c * draw(st.integers(1, 3)) for c in chunks)
    if dtype == "bool":
        fill = draw(st.booleans())
    elif dtype in ("f8", "complex64"):
        fill = draw(st.sampled_from([0.0, 1.5, np.nan, -np.inf]))
    else:
        fill = draw(st.integers(0, 200))
    return kind, dtype, shape, chunks, shards, fill


def slice_entry(draw, n: int) -> slice:
    """A slice with any start/stop (out of range too) and a possibly negative step."""
    bound = st.none() | st.integers(-n - 2, n + 2)
    return slice(draw(bound), draw(bound), draw(st.sampled_from([None, 1, 2, 3, -1, -2, -3])))


def basic_entry(draw, n: int) -> Any:
    """An in-range int (a quarter of the time) or a slice."""
    if n and draw(st.booleans()) and draw(st.booleans()):
        return draw(st.integers(-n, n - 1))
    return slice_entry(draw, n)


@st.composite
def basic_selections(draw, shape):
    sel = [basic_entry(draw, n) for n in shape]
    cut = draw(st.integers(0, len(sel)))  # drop trailing entries, sometimes behind an Ellipsis
    if cut < len(sel) and draw(st.booleans()):
        return (*sel[:cut], Ellipsis)
    return tuple(sel[:cut]) if cut < len(sel) else tuple(sel)


@st.composite
def orthogonal_selections(draw, shape):
    """Per axis: an int, a slice (negative steps too), an int list or array (negative,
    duplicate, unsorted, possibly empty) or a boolean mask."""
    sel = []
    for n in shape:
        kinds = ["slice", "ints", "mask"] + (["int"] if n else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "int":
            sel.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            sel.append(slice_entry(draw, n))
        elif kind == "ints":
            ints = draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=5)) if n else []
            sel.append(ints if draw(st.booleans()) else np.array(ints, dtype=np.intp))
        else:
            sel.append(np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool))
    return tuple(sel)


def numpy_orthogonal(ref: np.ndarray, sel: tuple) -> tuple[tuple, tuple]:
    """``(np.ix_ index, squeeze index)``: ``ref[ix][squeeze]`` is the orthogonal selection."""
    arrays, squeeze = [], []
    for s, n in zip(sel, ref.shape, strict=True):
        if isinstance(s, int):
            arrays.append(np.array([s], dtype=np.intp))
            squeeze.append(0)
            continue
        if isinstance(s, slice):
            arrays.append(np.arange(n)[s])
        elif np.asarray(s).dtype == bool:
            arrays.append(np.flatnonzero(s))
        else:
            arrays.append(np.asarray(s, dtype=np.intp))
        squeeze.append(slice(None))
    return np.ix_(*arrays), tuple(squeeze)


@st.composite
def point_selections(draw, shape):
    """Coordinate arrays of distinct points (as negative indices too), 1-d or 2-d."""
    size = int(np.prod(shape))
    k = draw(st.integers(0, min(size, 6)))
    flat = draw(st.lists(st.integers(0, size - 1), min_size=k, max_size=k, unique=True)) if size else []
    coords = np.unravel_index(np.array(flat, dtype=np.intp), shape)
    out = []
    for c, n in zip(coords, shape, strict=True):
        neg = np.array(draw(st.lists(st.booleans(), min_size=k, max_size=k)), dtype=bool)
        out.append(np.where(neg, c - n, c))
    if k and k % 2 == 0 and draw(st.booleans()):
        out = [c.reshape(2, k // 2) for c in out]
    return tuple(out)


# ---- the properties ----------------------------------------------------------------------------
@SETTINGS
@given(setup=array_setups(), data=st.data())
def test_reads_and_writes_match_numpy(setup, data):
    kind, dtype, shape, chunks, shards, fill = setup
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    with fresh_store(kind) as store:
        a = z3.create_array(
            store, "x", shape=shape, dtype=dtype, chunks=chunks or None, shards=shards, fill_value=fill
        )
        ref = np.full(shape, fill, dtype=dtype)
        assert_same(a[...], ref[...])  # nothing written yet: all fill value

        for _ in range(2):  # the second round writes over chunks the first one wrote
            # basic write then read, slices with negative steps
            sel = data.draw(basic_selections(shape), label="basic write")
            value = random_values(dtype, np.shape(ref[sel]), rng)
            if data.draw(st.booleans(), label="broadcast a scalar"):
                value = random_values(dtype, (), rng)[()]
            a[sel] = value
            ref[sel] = value
            assert_same(a[...], ref)
            sel = data.draw(basic_selections(shape), label="basic read")
            assert_same(a[sel], ref[sel])

            if shape:
                # orthogonal read and write
                sel = data.draw(orthogonal_selections(shape), label="orthogonal")
                ix, squeeze = numpy_orthogonal(ref, sel)
                assert_same(a.oindex[sel], ref[ix][squeeze])
                value = random_values(dtype, ref[ix][squeeze].shape, rng)
                a.oindex[sel] = value
                ref[ix] = value.reshape(ref[ix].shape)  # duplicate indices: the last one wins
                assert_same(a[...], ref)

                # vectorized read and write of distinct points
                pts = data.draw(point_selections(shape), label="points")
                assert_same(a.vindex[pts], ref[pts])
                value = random_values(dtype, ref[pts].shape, rng)
                a.vindex[pts] = value
                ref[pts] = value

        # what a fresh reader sees in the store
        assert_same(z3.open_array(store, "x")[...], ref)


@SETTINGS
@given(setup=array_setups(min_ndim=1, min_extent=1), data=st.data())
def test_numpy_style_fancy_getitem_matches_numpy(setup, data):
    """``a[...]`` with integer arrays routes like numpy: one array among slices selects along
    its axis, several arrays (with ints) select points, a 2-d array selects a block of rows."""
    kind, dtype, shape, chunks, shards, fill = setup
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    with fresh_store(kind) as store:
        a = z3.create_array(
            store, "x", shape=shape, dtype=dtype, chunks=chunks, shards=shards, fill_value=fill
        )
        ref = random_values(dtype, shape, rng)
        a[...] = ref
        axis = data.draw(st.integers(0, len(shape) - 1))
        rows = data.draw(st.lists(st.integers(-shape[axis], shape[axis] - 1), min_size=1, max_size=4))
        sel = [data.draw(st.sampled_from([slice(None), slice(None, None, -1)])) for _ in shape]
        sel[axis] = rows
        assert_same(a[tuple(sel)], ref[tuple(sel)])
        pts = data.draw(point_selections(shape))
        if len(shape) > 1 and len(pts[0]):
            assert_same(a[pts], ref[pts])
            value = random_values(dtype, ref[pts].shape, rng)
            a[pts] = value
            ref[pts] = value
            assert_same(a[...], ref)
        block = rng.integers(-shape[0], shape[0], size=(2, 2))
        assert_same(a[block], ref[block])


@SETTINGS
@given(setup=array_setups(min_ndim=3, min_extent=1), data=st.data())
def test_several_arrays_among_slices_match_numpy_or_are_refused(setup, data):
    """Several integer arrays mixed with slices (``a[[0, 1], :, [2, 3]]``): numpy broadcasts the
    arrays into points; the array must give numpy's answer or refuse with a SelectionError,
    never silently return the orthogonal (outer) selection."""
    kind, dtype, shape, chunks, shards, fill = setup
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    with fresh_store(kind) as store:
        a = z3.create_array(
            store, "x", shape=shape, dtype=dtype, chunks=chunks, shards=shards, fill_value=fill
        )
        ref = random_values(dtype, shape, rng)
        a[...] = ref
        k = data.draw(st.integers(1, 3))
        sel = [rng.integers(-n, n, size=k) if data.draw(st.booleans()) else slice(None) for n in shape]
        assume(sum(isinstance(s, np.ndarray) for s in sel) >= 2)
        assume(any(isinstance(s, slice) for s in sel))
        try:
            got = a[tuple(sel)]
        except errors.SelectionError:
            return
        assert_same(got, ref[tuple(sel)])


# ---- fixed cases the properties above only hit by chance -------------------------------------
@pytest.fixture(params=["memory", "local"])
def store_kind(request):
    return request.param


def test_two_int_lists_select_and_write_points(store_kind):
    data = np.arange(30, dtype="i8").reshape(5, 6)
    with fresh_store(store_kind) as store:
        a = z3.create_array(store, "x", shape=(5, 6), dtype="i8", chunks=(2, 4))
        a[...] = data
        got = a[[1, 2], [3, 4]]
        assert_same(got, data[[1, 2], [3, 4]])
        assert got.tolist() == [9, 16]  # two points, not the 2x2 outer block
        a[[1, 2], [3, 4]] = -1
        data[[1, 2], [3, 4]] = -1
        assert_same(z3.open_array(store, "x")[...], data)
        assert int((a[...] == -1).sum()) == 2


def test_two_dimensional_index_array_selects_like_numpy(store_kind):
    data = np.arange(30, dtype="f8").reshape(5, 6)
    idx = np.array([[0, 4], [-1, 2], [3, 3]])
    with fresh_store(store_kind) as store:
        a = z3.create_array(store, "x", shape=(5, 6), dtype="f8", chunks=(2, 4), shards=(4, 4))
        a[...] = data
        got = a[idx]
        assert got.shape == (3, 2, 6)
        assert_same(got, data[idx])
        assert_same(a[idx, 1], data[idx, 1])
        assert_same(a[1, idx], data[1, idx])


def test_writes_keep_negative_zero_and_nan_payloads(store_kind):
    """Values that compare equal to the fill value but differ in bits (-0.0 vs 0.0) and NaN
    payloads read back bit-exact, as numpy keeps them. (With a NaN fill value any NaN counts as
    fill, by design, so there the payload survives only with ``write_empty_chunks=True``.)"""
    nan_payload = np.array([0x7FC00001, 0xFFC00123], "u4").view("f4")
    with fresh_store(store_kind) as store:
        a = z3.create_array(store, "zero", shape=(4,), dtype="f4", chunks=(2,), fill_value=0.0)
        data = np.array([-0.0, -0.0, *nan_payload], "f4")
        a[...] = data
        assert_same(a[...], data)
        assert_same(z3.open_array(store, "zero")[...], data)
        c = z3.create_array(store, "negz", shape=(2,), dtype="c8", chunks=(2,), fill_value=-0.0)
        c[...] = np.zeros(2, "c8")
        assert_same(c[...], np.zeros(2, "c8"))
        b = z3.create_array(
            store, "nan", shape=(2,), dtype="f4", chunks=(2,), fill_value=np.nan, write_empty_chunks=True
        )
        b[...] = nan_payload
        assert_same(b[...], nan_payload)
