"""The rectilinear chunk grid (zarr-extensions), as zarr-python 3.4 writes it: parsed, written,
read and written chunk by chunk, dask blocks following the grid, shard alignment checks."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import zarr3_backend as z3
from zarr3_backend.core import rectilinear
from zarr3_backend.core.chunk_grid import (
    RectilinearChunkGrid,
    RegularChunkGrid,
    parse_chunk_grid,
    rectilinear_from_arg,
)
from zarr3_backend.dask.alignment import (
    aligned_sizes,
    check_alignment,
    check_region_edges,
    prove_disjoint,
    split_sizes,
    storage_units,
)
from zarr3_backend.dask.read import from_array
from zarr3_backend.errors import ChunkAlignmentError, CodecError, MetadataError, ShapeError
from zarr3_backend.stores import MemoryStore

FIXTURES = Path(__file__).parent / "fixtures" / "zarr34"
STORE = FIXTURES / "store"
GZIP = [{"name": "gzip", "configuration": {"level": 1}}]


def rect(shapes, kind="inline") -> dict:
    return {"name": "rectilinear", "configuration": {"kind": kind, "chunk_shapes": shapes}}


# --- the grid -------------------------------------------------------------------------------------
def test_spec_example_expands_every_form() -> None:
    grid = parse_chunk_grid(rect([4, [1, 2, 3], [[4, 2]], [[1, 3], 3], [4, 4, 4]]))
    shape = (6, 6, 6, 6, 6)
    assert grid.axis_chunks(shape) == ((4, 2), (1, 2, 3), (4, 2), (1, 1, 1, 3), (4, 2))
    assert grid.grid_shape(shape) == (2, 3, 2, 4, 2)
    assert grid.codec_shape((1, 2, 1, 3, 1)) == (4, 3, 4, 3, 4)  # full edges, not clipped
    assert grid.chunk_region((1, 2, 1, 3, 1), shape) == (
        slice(4, 6),
        slice(3, 6),
        slice(4, 6),
        slice(3, 6),
        slice(4, 6),
    )
    # written back as zarr-python 3.4 writes it: run-length pairs where that is shorter
    assert grid.to_json() == rect([4, [1, 2, 3], [[4, 2]], [[1, 3], 3], [[4, 3]]])


def test_spec_indexing_example() -> None:
    grid = parse_chunk_grid(rect([[16, 10], [24, 14]]))
    shape = (26, 38)
    assert [
        int(grid.chunk_indices(0, np.array([20]), 26)[0]),
        int(grid.chunk_indices(1, np.array([15]), 38)[0]),
    ] == [1, 0]
    assert grid.chunk_region((1, 0), shape) == (slice(16, 26), slice(0, 24))
    assert list(grid.iter_chunk_coords(shape)) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_written_with_run_lengths_only_where_shorter() -> None:
    assert RectilinearChunkGrid(((2, 2, 2, 2, 1, 3),)).to_json() == rect([[[2, 4], 1, 3]])
    assert RectilinearChunkGrid(((2, 2, 3),)).to_json() == rect([[[2, 2], 3]])
    assert RectilinearChunkGrid(((2, 3, 2),)).to_json() == rect([[2, 3, 2]])  # no run: kept as it is
    assert RectilinearChunkGrid((5, (1,))).to_json() == rect([5, [1]])


@pytest.mark.parametrize(
    "obj,match",
    [
        (rect([[2, 0]]), "positive"),
        (rect([[]]), "no chunk edges"),
        (rect([[[2, 0]]]), "pair of"),
        (rect([[[2, 1, 1]]]), "pair of"),
        (rect([0]), "positive integer"),
        (rect(["4"]), "positive integer"),
        (rect([[2]], kind="external"), "'kind' must be 'inline'"),
        ({"name": "rectilinear", "configuration": {"chunk_shapes": [[2]]}}, "'kind'"),
        ({"name": "rectilinear", "configuration": {"kind": "inline"}}, "needs 'chunk_shapes'"),
        (
            {"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": [2], "x": 1}},
            "unknown",
        ),
        ({"name": "hexagonal", "configuration": {}}, "unsupported chunk grid 'hexagonal'"),
        (rect([[[2, 10**9]]]), "run length"),
    ],
)
def test_bad_grids_are_typed_errors(obj, match: str) -> None:
    with pytest.raises(MetadataError, match=match):
        parse_chunk_grid(obj)


def test_edges_must_cover_the_array(tmp_path) -> None:
    doc = json.loads((STORE / "rectilinear_2d" / "zarr.json").read_text())
    doc["shape"] = [11, 7]  # the edges [2, 3, 5] add up to 10
    (tmp_path / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(MetadataError, match="add up to 10, less than the array's extent 11"):
        z3.open_array(tmp_path, mode="r")


def test_overflowing_edges_and_update_shape() -> None:
    grid = RectilinearChunkGrid(((4, 4, 4), 3))
    assert grid.axis_chunks((9, 7)) == ((4, 4, 1), (3, 3, 1))
    assert grid.grid_shape((8, 7)) == (2, 3)  # the third edge holds no element
    assert grid.update_shape((9, 7), (15, 20)).chunk_shapes == ((4, 4, 4, 3), 3)
    assert grid.update_shape((9, 7), (5, 20)).chunk_shapes == ((4, 4, 4), 3)


def test_regular_grid_answers_the_same_questions() -> None:
    grid = RegularChunkGrid((4, 3))
    assert grid.axis_chunks((10, 3)) == ((4, 4, 2), (3,))
    assert grid.axis_offsets(0, 10) == (0, 4, 8, 10)
    assert grid.chunk_indices(0, np.array([0, 3, 4, 9]), 10).tolist() == [0, 0, 1, 2]
    assert grid.axis_chunks((0, 3)) == ((0,), (3,))
    assert grid.is_regular and not RectilinearChunkGrid(((1,),)).is_regular


def test_chunk_shape_of_a_rectilinear_grid_is_a_typed_error() -> None:
    """Code that assumes one chunk shape fails loudly instead of reading the wrong chunks."""
    a = z3.open_array(STORE, path="rectilinear_2d", mode="r")
    with pytest.raises(ShapeError, match="rectilinear"):
        a.storage_chunks  # noqa: B018
    assert a.nchunks == 6


def test_array_indexing_dispatches_to_the_grid(tmp_path) -> None:
    """``a[...]`` and ``a[sel] = v`` on a rectilinear array go chunk by chunk, committed as one
    write (no staging left behind), and zarr-python's fixture reads the same through it."""
    a = z3.create_array(str(tmp_path), path="r", shape=(10, 7), dtype="i4", chunks=[[2, 3, 5], [4, 3]])
    data = np.arange(70, dtype="i4").reshape(10, 7)
    a[...] = data
    np.testing.assert_array_equal(a[...], data)
    np.testing.assert_array_equal(a[2:7, 1], data[2:7, 1])
    assert a[9, 6] == data[9, 6]
    a[1:9, 2:5] = -1
    data[1:9, 2:5] = -1
    np.testing.assert_array_equal(z3.open_array(str(tmp_path), path="r")[...], data)
    assert not (tmp_path / ".z3-txn").exists() or not any((tmp_path / ".z3-txn").rglob("*"))
    fixture = z3.open_array(STORE, path="rectilinear_2d", mode="r")
    np.testing.assert_array_equal(fixture[...], rectilinear.read(fixture))


