"""The chunk arithmetic that keeps write tasks apart, checked against brute force."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zarr3_backend.dask.alignment import (
    aligned_sizes,
    check_alignment,
    check_deferred_edges,
    check_region_edges,
    cut_units,
    first_misaligned,
    prove_disjoint,
    split_sizes,
    unit_ranges,
)
from zarr3_backend.errors import ChunkAlignmentError

sizes_st = st.lists(st.integers(1, 12), min_size=1, max_size=8)


def units_touched(sizes, unit, start):
    """Brute force: the set of unit indices each block covers, element by element."""
    out, pos = [], start
    for n in sizes:
        out.append({i // unit for i in range(pos, pos + n)})
        pos += n
    return out


@given(sizes_st, st.integers(1, 6), st.integers(0, 20))
def test_unit_ranges_match_brute_force(sizes, unit, start):
    assert [set(r) for r in unit_ranges(sizes, unit, start)] == units_touched(sizes, unit, start)


@given(sizes_st, st.integers(1, 6), st.integers(0, 20))
def test_misalignment_iff_two_blocks_share_a_unit(sizes, unit, start):
    touched = units_touched(sizes, unit, start)
    shared = any(touched[i] & touched[i + 1] for i in range(len(touched) - 1))
    assert (first_misaligned(sizes, unit, start) is not None) == shared
    if shared:
        with pytest.raises(ChunkAlignmentError):
            prove_disjoint((tuple(sizes),), (unit,), (start,))
    else:
        prove_disjoint((tuple(sizes),), (unit,), (start,))


@given(sizes_st, st.integers(1, 6), st.integers(0, 20))
def test_aligned_sizes_cover_the_same_extent_on_unit_boundaries(sizes, unit, start):
    out = aligned_sizes(sizes, unit, start)
    assert sum(out) == sum(sizes)
    assert all(n > 0 for n in out)
    assert first_misaligned(out, unit, start) is None
    prove_disjoint((out,), (unit,), (start,))


@given(st.integers(0, 40), st.integers(1, 6), st.integers(0, 20))
def test_split_sizes_give_one_piece_per_unit(length, unit, start):
    pieces = split_sizes(length, unit, start)
    assert sum(pieces) == length
    touched = units_touched(pieces, unit, start)
    if length:
        assert all(len(t) == 1 for t in touched)  # each piece inside exactly one unit
        assert len({next(iter(t)) for t in touched}) == len(pieces)  # and no unit twice
        expected_units = {i // unit for i in range(start, start + length)}
        assert len(pieces) == len(expected_units)


def test_aligned_sizes_examples():
    assert aligned_sizes((2, 2, 2, 2), 4) == (4, 4)
    assert aligned_sizes((6, 6, 6, 6), 4) == (8, 8, 8)
    # a write starting inside a partly filled unit: that unit's share is a block of its own
    assert aligned_sizes((3, 3, 3), 4, start=10) == (2, 4, 3)
    assert split_sizes(5, 4, start=10) == (2, 3)


def test_check_alignment_message_names_everything_needed_to_fix_it():
    with pytest.raises(ChunkAlignmentError) as info:
        check_alignment(((2, 2), (2, 2, 2, 2)), (4, 4), name="t2m", dims=("lat", "lon"))
    msg = str(info.value)
    assert "'t2m'" in msg
    assert "'lat'" in msg  # first offending dimension
    assert "(2, 2)" in msg and "size 4" in msg
    assert ".chunk({'lat': 4})" in msg
    assert "align_chunks=True" in msg


def test_check_alignment_hint_for_an_offset_write_is_the_exact_tuple():
    with pytest.raises(ChunkAlignmentError) as info:
        check_alignment(((3, 3, 3),), (4,), (10,), name="v", dims=("time",))
    assert ".chunk({'time': (2, 4, 3)})" in str(info.value)
    assert "starts at index 10" in str(info.value)


def test_check_alignment_accepts_aligned_and_unsharded_wording():
    check_alignment(((4, 4, 2),), (4,), name="v", dims=("x",))
    check_alignment(((2, 4, 3),), (4,), (10,), name="v", dims=("x",))  # region starts mid-unit
    with pytest.raises(ChunkAlignmentError, match="chunks of size 4"):
        check_alignment(((2, 2),), (4,), name="v", dims=("x",), sharded=False)


def test_check_alignment_without_dimension_names():
    with pytest.raises(ChunkAlignmentError, match="'dim_1'"):
        check_alignment(((4,), (3, 3)), (4, 4), name="v")


def test_region_edges_must_be_unit_aligned_except_at_the_array_end():
    check_region_edges((slice(4, 8),), (10,), (4,))
    check_region_edges((slice(8, 10),), (10,), (4,))
    with pytest.raises(ChunkAlignmentError, match=r"region x=2:8 .* index 2") as info:
        check_region_edges((slice(2, 8),), (10,), (4,), name="v", dims=("x",))
    assert "safe_chunks=False" in str(info.value)


@given(st.integers(0, 30), st.integers(0, 30), st.integers(1, 6), st.integers(0, 2))
def test_cut_units_matches_brute_force(a, b, unit, extra):
    start, stop = min(a, b), max(a, b)
    n = stop + extra  # the region ends at the array's end, or before it
    written = set(range(start, stop))
    cut = False
    for u in range(-(-n // unit)):
        cells = set(range(u * unit, min((u + 1) * unit, n)))
        cut |= bool(written & cells) and written & cells != cells  # partly covered
    assert bool(cut_units((slice(start, stop),), (n,), (unit,))) == cut


def test_deferred_edges_name_the_shared_shard_and_the_ways_out():
    check_deferred_edges((slice(8, 11),), (11,), (4,))  # starts on a boundary, ends at the array's end
    with pytest.raises(ChunkAlignmentError) as info:
        check_deferred_edges((slice(0, 4), slice(6, 11)), (4, 11), (4, 4), name="t", dims=("x", "time"))
    msg = str(info.value)
    assert "'t'" in msg and "time=6:11" in msg and "[4, 8)" in msg
    assert "compute=True" in msg and "safe_chunks=False" in msg
    with pytest.raises(ChunkAlignmentError, match="chunk"):
        check_deferred_edges((slice(2, 4),), (8,), (4,), sharded=False)
