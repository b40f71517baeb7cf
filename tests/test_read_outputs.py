"""Where read results go: ``whole_chunk_target`` hands out a place in the output only when a
chunk fills one contiguous block of it, and reads that must not decode in place stay right."""

from __future__ import annotations

import numpy as np
import pytest

import zarr3_backend as z3
from zarr3_backend.indexing import ChunkProjection, basic_indexer, whole_chunk_target

RAW = [{"name": "bytes", "configuration": {"endian": "little"}}]


def _sharded(inner: list[int]) -> list[dict]:
    return [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": inner,
                "codecs": RAW,
                "index_codecs": [*RAW, {"name": "crc32c"}],
                "index_location": "end",
            },
        }
    ]


def test_whole_chunk_target_is_a_view_of_its_place_in_the_output() -> None:
    out = np.zeros((8, 6), dtype="int32")
    (p, *rest) = list(basic_indexer((slice(4, 8), slice(None)), (8, 6), (4, 6)))
    assert not rest
    target = whole_chunk_target(p, out, (4, 6))
    assert target is not None and target.shape == (4, 6)
    target[...] = 7
    assert (out[:4] == 7).all()  # the selection starts at row 4 of the array, row 0 of ``out``
    assert (out[4:] == 0).all()


@pytest.mark.parametrize(
    "p, out_shape, chunk_shape",
    [
        # an index array in the output selection: ``out[...]`` is a copy, never a target
        (ChunkProjection((0,), (slice(0, 4, 1),), (np.array([3, 2, 1, 0]),), True), (4,), (4,)),
        # a partial chunk
        (ChunkProjection((0,), (slice(0, 2, 1),), (slice(0, 2),), False), (2,), (4,)),
        # a whole chunk spread over non-contiguous memory of the output
        (
            ChunkProjection((0, 0), (slice(0, 2, 1), slice(0, 2, 1)), (slice(0, 2), slice(0, 2)), True),
            (2, 4),
            (2, 2),
        ),
        # a stepped chunk selection
        (ChunkProjection((0,), (slice(0, 4, 2),), (slice(0, 2),), True), (2,), (4,)),
        # a 0-d output: ``out[()]`` is a numpy scalar
        (ChunkProjection((), (), (), True), (), ()),
    ],
)
def test_whole_chunk_target_refuses_what_is_not_one_block(p, out_shape, chunk_shape) -> None:
    assert whole_chunk_target(p, np.zeros(out_shape, dtype="int32"), chunk_shape) is None


@pytest.mark.parametrize("sharded", [False, True])
def test_permuted_and_reversed_reads_of_whole_chunks_are_exact(tmp_path, sharded: bool) -> None:
    """Reads whose chunks are whole but land permuted in the result (orthogonal index arrays,
    negative steps) must not be decoded straight into the output."""
    data = np.arange(16 * 8, dtype="int32").reshape(16, 8)
    codecs = _sharded([4, 4]) if sharded else RAW
    a = z3.create_array(
        tmp_path / "a.zarr",
        shape=data.shape,
        dtype=data.dtype,
        chunks=(8, 8) if sharded else (4, 4),
        codecs=codecs,
    )
    a[...] = data
    perm = np.array([7, 6, 5, 4, 0, 1, 2, 3])
    np.testing.assert_array_equal(a.oindex[perm, :], data[perm, :])
    np.testing.assert_array_equal(a.oindex[:, perm], data[:, perm])
    np.testing.assert_array_equal(a[::-1, ::-1], data[::-1, ::-1])
    np.testing.assert_array_equal(a[4:8, 4:8], data[4:8, 4:8])
    np.testing.assert_array_equal(a[..., 4:8], data[..., 4:8])
    np.testing.assert_array_equal(a[5], data[5])


def test_a_result_numpy_cannot_make_is_a_typed_error_naming_the_array():
    """A zero-size result whose shape numpy still refuses (its size overflows) is a
    ResourceLimitError naming the array, from a plain read and from get_regions alike."""
    from zarr3_backend.errors import ResourceLimitError
    from zarr3_backend.stores import MemoryStore

    a = z3.create_array(MemoryStore(), shape=(2**62, 0), dtype="f4", chunks=(1, 1), path="huge")
    with pytest.raises(ResourceLimitError, match=r"'huge'.*shape"):
        a[...]
    with pytest.raises(ResourceLimitError, match=r"'huge'.*shape"):
        a.get_regions([(slice(None), slice(None))])
    assert a[:5].shape == (5, 0)