# --- reading what zarr-python 3.4 wrote ---------------------------------------------------------
FIXTURE_NAMES = ["rectilinear_2d", "rectilinear_rle", "rectilinear_sharded"]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_zarr_python_34_rectilinear_arrays_read_exactly(name: str) -> None:
    a = z3.open_array(STORE, path=name, mode="r")
    expected = np.load(FIXTURES / f"{name}.npy")
    got = rectilinear.read(a)
    assert got.dtype == expected.dtype and np.array_equal(got, expected)
    assert (
        a.metadata.to_json()["chunk_grid"]
        == json.loads((STORE / name / "zarr.json").read_text())["chunk_grid"]
    )


@pytest.mark.parametrize("name", ["rectilinear_2d", "rectilinear_sharded"])
def test_selections_match_numpy(name: str) -> None:
    a = z3.open_array(STORE, path=name, mode="r")
    expected = np.load(FIXTURES / f"{name}.npy")
    rng = np.random.default_rng(3)
    selections = [
        (slice(1, 9, 3), 2),
        (slice(None, None, -2), slice(None)),
        (np.array([5, 0, 2, 2]), slice(1, 3)),
        (expected.shape[0] - 1, -1),
        (slice(3, 3), slice(None)),
        (np.zeros(expected.shape[0], dtype=bool), 0),
    ]
    for _ in range(20):
        start, stop = sorted(rng.integers(0, expected.shape[0] + 1, size=2))
        selections.append(
            (slice(int(start), int(stop), int(rng.integers(1, 4))), int(rng.integers(0, expected.shape[1])))
        )
    for sel in selections:
        want = expected[sel[0]][:, sel[1]] if isinstance(sel[0], np.ndarray) else expected[sel]
        got = rectilinear.read(a, sel)
        assert got.shape == want.shape and np.array_equal(got, want), sel


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_dask_blocks_follow_the_grid(name: str) -> None:
    a = z3.open_array(STORE, path=name, mode="r")
    expected = np.load(FIXTURES / f"{name}.npy")
    d = from_array(a)
    assert d.chunks == a.metadata.chunk_grid.axis_chunks(a.shape)
    assert np.array_equal(d.compute(), expected)
    assert np.array_equal(from_array(a, chunks=3).compute(), expected)  # blocks across chunk edges
    assert np.array_equal(d[1::2].compute(), expected[1::2])


