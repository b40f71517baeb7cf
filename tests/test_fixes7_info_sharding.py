"""``info``/``tree``/``check`` on sharded arrays whose chain puts ``transpose`` before
``sharding_indexed`` (legal: array->array codecs come first), on regular and rectilinear grids,
and the inner chunks of a sharded rectilinear array counted by ``info``."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

import zarr3_backend as z3
from zarr3_backend.cli import main
from zarr3_backend.core.info import array_info, chunk_layout, storage_info

INNER_CODECS = [
    {"name": "bytes", "configuration": {"endian": "little"}},
    {"name": "gzip", "configuration": {"level": 1}},
]
INDEX_CODECS = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
TRANSPOSE = {"name": "transpose", "configuration": {"order": [1, 0]}}


def sharding(inner_chunk_shape: list[int]) -> dict:
    """A sharding codec whose inner chunk shape is given in the axis order it sees."""
    return {
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": inner_chunk_shape,
            "codecs": INNER_CODECS,
            "index_codecs": INDEX_CODECS,
        },
    }


def run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


# Shape (8, 12). The inner chunk is (2, 3) in array axis order; behind transpose [1, 0] the
# sharding codec sees it as [3, 2].
RECT_EDGES = [[2, 6], [6, 3, 3]]  # 2 x 3 shards of shapes (2|6) x (6|3|3)
AS_WRITTEN = [[2, 6], [6, [3, 2]]]  # the edges as zarr.json writes them (run-length pairs)


@pytest.fixture
def rect_transposed(tmp_path) -> z3.Array:
    """A rectilinear grid, chain [transpose, sharding]; three inner chunks written in two shards."""
    a = z3.create_array(
        tmp_path / "rt.zarr",
        shape=(8, 12),
        dtype="i4",
        chunks=RECT_EDGES,
        codecs=[TRANSPOSE, sharding([3, 2])],
    )
    a[0:2, 0:6] = np.arange(12).reshape(2, 6) + 1  # shard (0, 0): both of its inner chunks
    a[2:4, 6:9] = 7  # shard (1, 1) of shape (6, 3): one of its three inner chunks
    return a


def test_rectilinear_transposed_chain_is_reported_sharded(rect_transposed):
    a = rect_transposed
    chunks, shards = chunk_layout(a)
    assert chunks == (2, 3)  # the inner chunk, in array axis order
    assert shards == tuple(AS_WRITTEN)  # the grid's edges stand for the shards
    info = array_info(a)
    assert info.chunk_shape == (2, 3) and info.shard_shape == tuple(AS_WRITTEN)
    # the filters/serializer/compressors a user chose are those of the inner chain
    assert info.serializer["name"] == "bytes" and [c["name"] for c in info.compressors] == ["gzip"]
    assert [c["name"] for c in info.filters] == ["transpose"]


def test_rectilinear_transposed_chain_counts_inner_chunks(rect_transposed):
    s = storage_info(rect_transposed)
    assert (s.units_present, s.units_total) == (2, 6)
    # per axis: 2/2 + 6/2 = 4 inner rows, 6/3 + 3/3 + 3/3 = 4 inner columns
    assert s.inner_chunks_total == 16
    assert s.inner_chunks_present == 3


def test_rectilinear_sharded_counts_inner_chunks(tmp_path):
    a = z3.create_array(tmp_path / "r.zarr", shape=(12, 4), dtype="i2", chunks=(2, 2), shards=[[4, 8], [4]])
    a[0:2, :] = 1  # shard (0, 0): 2 of its 4 inner chunks
    a[10:12, 2:4] = 1  # shard (1, 0): 1 of its 8
    s = storage_info(a)
    assert (s.units_present, s.units_total) == (2, 2)
    assert (s.inner_chunks_present, s.inner_chunks_total) == (3, 12)
    result = run("info", a.store.root, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["chunk_shape"] == [2, 2] and doc["shard_shape"] == [[4, 8], [4]]
    assert doc["storage"]["inner_chunks_present"] == 3 and doc["storage"]["inner_chunks_total"] == 12
    assert "Inner chunks present : 3/12" in run("info", a.store.root).output


def test_regular_transposed_chain_is_reported_sharded(tmp_path):
    # shard (4, 6) in array order, seen as (6, 4) by the sharding codec; inner (2, 3) = [3, 2] there
    a = z3.create_array(
        tmp_path / "t.zarr", shape=(8, 12), dtype="i4", chunks=(4, 6), codecs=[TRANSPOSE, sharding([3, 2])]
    )
    a[0:2, 0:3] = 5  # one inner chunk of shard (0, 0)
    a[4:8, 6:12] = 6  # every inner chunk (4) of shard (1, 1)
    assert chunk_layout(a) == ((2, 3), (4, 6))
    info = array_info(a)
    assert [c["name"] for c in info.filters] == ["transpose"]  # shown, not lost with the outer chain
    assert info.serializer["name"] == "bytes" and [c["name"] for c in info.compressors] == ["gzip"]
    s = storage_info(a)
    assert (s.units_present, s.units_total) == (2, 4)
    assert (s.inner_chunks_present, s.inner_chunks_total) == (5, 16)


def test_info_and_tree_commands_on_a_transposed_rectilinear_array(rect_transposed):
    path = rect_transposed.store.root
    doc = json.loads(run("info", path, "--json").stdout)
    assert doc["chunk_shape"] == [2, 3] and doc["shard_shape"] == AS_WRITTEN
    assert doc["storage"]["inner_chunks_present"] == 3 and doc["storage"]["inner_chunks_total"] == 16
    text = run("info", path).output
    assert "Shards present       : 2/6" in text and "Inner chunks present : 3/16" in text
    rows = json.loads(run("tree", path, "--json").stdout)
    (row,) = [r for r in _walk(rows) if r.get("type") == "array"]
    assert row["chunks"] == [2, 3] and row["shards"] == AS_WRITTEN


def _walk(tree):
    """Every node dict of ``zarr3 tree --json`` output (a list of rows or a nested mapping)."""
    if isinstance(tree, dict):
        yield tree
        for v in tree.values():
            yield from _walk(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from _walk(v)


def test_check_verifies_the_shard_index_behind_a_transpose(rect_transposed):
    path = rect_transposed.store.root
    assert run("check", path).exit_code == 0
    shard = os.path.join(path, "c", "1", "1")
    with open(shard, "r+b") as f:  # the index is at the end: break one offset, keep its checksum
        f.seek(-(4 + 16), os.SEEK_END)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x40]))
    result = run("check", path, "--json")
    assert result.exit_code == 1
    (bad,) = json.loads(result.stdout)["bad"]
    assert bad["key"] == "c/1/1" and "crc32c" in bad["error"].lower()


SCALE_OFFSET = {"name": "scale_offset", "configuration": {"offset": 1, "scale": 2}}


def test_inner_chunks_behind_another_array_codec_are_counted_from_the_shard_index_layout(tmp_path):
    # the inner chunk has no array-order shape the pipeline gives here (Array.chunks is the shard)
    # but every shard still holds 4 inner chunks: counted as the shard index lays them out
    a = z3.create_array(
        tmp_path / "so.zarr",
        shape=(8, 12),
        dtype="i4",
        chunks=(4, 6),
        codecs=[SCALE_OFFSET, sharding([2, 3])],
    )
    a[0:2, 0:3] = 5
    s = storage_info(a)
    assert (s.inner_chunks_present, s.inner_chunks_total) == (1, 16)  # was 1/4: one per shard


def test_rectilinear_inner_chunks_with_no_array_order_shape_are_not_miscounted(tmp_path):
    a = z3.create_array(
        tmp_path / "rso.zarr",
        shape=(8, 12),
        dtype="i4",
        chunks=RECT_EDGES,
        codecs=[SCALE_OFFSET, sharding([2, 3])],
    )
    a[0:2, 0:3] = 5
    s = storage_info(a)
    assert s.units_present == 1 and s.inner_chunks_total is None and s.inner_chunks_present is None


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_copy_of_a_transposed_sharded_array_keeps_the_transpose(tmp_path, zarr_format):
    """``zarr3 copy`` takes its layout from ``info``: the transpose before the sharding codec is
    kept (inside each inner chunk for v3, as v2's ``order: "F"``), not dropped."""
    src = z3.create_array(
        tmp_path / "t.zarr", shape=(8, 12), dtype="i4", chunks=(4, 6), codecs=[TRANSPOSE, sharding([3, 2])]
    )
    src[...] = np.arange(96).reshape(8, 12)
    dst = tmp_path / "copy.zarr"
    result = run("copy", src.store.root, dst, "--zarr-format", zarr_format)
    assert result.exit_code == 0, result.output
    out = z3.open_array(dst, mode="r")
    np.testing.assert_array_equal(out[...], src[...])
    if zarr_format == 3:
        (shard,) = out.codecs
        assert (out.chunks, out.shards) == ((2, 3), (4, 6))
        assert [c["name"] for c in shard["configuration"]["codecs"]][:2] == ["transpose", "bytes"]
    else:
        assert json.loads((dst / ".zarray").read_text())["order"] == "F"
