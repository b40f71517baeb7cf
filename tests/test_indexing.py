"""Selections -> chunk projections: reassembling chunks through the projections must give numpy's
answer for reads and for writes, on random shapes, chunkings and selections."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from zarr3_backend.errors import SelectionError, ShapeError
from zarr3_backend.indexing import (
    ChunkProjection,
    Indexer,
    basic_indexer,
    chunk_bounding_box,
    normalize_selection,
    orthogonal_indexer,
    shift_selection,
    vectorized_indexer,
)

PAD = -1  # value of the padding of edge chunks: must never reach an output
UNSET = -7  # initial value of outputs: must all be overwritten

SETTINGS = settings(deadline=None, max_examples=150)


# ---- a chunked array simulated with numpy ---------------------------------------------------------


def grid_shape(shape, chunks):
    return tuple(math.ceil(s / c) for s, c in zip(shape, chunks, strict=True))


def chunk_region(coords, shape, chunks):
    return tuple(slice(k * c, min((k + 1) * c, s)) for k, c, s in zip(coords, chunks, shape, strict=True))


def split(x, chunks):
    """Every chunk of ``x`` as a full-size array, edge chunks padded with PAD."""
    out = {}
    for coords in np.ndindex(*grid_shape(x.shape, chunks)):
        chunk = np.full(chunks, PAD, dtype=x.dtype)
        sub = x[chunk_region(coords, x.shape, chunks)]
        chunk[tuple(slice(0, n) for n in sub.shape)] = sub
        out[coords] = chunk
    return out


def join(chunk_map, shape, chunks):
    x = np.full(shape, UNSET, dtype=np.int64)
    for coords, chunk in chunk_map.items():
        region = chunk_region(coords, shape, chunks)
        x[region] = chunk[tuple(slice(0, r.stop - r.start) for r in region)]
    return x


def in_bounds(coords, shape, chunks):
    return tuple(slice(0, r.stop - r.start) for r in chunk_region(coords, shape, chunks))


def covers_in_order(p, shape, chunks):
    """The chunk selection reads every in-bounds element of the chunk once, in C order."""
    ids = np.arange(math.prod(chunks)).reshape(chunks)
    got, want = ids[p.chunk_selection], ids[in_bounds(p.chunk_coords, shape, chunks)]
    return np.size(got) == want.size and np.array_equal(np.ravel(got), want.ravel())


def check_box(p, chunk, chunks):
    """chunk_bounding_box is the tightest box, and shift_selection re-targets into it."""
    box = chunk_bounding_box(p.chunk_selection, chunks)
    if not chunks:
        assert box == ()
        return
    assert all(b.step is None and 0 <= b.start < b.stop <= c for b, c in zip(box, chunks, strict=True))
    mask = np.zeros(chunks, dtype=bool)
    mask[p.chunk_selection] = True
    nz = np.nonzero(mask)
    assert box == tuple(slice(int(a.min()), int(a.max()) + 1) for a in nz)
    np.testing.assert_array_equal(
        chunk[box][shift_selection(p.chunk_selection, box)], chunk[p.chunk_selection]
    )


def read_via(indexer, x, chunks, *, exact_complete=True):
    """Assemble ``x[selection]`` from chunks using only the projections."""
    assert isinstance(indexer, Indexer)
    chunk_map = split(x, chunks)
    out = np.full(indexer.shape, UNSET, dtype=x.dtype)
    projections = list(indexer)
    assert len(projections) == indexer.nchunks
    seen = set()
    for p in projections:
        assert isinstance(p, ChunkProjection)
        assert p.chunk_coords not in seen, "a chunk is projected twice"
        seen.add(p.chunk_coords)
        chunk = chunk_map[p.chunk_coords]  # KeyError: coordinates outside the grid
        piece = chunk[p.chunk_selection]
        assert np.size(piece) > 0, "a chunk the selection does not touch was yielded"
        out[p.out_selection] = piece
        check_box(p, chunk, chunks)
        if exact_complete:
            assert p.is_complete == covers_in_order(p, x.shape, chunks)
        elif p.is_complete:
            assert covers_in_order(p, x.shape, chunks)
    return out


def write_via(indexer, x, chunks, value):
    """Write ``value`` through the projections into the chunks of ``x``; return the new array."""
    value = np.broadcast_to(value, indexer.shape)
    chunk_map = split(x, chunks)
    for p in indexer:
        chunk_map[p.chunk_coords][p.chunk_selection] = value[p.out_selection]
    for coords, chunk in chunk_map.items():
        outside = np.ones(chunks, dtype=bool)
        outside[in_bounds(coords, x.shape, chunks)] = False
        assert (chunk[outside] == PAD).all(), "a write reached the padding of an edge chunk"
    return join(chunk_map, x.shape, chunks)


def arange(shape):
    return np.arange(math.prod(shape), dtype=np.int64).reshape(shape)


def values_for(shape):
    return 10_000 + arange(shape)


# ---- strategies --------------------------------------------------------------------------------


@st.composite
def grids(draw, min_dims=0, max_dims=4, max_size=7):
    shape = tuple(draw(st.lists(st.integers(0, max_size), min_size=min_dims, max_size=max_dims)))
    chunks = tuple(draw(st.integers(1, max_size + 1)) for _ in shape)
    return shape, chunks


def slices(size):
    bound = st.none() | st.integers(-size - 3, size + 3)
    step = st.none() | st.integers(1, 4) | st.integers(-4, -1)
    return st.builds(slice, bound, bound, step)


def ints(size):
    return st.integers(-size, size - 1).map(lambda i: i if i % 2 else np.int64(i))


def basic_entry(size):
    return slices(size) | ints(size) if size else slices(size)


def int_lists(size, unique=False):
    if not size:
        return st.just([])
    return st.lists(st.integers(-size, size - 1), max_size=6).map(
        (lambda v: list({i % size: i for i in v}.values())) if unique else (lambda v: v)
    )


def orthogonal_entry(size, unique=False):
    masks = st.lists(st.booleans(), min_size=size, max_size=size).map(np.array)
    arrays = int_lists(size, unique) | int_lists(size, unique).map(lambda v: np.array(v, dtype=np.int32))
    return basic_entry(size) | arrays | masks


@st.composite
def basic_selections(draw, shape):
    """Prefix entries, optionally an Ellipsis, then suffix entries (numpy expands the middle)."""
    ndim = len(shape)
    n_prefix = draw(st.integers(0, ndim))
    ellipsis = draw(st.booleans())
    n_suffix = draw(st.integers(0, ndim - n_prefix)) if ellipsis else 0
    prefix = [draw(basic_entry(shape[i])) for i in range(n_prefix)]
    suffix = [draw(basic_entry(shape[i])) for i in range(ndim - n_suffix, ndim)]
    sel = (*prefix, Ellipsis, *suffix) if ellipsis else tuple(prefix)
    if len(sel) == 1 and draw(st.booleans()):
        return sel[0]  # a bare, untupled selection
    return sel


def np_orthogonal_arrays(sel, shape):
    """Per axis the selected indices (ints -> one index) and which axes ints drop."""
    arrays, drop = [], []
    for axis, (e, size) in enumerate(zip(sel, shape, strict=True)):
        if isinstance(e, slice):
            arrays.append(np.arange(size)[e])
        elif isinstance(e, int | np.integer):
            arrays.append(np.array([e % size]))
            drop.append(axis)
        else:
            a = np.asarray(e)
            arrays.append(np.flatnonzero(a) if a.dtype == bool else a.astype(np.intp) % max(size, 1))
    return arrays, drop


def np_orthogonal_read(x, sel):
    if x.ndim == 0:
        return x[()]
    arrays, drop = np_orthogonal_arrays(sel, x.shape)
    return x[np.ix_(*arrays)].squeeze(axis=tuple(drop))


def np_orthogonal_write(x, sel, value):
    y = x.copy()
    if x.ndim == 0:
        y[()] = value
        return y
    arrays, drop = np_orthogonal_arrays(sel, x.shape)
    y[np.ix_(*arrays)] = np.expand_dims(value, tuple(drop))
    return y


# ---- basic -------------------------------------------------------------------------------------


@SETTINGS
@given(st.data())
def test_basic_read_matches_numpy(data):
    shape, chunks = data.draw(grids())
    sel = data.draw(basic_selections(shape))
    x = arange(shape)
    indexer = basic_indexer(sel, shape, chunks)
    expected = x[sel]
    assert indexer.shape == expected.shape
    np.testing.assert_array_equal(read_via(indexer, x, chunks), expected)


@SETTINGS
@given(st.data())
def test_basic_write_matches_numpy(data):
    shape, chunks = data.draw(grids())
    sel = data.draw(basic_selections(shape))
    x = arange(shape)
    indexer = basic_indexer(sel, shape, chunks)
    value = values_for(indexer.shape)
    expected = x.copy()
    expected[sel] = value
    np.testing.assert_array_equal(write_via(indexer, x, chunks, value), expected)


@SETTINGS
@given(st.data())
def test_basic_chunk_selections_stay_slices(data):
    shape, chunks = data.draw(grids(min_dims=1))
    sel = data.draw(basic_selections(shape))
    for p in basic_indexer(sel, shape, chunks):
        assert all(isinstance(e, int | slice) for e in p.chunk_selection)
        assert all(isinstance(e, slice) for e in p.out_selection)


@settings(deadline=None, max_examples=300)
@given(st.integers(0, 30), st.integers(1, 10), st.data())
def test_basic_1d_slices_match_numpy(size, chunk, data):
    sel = data.draw(slices(size))
    x = arange((size,))
    indexer = basic_indexer(sel, (size,), (chunk,))
    np.testing.assert_array_equal(read_via(indexer, x, (chunk,)), x[sel])
    value = values_for(indexer.shape)
    expected = x.copy()
    expected[sel] = value
    np.testing.assert_array_equal(write_via(indexer, x, (chunk,), value), expected)


def test_whole_array_is_all_complete_plain_slices():
    indexer = basic_indexer(Ellipsis, (10, 7), (4, 3))
    projections = list(indexer)
    assert indexer.nchunks == len(projections) == 3 * 3
    for p in projections:
        assert p.is_complete
        extents = [r.stop - r.start for r in chunk_region(p.chunk_coords, (10, 7), (4, 3))]
        assert p.chunk_selection == tuple(slice(0, n, 1) for n in extents)


def test_partial_and_stepped_chunks_are_not_complete():
    by_coords = {p.chunk_coords: p for p in basic_indexer(slice(2, 10), (10,), (4,))}
    assert not by_coords[(0,)].is_complete
    assert by_coords[(1,)].is_complete and by_coords[(2,)].is_complete  # (2,) is the 2-long edge
    assert not any(p.is_complete for p in basic_indexer(slice(0, 8, 2), (8,), (4,)))
    assert not any(p.is_complete for p in basic_indexer(slice(None, None, 2), (3,), (3,)))
    assert not any(p.is_complete for p in basic_indexer(slice(None, None, -1), (8,), (4,)))


def test_int_on_one_long_chunk_axis_is_complete():
    (p,) = basic_indexer((3, slice(None)), (5, 4), (1, 4))
    assert p.chunk_coords == (3, 0) and p.is_complete and p.out_selection == (slice(0, 4),)
    (q,) = basic_indexer((3, slice(None)), (5, 4), (2, 4))
    assert not q.is_complete


def test_stepped_slice_skips_untouched_chunks():
    indexer = basic_indexer(slice(1, 20, 7), (20,), (3,))  # elements 1, 8, 15
    assert [p.chunk_coords for p in indexer] == [(0,), (2,), (5,)]
    assert indexer.nchunks == 3


def test_negative_step_reverses_like_numpy():
    x = arange((11,))
    indexer = basic_indexer(slice(9, 1, -3), (11,), (4,))
    np.testing.assert_array_equal(read_via(indexer, x, (4,)), x[9:1:-3])


def test_zero_dim_array():
    for sel in ((), Ellipsis):
        indexer = basic_indexer(sel, (), ())
        assert indexer.shape == () and indexer.nchunks == 1
        assert list(indexer) == [ChunkProjection((), (), (), True)]
    (p,) = orthogonal_indexer((), (), ())
    assert p == ChunkProjection((), (), (), True)


def test_size_zero_axis_yields_nothing():
    indexer = basic_indexer(Ellipsis, (0, 5), (2, 2))
    assert indexer.shape == (0, 5) and indexer.nchunks == 0 and list(indexer) == []
    assert list(orthogonal_indexer(([], slice(None)), (4, 5), (2, 2))) == []
    assert vectorized_indexer((np.zeros((0, 3), int), np.zeros((0, 3), int)), (4, 5), (2, 2)).shape == (0, 3)


# ---- orthogonal --------------------------------------------------------------------------------


@st.composite
def orthogonal_selections(draw, shape, unique=False):
    return tuple(draw(orthogonal_entry(size, unique)) for size in shape)


@SETTINGS
@given(st.data())
def test_orthogonal_read_matches_numpy_ix(data):
    shape, chunks = data.draw(grids())
    sel = data.draw(orthogonal_selections(shape))
    x = arange(shape)
    indexer = orthogonal_indexer(sel, shape, chunks)
    expected = np_orthogonal_read(x, sel)
    assert indexer.shape == np.shape(expected)
    np.testing.assert_array_equal(read_via(indexer, x, chunks), expected)


@SETTINGS
@given(st.data())
def test_orthogonal_write_matches_numpy_ix(data):
    shape, chunks = data.draw(grids())
    sel = data.draw(orthogonal_selections(shape, unique=True))
    x = arange(shape)
    indexer = orthogonal_indexer(sel, shape, chunks)
    value = values_for(indexer.shape)
    np.testing.assert_array_equal(write_via(indexer, x, chunks, value), np_orthogonal_write(x, sel, value))


def test_orthogonal_unsorted_duplicates_and_negatives():
    x = arange((9, 6))
    sel = ([7, -1, 0, 7, 3], slice(None, None, 2))
    indexer = orthogonal_indexer(sel, x.shape, (2, 4))
    np.testing.assert_array_equal(read_via(indexer, x, (2, 4)), x[[7, 8, 0, 7, 3]][:, ::2])
    # ints next to an array, and two arrays separated by a slice: still an outer product
    x3 = arange((5, 4, 6))
    indexer = orthogonal_indexer((1, slice(1, 3), [5, 0, 2]), x3.shape, (2, 3, 4))
    np.testing.assert_array_equal(read_via(indexer, x3, (2, 3, 4)), x3[1][1:3][:, [5, 0, 2]])
    indexer = orthogonal_indexer(([4, 1], slice(None), [5, 0]), x3.shape, (2, 3, 4))
    np.testing.assert_array_equal(read_via(indexer, x3, (2, 3, 4)), x3[np.ix_([4, 1], range(4), [5, 0])])


def test_orthogonal_consecutive_run_is_a_complete_slice():
    by_coords = {p.chunk_coords: p for p in orthogonal_indexer(([0, 1, 2, 3, 5],), (8,), (4,))}
    assert by_coords[(0,)].chunk_selection == (slice(0, 4, 1),) and by_coords[(0,)].is_complete
    assert not by_coords[(1,)].is_complete


def test_orthogonal_bool_mask():
    x = arange((6, 3))
    mask = np.array([True, False, False, True, True, False])
    indexer = orthogonal_indexer((mask, [2, 0]), x.shape, (4, 2))
    np.testing.assert_array_equal(read_via(indexer, x, (4, 2)), x[mask][:, [2, 0]])


# ---- vectorized --------------------------------------------------------------------------------


@st.composite
def coordinate_arrays(draw, shape):
    """One int array per axis, shapes broadcastable to a random shape of up to 3 dims."""
    bshape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    arrays = []
    for size in shape:
        keep = draw(st.integers(0, len(bshape)))
        ashape = [n if draw(st.booleans()) else 1 for n in bshape[len(bshape) - keep :]]
        n = math.prod(ashape)
        values = draw(st.lists(st.integers(-size, size - 1), min_size=n, max_size=n))
        arrays.append(np.array(values, dtype=np.int64).reshape(ashape))
    return tuple(arrays)


@SETTINGS
@given(st.data())
def test_vectorized_read_matches_numpy(data):
    shape, chunks = data.draw(grids(min_dims=1))
    assume(all(shape))
    sel = data.draw(coordinate_arrays(shape))
    x = arange(shape)
    indexer = vectorized_indexer(sel, shape, chunks)
    expected = x[sel]
    assert indexer.shape == expected.shape
    np.testing.assert_array_equal(read_via(indexer, x, chunks, exact_complete=False), expected)


@SETTINGS
@given(st.data())
def test_vectorized_mask_read_and_write_match_numpy(data):
    shape, chunks = data.draw(grids(min_dims=1))
    n = math.prod(shape)
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool).reshape(shape)
    x = arange(shape)
    indexer = vectorized_indexer(mask, shape, chunks)
    assert indexer.shape == x[mask].shape
    np.testing.assert_array_equal(read_via(indexer, x, chunks, exact_complete=False), x[mask])
    value = values_for(indexer.shape)
    expected = x.copy()
    expected[mask] = value
    np.testing.assert_array_equal(write_via(indexer, x, chunks, value), expected)


@SETTINGS
@given(st.data())
def test_vectorized_write_matches_numpy(data):
    shape, chunks = data.draw(grids(min_dims=1))
    n = math.prod(shape)
    flat = data.draw(st.lists(st.integers(0, max(n - 1, 0)), unique=True, max_size=min(n, 12)))
    coords = np.unravel_index(np.array(flat, dtype=np.intp), shape)
    negate = data.draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)))
    sel = tuple(c - size if neg else c for c, size, neg in zip(coords, shape, negate, strict=True))
    if len(flat) % 2 == 0 and flat:  # a 2-d coordinate shape as well
        sel = tuple(c.reshape(2, -1) for c in sel)
    x = arange(shape)
    indexer = vectorized_indexer(sel, shape, chunks)
    value = values_for(indexer.shape)
    expected = x.copy()
    expected[sel] = value
    np.testing.assert_array_equal(write_via(indexer, x, chunks, value), expected)


def test_vectorized_groups_points_by_chunk():
    x = arange((8, 8))
    rows = np.array([[7, 0], [6, 1]])
    cols = np.array([0, 7])  # points (7, 0) (0, 7) (6, 0) (1, 7): two per chunk
    indexer = vectorized_indexer((rows, cols), x.shape, (4, 4))
    assert indexer.nchunks == 2
    assert sorted(p.chunk_coords for p in indexer) == [(0, 1), (1, 0)]
    np.testing.assert_array_equal(read_via(indexer, x, (4, 4), exact_complete=False), x[rows, cols])


def test_vectorized_scalars_and_zero_dim():
    x = arange((5, 6))
    indexer = vectorized_indexer((2, -1), x.shape, (2, 4))
    assert indexer.shape == ()
    np.testing.assert_array_equal(read_via(indexer, x, (2, 4), exact_complete=False), x[2, -1])
    indexer = vectorized_indexer((), (), ())
    np.testing.assert_array_equal(read_via(indexer, np.array(5), (), exact_complete=False), 5)
    indexer = vectorized_indexer(np.array(True), (), ())
    np.testing.assert_array_equal(read_via(indexer, np.array(5), (), exact_complete=False), [5])
    np.testing.assert_array_equal(write_via(indexer, np.array(5), (), np.array([9])), 9)
    assert vectorized_indexer(np.array(False), (), ()).nchunks == 0


# ---- work proportional to what is touched ----------------------------------------------------------

HUGE = 10**12


def test_huge_grid_basic_is_lazy():
    indexer = basic_indexer(slice(5, 8), (HUGE,), (1,))
    assert [p.chunk_coords for p in indexer] == [(5,), (6,), (7,)]
    stepped = basic_indexer(slice(None, None, HUGE // 4), (HUGE,), (1,))
    assert [p.chunk_coords[0] for p in stepped] == [0, HUGE // 4, HUGE // 2, 3 * HUGE // 4]
    everything = basic_indexer(Ellipsis, (HUGE, HUGE), (1, 1))
    assert everything.nchunks == HUGE * HUGE
    first = next(iter(everything))
    assert first.chunk_coords == (0, 0) and first.is_complete
    assert list(basic_indexer((-1, 7, slice(3, 5)), (HUGE,) * 3, (1, 1, 1)))[-1].chunk_coords == (
        HUGE - 1,
        7,
        4,
    )


def test_huge_grid_orthogonal_and_vectorized():
    sel = np.array([3, HUGE - 1, 7])
    o = orthogonal_indexer((sel,), (HUGE,), (1,))
    assert o.nchunks == 3 and sorted(p.chunk_coords for p in o) == [(3,), (7,), (HUGE - 1,)]
    v = vectorized_indexer((sel, -sel - 1), (HUGE, HUGE), (1, 1))
    assert v.nchunks == 3 and {p.chunk_coords for p in v} == {(3, HUGE - 4), (HUGE - 1, 0), (7, HUGE - 8)}
    empty = orthogonal_indexer((slice(None), []), (HUGE, HUGE), (1, 1))
    assert empty.nchunks == 0 and list(empty) == []


# ---- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: basic_indexer((0, 10), (5, 10), (2, 2)), r"index 10 .*axis 1 with size 10"),
        (lambda: basic_indexer(-6, (5,), (2,)), r"index -6 .*axis 0 with size 5"),
        (lambda: basic_indexer(0, (0,), (1,)), r"axis 0 with size 0"),
        (lambda: orthogonal_indexer((slice(None), [0, 7]), (5, 6), (2, 2)), r"index 7 .*axis 1 with size 6"),
        (lambda: orthogonal_indexer(np.array([5], np.uint64), (5,), (2,)), r"index 5 .*axis 0"),
        (lambda: vectorized_indexer(([0, 1], [0, -9]), (5, 6), (2, 2)), r"index -9 .*axis 1 with size 6"),
    ],
)
def test_out_of_bounds_names_axis_index_and_size(make, match):
    with pytest.raises(SelectionError, match=match):
        make()


@pytest.mark.parametrize(
    ("selection", "match"),
    [
        ((slice(None), 1.5), r"axis 1: .*1\.5.*float"),
        ((np.float64(2.0),), r"axis 0: .*float64"),
        ((slice(0, 1.5),), r"axis 0: invalid slice"),
        ((slice(None, None, 0),), r"axis 0: invalid slice"),
        ((slice(None), "a"), r"axis 1: .*'a'.*str"),
        ((slice(None), np.array([1.0, 2.0])), r"axis 1: .*float64"),
        ((True,), r"axis 0: boolean scalar"),
        ((None, 0), r"axis 0: newaxis"),
        ((0, 0, 0), r"too many indices: 3 given .* 2 dimension"),
        ((Ellipsis, 0, Ellipsis), r"at most one Ellipsis"),
    ],
)
def test_bad_selections_raise_selection_error(selection, match):
    for make in (basic_indexer, orthogonal_indexer):
        with pytest.raises(SelectionError, match=match):
            make(selection, (4, 5), (2, 2))


def test_arrays_are_not_basic():
    with pytest.raises(SelectionError, match=r"axis 1: an array index is not a basic selection"):
        basic_indexer((slice(None), [0, 1]), (4, 5), (2, 2))


def test_orthogonal_mask_and_array_shape_errors():
    with pytest.raises(SelectionError, match=r"axis 1: boolean mask of shape \(4,\) .* axis length 5"):
        orthogonal_indexer((slice(None), np.ones(4, bool)), (4, 5), (2, 2))
    with pytest.raises(SelectionError, match=r"axis 0: .*must be 1-d"):
        orthogonal_indexer((np.zeros((2, 2), int),), (4, 5), (2, 2))


def test_vectorized_errors():
    with pytest.raises(SelectionError, match=r"shapes \(2,\), \(3,\) cannot be broadcast"):
        vectorized_indexer(([0, 1], [0, 1, 2]), (4, 5), (2, 2))
    with pytest.raises(
        SelectionError, match=r"mask of shape \(4, 4\) does not match the array shape \(4, 5\)"
    ):
        vectorized_indexer(np.ones((4, 4), bool), (4, 5), (2, 2))
    with pytest.raises(SelectionError, match=r"one integer array per axis: got 1 .* 2 dimension"):
        vectorized_indexer(([0, 1],), (4, 5), (2, 2))
    with pytest.raises(SelectionError, match=r"axis 1: a vectorized selection takes integer arrays"):
        vectorized_indexer(([0, 1], slice(None)), (4, 5), (2, 2))
    with pytest.raises(SelectionError, match=r"axis 0: .*float64"):
        vectorized_indexer((np.array([0.5]), [1]), (4, 5), (2, 2))


def test_bad_chunk_shapes_raise_shape_error():
    with pytest.raises(ShapeError, match=r"chunk shape \(2,\) has 1 dimensions, array shape \(4, 5\)"):
        basic_indexer(Ellipsis, (4, 5), (2,))
    with pytest.raises(ShapeError, match=r"must be positive"):
        orthogonal_indexer(Ellipsis, (4, 5), (2, 0))


def test_selection_error_is_an_index_error():
    with pytest.raises(IndexError):
        basic_indexer(9, (3,), (1,))


# ---- normalize_selection and chunk_bounding_box ----------------------------------------------------


def test_normalize_selection():
    sel = normalize_selection((Ellipsis, -1, [True, False, True]), (4, 5, 6, 3))
    assert sel[:3] == (slice(0, 4, 1), slice(0, 5, 1), 5)
    np.testing.assert_array_equal(sel[3], [0, 2])
    assert normalize_selection(slice(None, None, -1), (4,)) == (slice(3, None, -1),)
    assert normalize_selection(slice(7, 2), (9,)) == (slice(0, 0, 1),)
    np.testing.assert_array_equal(normalize_selection(([-1, 0],), (3,))[0], [2, 0])
    assert normalize_selection((), ()) == ()


@st.composite
def chunk_selections(draw):
    chunks = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    kind = draw(st.sampled_from(["basic", "outer", "points"]))
    if kind == "basic":
        sel = tuple(draw(ints(c) | slices(c)) for c in chunks)
    elif kind == "outer":
        sel = np.ix_(*(np.array(draw(int_lists(c)), dtype=np.intp) for c in chunks))
    else:
        n = draw(st.integers(0, 4))
        sel = tuple(
            np.array(draw(st.lists(st.integers(-c, c - 1), min_size=n, max_size=n)), int) for c in chunks
        )
    return sel, chunks


@SETTINGS
@given(chunk_selections())
def test_chunk_bounding_box_is_the_tightest_box(case):
    sel, chunks = case
    mask = np.zeros(chunks, dtype=bool)
    mask[sel] = True
    box = chunk_bounding_box(sel, chunks)
    assert len(box) == len(chunks)
    if not mask.any():
        assert all(b.start == b.stop for b in box)
        return
    inside = np.zeros(chunks, dtype=bool)
    inside[box] = True
    assert not (mask & ~inside).any(), "a selected element lies outside the box"
    for axis, b in enumerate(box):  # every face of the box touches a selected element
        assert mask.take(b.start, axis=axis).any() and mask.take(b.stop - 1, axis=axis).any()


def test_shift_selection_of_reversed_slices():
    chunk = np.arange(9)
    for sel in (slice(7, 1, -3), slice(8, None, -4), slice(5, 0, -1)):
        box = chunk_bounding_box((sel,), (9,))
        np.testing.assert_array_equal(chunk[box][shift_selection((sel,), box)], chunk[sel])


def test_chunk_bounding_box_examples_and_errors():
    assert chunk_bounding_box((2, slice(7, 0, -3)), (4, 9)) == (slice(2, 3), slice(1, 8))
    assert chunk_bounding_box((np.array([5, 1, 3]),), (6,)) == (slice(1, 6),)
    assert chunk_bounding_box((slice(3, 3), 1), (4, 4)) == (slice(0, 0), slice(0, 0))
    with pytest.raises(SelectionError, match=r"2 entries for a chunk of 1 dimension"):
        chunk_bounding_box((0, 0), (4,))
    with pytest.raises(SelectionError, match=r"index 6 .*axis 0 with size 6"):
        chunk_bounding_box((np.array([6]),), (6,))


def test_a_long_outer_axis_is_streamed_not_listed(monkeypatch):
    """The first projection of a read over many chunks comes without listing every chunk of the
    outer axis first (2^20 chunks listed up front took 2 s and 300 MB)."""
    import zarr3_backend.indexing as indexing

    consumed = []
    real_parts = indexing._SliceDim.parts

    def counting_parts(self):
        for part in real_parts(self):
            consumed.append(part)
            yield part

    monkeypatch.setattr(indexing._SliceDim, "parts", counting_parts)
    projections = iter(basic_indexer(slice(None), (1 << 20,), (1,)))
    first = next(projections)
    assert first.chunk_coords == (0,) and len(consumed) < 10
    second = next(projections)
    assert second.chunk_coords == (1,)
    small = list(basic_indexer((slice(None), slice(None)), (8, 6), (2, 3)))  # the listed path
    assert [p.chunk_coords for p in small] == [(i, j) for i in range(4) for j in range(2)]