def test_dask_inner_chunks_of_a_sharded_rectilinear_array() -> None:
    a = z3.open_array(STORE, path="rectilinear_sharded", mode="r")
    d = from_array(a, chunks="chunks")
    assert d.chunks == ((2, 2, 2, 2, 2, 2), (2, 2))
    assert np.array_equal(d.compute(), np.load(FIXTURES / "rectilinear_sharded.npy"))


def test_inner_chunks_of_a_sharded_rectilinear_array_behind_a_transpose() -> None:
    """The read chunk of a sharded rectilinear array is its inner chunk in the array's axes,
    also with a transpose before the sharding codec, and dask's "chunks" cut shards by it."""
    data = np.arange(80, dtype="i4").reshape(10, 8)
    transpose = {"name": "transpose", "configuration": {"order": [1, 0]}}
    sharding = {
        "name": "sharding_indexed",
        "configuration": {"chunk_shape": [4, 2], "codecs": [{"name": "bytes"}]},
    }
    for kwargs in (
        {"chunks": (2, 4), "shards": [[4, 6], [8]]},
        {"chunks": [[4, 6], [8]], "codecs": [transpose, sharding]},  # inner [4, 2] stored transposed
    ):
        a = z3.create_array(MemoryStore(), shape=data.shape, dtype=data.dtype, **kwargs)
        a[...] = data
        assert a.chunks == (2, 4)
        d = from_array(a, chunks="chunks")
        assert d.chunks == ((2, 2, 2, 2, 2), (4, 4))
        assert np.array_equal(d.compute(), data)


def test_undo_transposes_matches_numpy() -> None:
    from zarr3_backend.codecs.transpose import undo_transposes

    x = np.empty((2, 3, 5, 7))
    orders = [(2, 0, 3, 1), (1, 3, 0, 2)]
    y = x
    for order in orders:  # what the codecs do to a chunk, in chain order
        y = y.transpose(order)
    assert undo_transposes(orders, y.shape) == x.shape
    assert undo_transposes([], (4, 5)) == (4, 5)


# --- writing as zarr-python 3.4 does ------------------------------------------------------------
@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("rectilinear_2d", {"chunks": [[2, 3, 5], [4, 3]], "fill_value": -1}),
        ("rectilinear_rle", {"chunks": [[2, 2, 2, 2, 1, 3]]}),
        ("rectilinear_sharded", {"chunks": (2, 2), "shards": [[4, 8], [4]]}),
    ],
)
def test_we_write_what_zarr_python_34_writes(tmp_path, name: str, kwargs: dict) -> None:
    expected = np.load(FIXTURES / f"{name}.npy")
    a = z3.create_array(
        tmp_path / "o.zarr", name, shape=expected.shape, dtype=expected.dtype, compressors=GZIP, **kwargs
    )
    theirs = json.loads((STORE / name / "zarr.json").read_text())
    ours = a.metadata.to_json()
    for key in ("chunk_grid", "codecs", "fill_value", "shape", "data_type"):
        assert ours[key] == theirs[key], key
    rectilinear.write(a, ..., expected)
    assert np.array_equal(rectilinear.read(z3.open_array(tmp_path / "o.zarr", path=name)), expected)
    keys = sorted(p.relative_to(STORE / name) for p in (STORE / name).rglob("c/**/*") if p.is_file())
    assert keys == sorted(
        p.relative_to(tmp_path / "o.zarr" / name)
        for p in (tmp_path / "o.zarr" / name).rglob("c/**/*")
        if p.is_file()
    )
    if name != "rectilinear_sharded":  # shards hold independently compressed inner chunks: compare decoded
        for key in keys:
            assert gzip.decompress((tmp_path / "o.zarr" / name / key).read_bytes()) == gzip.decompress(
                (STORE / name / key).read_bytes()
            )


def test_partial_writes_fill_and_empty_chunks(tmp_path) -> None:
    a = z3.create_array(
        tmp_path / "p.zarr", shape=(10, 7), dtype="f4", chunks=[[2, 3, 5], [4, 3]], fill_value=np.nan
    )
    expected = np.full((10, 7), np.nan, dtype="f4")
    rectilinear.write(a, (slice(1, 6), slice(2, 6)), 1.5)
    expected[1:6, 2:6] = 1.5
    rectilinear.write(a, (9, np.array([0, 6])), [7, 8])
    expected[9, [0, 6]] = [7, 8]
    np.testing.assert_array_equal(rectilinear.read(a), expected)
    stored = {
        p.relative_to(tmp_path / "p.zarr").as_posix()
        for p in (tmp_path / "p.zarr").rglob("c/**/*")
        if p.is_file()
    }
    assert stored == {"c/0/0", "c/0/1", "c/1/0", "c/1/1", "c/2/0", "c/2/1"}
    rectilinear.write(a, (slice(0, 2), slice(0, 4)), np.nan)  # chunk (0, 0) is all fill again: erased
    expected[0:2, 0:4] = np.nan
    assert not (tmp_path / "p.zarr" / "c" / "0" / "0").exists()
    np.testing.assert_array_equal(rectilinear.read(a), expected)
    with pytest.raises(ShapeError, match="cannot be written"):
        rectilinear.write(a, (slice(0, 2), 0), np.zeros(3))


def test_sharded_rectilinear_writes_only_the_touched_shard(tmp_path) -> None:
    a = z3.create_array(tmp_path / "s.zarr", shape=(12, 4), dtype="i2", chunks=(2, 2), shards=[[4, 8], [4]])
    rectilinear.write(a, (slice(5, 7), slice(None)), 3)
    assert (tmp_path / "s.zarr" / "c" / "1" / "0").exists() and not (
        tmp_path / "s.zarr" / "c" / "0" / "0"
    ).exists()
    expected = np.zeros((12, 4), dtype="i2")
    expected[5:7] = 3
    np.testing.assert_array_equal(rectilinear.read(a), expected)


def test_shards_must_suit_the_inner_chunks_on_every_edge(tmp_path) -> None:
    with pytest.raises(CodecError, match="not a multiple of the inner chunk_shape"):
        z3.create_array(
            tmp_path / "b.zarr", shape=(12, 4), dtype="u2", chunks=(4, 2), shards=[[4, 6, 2], [4]]
        )


def test_rectilinear_argument_forms() -> None:
    assert rectilinear_from_arg((4, 3), 2) is None
    assert rectilinear_from_arg(None, 2) is None
    assert rectilinear_from_arg([[1, 2], 3], 2) == RectilinearChunkGrid(((1, 2), 3))
    with pytest.raises(ShapeError, match="2 axes"):
        rectilinear_from_arg([[1, 2], 3], 3)


# --- shard alignment of parallel writers ------------------------------------------------------------
def test_alignment_understands_rectilinear_units(tmp_path) -> None:
    a = z3.create_array(tmp_path / "a.zarr", shape=(12, 4), dtype="i2", chunks=(2, 2), shards=[[4, 8], [4]])
    units = storage_units(a)
    assert units == ((0, 4, 12), (0, 4))
    check_alignment(((4, 8), (4,)), units)
    with pytest.raises(ChunkAlignmentError, match=r"falls inside the shard \[4, 12\)"):
        check_alignment(((4, 4, 4), (4,)), units, name="v", dims=("y", "x"))
    assert aligned_sizes((4, 4, 4), units[0]) == (4, 8)
    assert aligned_sizes((3, 3, 3, 3), units[0], 0) == (4, 8)
    assert aligned_sizes((1, 1, 1, 1, 1, 1, 1, 1, 1, 1), units[0], 2) == (2, 8)  # start inside a shard
    assert split_sizes(10, units[0], 2) == (2, 8)
    prove_disjoint(((4, 8), (4,)), units, (0, 0))
    with pytest.raises(ChunkAlignmentError, match="both touch storage unit 1"):
        prove_disjoint(((6, 6), (4,)), units, (0, 0))
    with pytest.raises(ChunkAlignmentError, match="cuts the shard of size 8 at index 6"):
        check_region_edges((slice(0, 6), slice(0, 4)), (12, 4), units)
    check_region_edges((slice(4, 12), slice(0, 4)), (12, 4), units)


def test_regular_units_keep_their_behaviour() -> None:
    assert aligned_sizes((3, 3, 3, 3), 4) == (4, 4, 4)
    assert split_sizes(10, 4, 2) == (2, 4, 4)
    with pytest.raises(ChunkAlignmentError, match=r"shards of size 4.*\[0, 4\)"):
        check_alignment(((3, 3), (4,)), (4, 4))


def test_get_region_and_get_regions_read_rectilinear_arrays(tmp_path):
    """The box reads dask tasks use work on rectilinear grids as on regular ones."""
    data = np.arange(70, dtype="i4").reshape(10, 7)
    a = z3.create_array(str(tmp_path / "r"), shape=(10, 7), dtype="i4", chunks=[[2, 3, 5], [4, 3]])
    a[...] = data
    box = (slice(1, 4), slice(2, 5))
    np.testing.assert_array_equal(a.get_region(box), data[box])
    got = a.get_regions([box, (slice(0, 10), slice(0, 7))])
    np.testing.assert_array_equal(got[0], data[box])
    np.testing.assert_array_equal(got[1], data)
