"""The sharding_indexed codec: shard format, partial reads, corruption, Array integration, interop.

Byte-level expectations are checked against an independent reading of the spec (numpy parsing
of the index, the ``crc32c`` package for checksums) and against zarr-python and tensorstore.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from collections.abc import Sequence

import crc32c
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zarr3_backend as z3
from zarr3_backend.byte_range import ByteRange
from zarr3_backend.codecs import ChunkSpec, CodecChain, codec_from_json
from zarr3_backend.codecs.fill import is_fill
from zarr3_backend.codecs.shard_index import (
    EMPTY,
    MERGE_GAP,
    check_index,
    decode_index,
    encode_index,
    index_spec,
    merge_ranges,
)
from zarr3_backend.codecs.shard_selection import inner_indexer
from zarr3_backend.codecs.sharding import ShardingCodec
from zarr3_backend.core.shard_view import ShardView
from zarr3_backend.errors import (
    ChecksumError,
    CodecError,
    CorruptionError,
    SelectionError,
    UnknownCodecError,
    Zarr3Error,
)
from zarr3_backend.stores import MemoryStore, Store

BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
CRC = {"name": "crc32c"}
GZIP = {"name": "gzip", "configuration": {"level": 1}}
ZSTD = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}
BLOSC = {
    "name": "blosc",
    "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 8, "blocksize": 0},
}


# --- helpers ------------------------------------------------------------------------------------
def make(shard_shape, chunk_shape, dtype="float64", fill=0, **config):
    """An evolved codec and the shard spec it encodes."""
    dt = np.dtype(dtype)
    spec = ChunkSpec(tuple(shard_shape), dt, dt.type(fill))
    return ShardingCodec(chunk_shape, **config).evolve(spec), spec


class CountingReader:
    """A RangeReader over one stored value that records every call and its ranges."""

    def __init__(self, data: bytes | None) -> None:
        self.data = data
        self.calls: list[list[ByteRange | None]] = []

    def __call__(self, ranges: Sequence[ByteRange | None]) -> list[bytes | None]:
        self.calls.append(list(ranges))
        if self.data is None:
            return [None for _ in ranges]
        return [bytes(self.data) if r is None else r.apply(self.data) for r in ranges]


def read_region(codec, reader, selection, spec, index=None):
    """``decode(shard)[selection]`` read through a ``ShardView`` over ``reader``."""
    return ShardView(codec.layout(spec), reader).read(selection, index)


def raw_index(shard: bytes, n_chunks: int, location: str, crc: bool) -> np.ndarray:
    """Parse the index straight from the bytes, as the spec lays it out (independent of the codec)."""
    size = 16 * n_chunks + (4 if crc else 0)
    blob = shard[:size] if location == "start" else shard[len(shard) - size :]
    if crc:
        (stored,) = struct.unpack("<I", blob[-4:])
        assert stored == crc32c.crc32c(blob[:-4])
        blob = blob[:-4]
    return np.frombuffer(blob, dtype="<u8").reshape(n_chunks, 2)


def sample(shape, dtype="float64", seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal(shape).astype(dtype)
        if np.dtype(dtype).kind == "f"
        else rng.integers(0, 100, shape).astype(dtype)
    )


# --- round trips --------------------------------------------------------------------------------
@pytest.mark.parametrize("location", ["start", "end"])
@pytest.mark.parametrize("index_codecs", [[BYTES, CRC], [BYTES]], ids=["crc32c", "no-crc"])
@pytest.mark.parametrize(
    "inner", [[BYTES], [BYTES, GZIP], [BYTES, ZSTD], [BYTES, BLOSC]], ids=["raw", "gzip", "zstd", "blosc"]
)
def test_round_trip_and_layout(location, index_codecs, inner):
    codec, spec = make((8, 6), (4, 3), codecs=inner, index_codecs=index_codecs, index_location=location)
    shard = sample((8, 6))
    data = codec.encode(shard, spec)
    np.testing.assert_array_equal(codec.decode(data, spec), shard)

    index = raw_index(data, 4, location, crc=len(index_codecs) == 2)
    index_size = 16 * 4 + (4 if len(index_codecs) == 2 else 0)
    assert len(data) == index_size + int(index[:, 1].sum())
    # chunks are laid out back to back in C order of the inner grid, after/before the index
    expected_offset = index_size if location == "start" else 0
    for (off, nb), coords in zip(index, np.ndindex(2, 2), strict=True):
        assert off == expected_offset
        expected_offset += int(nb)
        inner_chain = CodecChain.build(inner, ChunkSpec((4, 3), spec.dtype, spec.fill_value))
        sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(coords, (4, 3), strict=True))
        np.testing.assert_array_equal(inner_chain.decode(data[off : off + nb]), shard[sl])


def test_uncompressed_inner_chunks_are_plain_little_endian_bytes():
    codec, spec = make((4,), (2,), dtype=">i4", index_location="start")
    data = codec.encode(np.array([1, 2, 3, 4], dtype=">i4"), spec)
    assert data[36:] == np.array([1, 2, 3, 4], dtype="<i4").tobytes()  # index: 2 x 16 + 4 crc bytes
    index = raw_index(data, 2, "start", crc=True)
    assert index.tolist() == [[36, 8], [44, 8]]


def test_fill_only_inner_chunks_are_left_out():
    codec, spec = make((4, 4), (2, 2), fill=7)
    shard = np.full((4, 4), 7.0)
    shard[0, 3] = 1.0  # only inner chunk (0, 1) holds data
    data = codec.encode(shard, spec)
    index = raw_index(data, 4, "end", crc=True)
    assert index[1].tolist() == [0, 32]
    for i in (0, 2, 3):
        assert index[i].tolist() == [EMPTY, EMPTY]
    assert len(data) == 32 + 68
    np.testing.assert_array_equal(codec.decode(data, spec), shard)


def test_all_empty_shard_encodes_to_none():
    codec, spec = make((4, 4), (2, 2), fill=3)
    assert codec.encode(np.full((4, 4), 3.0), spec) is None


def test_write_empty_chunks_stores_every_inner_chunk():
    nested = {"name": "sharding_indexed", "configuration": {"chunk_shape": [1, 1], "codecs": [BYTES]}}
    for inner in ([BYTES, GZIP], [nested]):
        codec, spec = make((4, 4), (2, 2), fill=3, codecs=inner)
        fill = np.full((4, 4), 3.0)
        assert codec.encode(fill, spec) is None
        data = codec.encode(fill, spec, write_empty_chunks=True)
        assert data is not None
        index = raw_index(data, 4, "end", crc=True)
        assert (index[:, 0] != EMPTY).all()
        np.testing.assert_array_equal(codec.decode(data, spec), fill)
        # the flag reaches the codec through a chain holding it
        chain = CodecChain.build([codec], spec)
        assert chain.encode(fill) is None
        assert bytes(chain.encode(fill, write_empty_chunks=True)) == data
    # nested: the inner shards store their fill chunks too (4 entries of 1 x 1 each)
    off, nb = (int(v) for v in index[0])
    assert (raw_index(data[off : off + nb], 4, "end", crc=True)[:, 0] != EMPTY).all()
    # a chain without sharding ignores the flag
    plain = CodecChain.build([BYTES], ChunkSpec((2,), np.dtype("f8"), 0.0))
    assert bytes(plain.encode(np.zeros(2), write_empty_chunks=True)) == bytes(16)


def test_nan_fill_is_bit_level_and_nan_aware():
    codec, spec = make((4,), (2,), fill=np.nan)
    # all-NaN chunk (any payload) is empty; -0.0 is not the fill 0.0 of another array
    odd_nan = np.array([0x7FF8000000000001], dtype="<u8").view("<f8")[0]
    assert codec.encode(np.array([np.nan, odd_nan, np.nan, np.nan]), spec) is None
    data = codec.encode(np.array([np.nan, np.nan, 1.0, np.nan]), spec)
    assert raw_index(data, 2, "end", crc=True)[0].tolist() == [EMPTY, EMPTY]
    zero, zspec = make((2,), (1,), fill=0.0)
    out = zero.decode(zero.encode(np.array([-0.0, 0.0]), zspec), zspec)
    assert np.signbit(out).tolist() == [True, False]
    assert raw_index(zero.encode(np.array([-0.0, 0.0]), zspec), 2, "end", crc=True)[1].tolist() == [
        EMPTY,
        EMPTY,
    ]


def test_is_fill_kinds():
    assert is_fill(np.zeros(3), 0.0)
    assert not is_fill(np.array([0.0, -0.0]), 0.0)
    assert is_fill(np.array([np.nan, np.nan]), np.nan)
    assert not is_fill(np.array([np.nan, 1.0]), np.nan)
    assert is_fill(np.array([complex(np.nan, 1)], dtype="c16"), complex(np.nan, 1))
    assert not is_fill(np.array([complex(np.nan, 2)], dtype="c16"), complex(np.nan, 1))
    assert is_fill(np.full((2, 2), 5, dtype="i2")[:, :1], 5)
    assert is_fill(np.zeros(2, dtype="S3"), b"")
    assert not is_fill(np.array([b"a", b""], dtype="S3"), b"")
    assert is_fill(np.array([True, True]), True)
    # the fast first/last probe must not decide alone: -0.0 hides in the middle
    assert not is_fill(np.array([0.0, -0.0, 0.0]), 0.0)
    assert not is_fill(np.array([0.0, 1.0, 0.0], dtype="f2"), 0.0)
    assert not is_fill(np.array([np.nan, 1.0, np.nan]), np.nan)
    raw = np.dtype("V3")
    assert is_fill(np.zeros(4, dtype=raw), np.void(b"\x00\x00\x00"))
    assert not is_fill(np.frombuffer(b"\x00" * 5 + b"\x01" + b"\x00" * 3, dtype=raw), np.void(b"\x00" * 3))
    rec = np.dtype([("a", "<f4"), ("b", "<i2")])
    assert is_fill(np.zeros(3, dtype=rec), np.zeros((), dtype=rec)[()])
    signed = np.zeros(3, dtype=rec)
    signed["a"][1] = -0.0
    assert not is_fill(signed, np.zeros((), dtype=rec)[()])
    nat = np.array(["NaT", "NaT"], dtype="M8[s]")
    assert is_fill(nat, np.datetime64("NaT", "s")) and not is_fill(nat, np.datetime64(0, "s"))
    assert is_fill(np.array(["", ""], dtype=object), "") and not is_fill(
        np.array(["", "x"], dtype=object), ""
    )


def test_array_and_sharding_share_one_is_fill():
    import zarr3_backend.codecs.sharding as sharding_module
    import zarr3_backend.core.unit_writes as array_module

    assert array_module.is_fill is is_fill and sharding_module.is_fill is is_fill


def test_nested_sharding_round_trip_and_partial_read():
    nested = {"name": "sharding_indexed", "configuration": {"chunk_shape": [2, 2], "codecs": [BYTES, GZIP]}}
    codec, spec = make((8, 8), (4, 4), codecs=[nested], index_location="start")
    shard = sample((8, 8))
    shard[4:, :4] = 0  # one whole outer inner chunk is fill
    data = codec.encode(shard, spec)
    np.testing.assert_array_equal(codec.decode(data, spec), shard)
    assert raw_index(data, 4, "start", crc=True)[2].tolist() == [EMPTY, EMPTY]
    reader = CountingReader(data)
    np.testing.assert_array_equal(
        read_region(codec, reader, (slice(1, 2), slice(5, 6)), spec), shard[1:2, 5:6]
    )
    # outer index, then the nested shard's index, then its one inner chunk
    assert len(reader.calls) == 3 and all(len(c) == 1 for c in reader.calls)
    nested_off, nested_nb = (int(v) for v in raw_index(data, 4, "start", crc=True)[1])
    assert reader.calls[1][0] == ByteRange(nested_off + nested_nb - 68, 68)  # nested index: its suffix
    nested_index = raw_index(data[nested_off : nested_off + nested_nb], 4, "end", crc=True)
    # the nested index sits at its end: the chunk's range is extended over it
    assert reader.calls[2][0] == ByteRange(nested_off + int(nested_index[0][0]), int(nested_index[0][1]) + 68)
    # a region covering whole nested shards reads them in one merged range
    reader = CountingReader(data)
    np.testing.assert_array_equal(read_region(codec, reader, (slice(0, 8), slice(4, 8)), spec), shard[:, 4:])
    assert len(reader.calls) == 2 and len(reader.calls[1]) == 1


def test_to_json_writes_full_nested_configuration():
    nested = {"name": "sharding_indexed", "configuration": {"chunk_shape": [2], "codecs": [BYTES]}}
    codec, _ = make((8,), (4,), codecs=[nested, CRC], index_codecs=[BYTES], index_location="start")
    config = codec.to_json()["configuration"]
    assert config["chunk_shape"] == [4]
    assert config["index_location"] == "start"
    assert config["index_codecs"] == [BYTES]
    inner = config["codecs"][0]["configuration"]
    assert inner["index_codecs"] == [BYTES, CRC] and inner["index_location"] == "end"
    assert inner["codecs"] == [BYTES]
    assert config["codecs"][1] == CRC
    assert codec_from_json(json.loads(json.dumps(codec.to_json()))) == codec


def test_defaults_and_registry():
    codec = codec_from_json(
        {"name": "sharding_indexed", "configuration": {"chunk_shape": [2], "codecs": [BYTES]}}
    )
    assert isinstance(codec, ShardingCodec)
    assert codec.index_location == "end"
    assert codec.to_json()["configuration"]["index_codecs"] == [BYTES, CRC]


# --- configuration errors -----------------------------------------------------------------------
def test_compressing_index_codec_is_refused():
    with pytest.raises(CodecError, match=r"index_codecs.*fixed"):
        make((4,), (2,), index_codecs=[BYTES, GZIP])


def test_non_multiple_shard_shape_names_both_shapes():
    with pytest.raises(CodecError) as e:
        make((10, 10), (3, 5))
    assert "[10, 10]" in str(e.value) and "[3, 5]" in str(e.value)


def test_ndim_mismatch_and_bad_config():
    with pytest.raises(CodecError, match=r"\[2\].*\[4, 4\]"):
        make((4, 4), (2,))
    with pytest.raises(CodecError, match="index_location"):
        ShardingCodec([2], index_location="middle")
    with pytest.raises(CodecError, match="chunk_shape"):
        ShardingCodec([0, 2])
    with pytest.raises(CodecError, match="chunk_shape"):
        codec_from_json({"name": "sharding_indexed", "configuration": {"codecs": [BYTES]}})
    with pytest.raises(CodecError, match="unknown codec 'nope'"):
        ShardingCodec([2], codecs=[{"name": "nope"}])
    with pytest.raises(CodecError):  # inner chain without an array->bytes codec
        make((4,), (2,), codecs=[GZIP])


@pytest.mark.parametrize(
    ("config", "error", "message"),
    [
        (
            {"codecs": [{"name": "nope"}]},
            UnknownCodecError,
            r"^sharding_indexed codecs: unknown codec 'nope'",
        ),
        (
            {"index_codecs": [{"name": "nope"}]},
            UnknownCodecError,
            r"^sharding_indexed index_codecs: unknown codec",
        ),
        ({"codecs": [GZIP]}, CodecError, r"^sharding_indexed codecs: .*array->bytes"),
        ({"index_codecs": [CRC]}, CodecError, r"^sharding_indexed index_codecs: .*array->bytes"),
        (
            {"index_codecs": [CRC, BYTES]},
            CodecError,
            r"^sharding_indexed index_codecs: .*'crc32c' must come after",
        ),
        (
            {"index_codecs": [BYTES, GZIP]},
            CodecError,
            r"^sharding_indexed index_codecs: .*no fixed encoded size",
        ),
        ({"codecs": BYTES}, CodecError, r"^sharding_indexed codecs: must be a list"),
        ({"index_codecs": "bytes"}, CodecError, r"^sharding_indexed index_codecs: must be a list"),
    ],
)
def test_bad_inner_or_index_chain_names_the_list_at_fault(config, error, message):
    with pytest.raises(error, match=message):
        make((4,), (2,), **config)
    # the same through an array: nothing is written
    store = MemoryStore()
    codecs = [{"name": "sharding_indexed", "configuration": {"chunk_shape": [2], **config}}]
    with pytest.raises(error, match=message):
        z3.create_array(store, path="a", shape=(8,), dtype="float64", chunks=(4,), codecs=codecs)
    assert list(store.list()) == []


# --- index format pure functions ----------------------------------------------------------------
def test_index_encode_decode_round_trip():
    chain = CodecChain.build([BYTES, CRC], index_spec((2, 3)))
    assert chain.encoded_size() == 2 * 3 * 16 + 4
    index = np.arange(12, dtype=np.uint64).reshape(2, 3, 2)
    index[1, 2] = EMPTY
    data = encode_index(index, chain)
    assert data[:-4] == index.astype("<u8").tobytes()
    assert struct.unpack("<I", data[-4:])[0] == crc32c.crc32c(data[:-4])
    np.testing.assert_array_equal(decode_index(data, chain), index)


def test_decode_index_rejects_wrong_size_half_empty_and_bad_checksum():
    chain = CodecChain.build([BYTES, CRC], index_spec((2,)))
    index = np.array([[0, 4], [4, 4]], dtype=np.uint64)
    data = encode_index(index, chain)
    with pytest.raises(CorruptionError, match="36 bytes"):
        decode_index(data[:-1], chain)
    bad = bytearray(data)
    bad[3] ^= 1
    with pytest.raises(ChecksumError):
        decode_index(bytes(bad), chain)
    half = np.array([[0, 4], [EMPTY, 4]], dtype=np.uint64)
    with pytest.raises(CorruptionError, match=r"inner chunk \(1,\).*half empty"):
        decode_index(encode_index(half, chain), chain)


def test_check_index_bounds():
    index = np.array([[10, 5], [EMPTY, EMPTY], [15, 5]], dtype=np.uint64)
    check_index(index, 10, 20)
    with pytest.raises(CorruptionError, match=r"inner chunk \(2,\).*offset=15, nbytes=5.*past the end"):
        check_index(index, 10, 19)
    with pytest.raises(CorruptionError, match=r"inner chunk \(0,\).*into the shard index"):
        check_index(index, 11, 20)
    with pytest.raises(CorruptionError, match=r"inner chunk \(2,\).*into the shard index"):
        check_index(index, 10, 19, size=19 + 68)  # an index at the end follows the chunk data
    huge = np.array([[2**63, 2**63 + 5]], dtype=np.uint64)  # offset + nbytes overflows uint64
    with pytest.raises(CorruptionError, match="past the end"):
        check_index(huge, 0, EMPTY)


def test_merge_ranges():
    spans, placement = merge_ranges([(100, 10), (0, 50), (50, 50), (300, 10)], max_gap=0)
    assert spans == [(0, 110), (300, 10)]
    assert placement == [(0, 100), (0, 0), (0, 50), (1, 0)]
    spans, placement = merge_ranges([(0, 10), (20, 10)], max_gap=10)
    assert spans == [(0, 30)] and placement == [(0, 0), (0, 20)]
    spans, _ = merge_ranges([(0, 10), (21, 10)], max_gap=10)
    assert spans == [(0, 10), (21, 10)]
    spans, placement = merge_ranges([(0, 10), (0, 10), (5, 2)], max_gap=0)  # overlaps fold in
    assert spans == [(0, 10)] and placement == [(0, 0), (0, 0), (0, 5)]
    assert merge_ranges([]) == ([], [])


def test_inner_indexer_touches_only_the_selected_inner_chunks():
    shape, chunks = (8, 8), (2, 2)
    got = list(inner_indexer((slice(1, 5), slice(0, 2)), shape, chunks))
    assert [q.chunk_coords for q in got] == [(0, 0), (1, 0), (2, 0)]
    assert [q.is_complete for q in got] == [False, True, False]
    # a stepped slice skips the inner chunks between its elements
    assert [q.chunk_coords for q in inner_indexer((slice(0, 8, 5), 7), shape, chunks)] == [(0, 3), (2, 3)]
    # np.ix_-shaped arrays (what the Array's orthogonal indexer hands over) are an outer product
    rows, cols = np.array([[0], [7]]), np.array([[1, 6]])
    assert sorted(q.chunk_coords for q in inner_indexer((rows, cols), shape, chunks)) == [
        (0, 0),
        (0, 3),
        (3, 0),
        (3, 3),
    ]
    # same-shape point arrays (vectorized) touch one chunk per point, not the box around them
    pts = (np.array([0, 7]), np.array([1, 6]))
    assert [q.chunk_coords for q in inner_indexer(pts, shape, chunks)] == [(0, 0), (3, 3)]


INNER_SELECTIONS = [
    (slice(None),),
    (slice(1, 7, 3), slice(None, None, -2)),
    (3, slice(2, None, 5)),
    (slice(5, 0, -1), 6),
    (np.array([[0], [7], [3]]), np.array([[6, 1]])),  # np.ix_ form
    (np.array([7, 0, 0]), slice(1, 6, 2)),  # one 1-d array (orthogonal), duplicates, unordered
    (2, np.array([5, 1])),
    (np.array([1, 7, 1, 4]), np.array([0, 7, 0, 3])),  # points (vectorized), a repeated one
    (np.array([[0, 7], [3, 3]]), np.array([[1, 1], [6, 2]])),  # 2-d points
    (np.array([1, 6]), slice(None), np.array([0, 2])),  # arrays apart around a slice: numpy moves them first
]


@pytest.mark.parametrize("sel", INNER_SELECTIONS, ids=range(len(INNER_SELECTIONS)))
@pytest.mark.parametrize("nested", [False, True], ids=["flat", "nested"])
@pytest.mark.parametrize("location", ["start", "end"])
def test_selection_forms_read_and_write_like_numpy(sel, nested, location):
    ndim = len(sel) if len(sel) == 3 else 2
    shape = (8, 8, 4)[:ndim]
    inner = [BYTES, ZSTD]
    if nested:  # inner chunks (4, 4[, 4]) that are themselves shards of (2, 2[, 2])
        inner = [{"name": "sharding_indexed", "configuration": {"chunk_shape": [2] * ndim, "codecs": inner}}]
    chunks = (4 if nested else 2,) * ndim
    codec, spec = make(shape, chunks, fill=-1, index_location=location, codecs=inner)
    shard = sample(shape)
    shard[:2, :2] = -1  # an empty inner chunk inside the selections
    data = codec.encode(shard, spec)
    expected = shard[sel]
    got = read_region(codec, CountingReader(data), sel, spec)
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
    out = np.full(expected.shape, 99.0)
    assert codec.decode_into(data, sel, spec, out) is None
    np.testing.assert_array_equal(out, expected)
    value = np.arange(expected.size, dtype="float64").reshape(expected.shape)
    merged = shard.copy()
    merged[sel] = value
    new = codec.encode_partial(data, sel, value, spec)
    assert new == codec.encode(merged, spec)  # byte for byte what a full re-encode gives
    np.testing.assert_array_equal(codec.decode(new, spec), merged)


@pytest.mark.parametrize("location", ["start", "end"])
def test_partial_read_one_inner_chunk_is_two_requests(location):
    codec, spec = make((16, 16), (4, 4), codecs=[BYTES, ZSTD], index_location=location)
    shard = sample((16, 16))
    data = codec.encode(shard, spec)
    reader = CountingReader(data)
    out = read_region(codec, reader, (slice(5, 7), slice(9, 12)), spec)
    np.testing.assert_array_equal(out, shard[5:7, 9:12])
    assert len(reader.calls) == 2
    expected_index_range = ByteRange(0, 16 * 16 + 4) if location == "start" else ByteRange.suffix(16 * 16 + 4)
    assert reader.calls[0] == [expected_index_range]
    off, nb = raw_index(data, 16, location, crc=True)[1 * 4 + 2]
    guard = 16 * 16 + 4 if location == "end" else 0  # an index at the end: read over it too
    assert reader.calls[1] == [ByteRange(int(off), int(nb) + guard)]


def test_partial_read_merges_adjacent_chunks_into_one_range():
    codec, spec = make((8, 8), (2, 2))  # uncompressed: 32 bytes per inner chunk, C order
    shard = sample((8, 8))
    reader = CountingReader(codec.encode(shard, spec))
    out = read_region(codec, reader, (slice(2, 4), slice(1, 8)), spec)  # chunks (1,0)..(1,3)
    np.testing.assert_array_equal(out, shard[2:4, 1:8])
    # one range, exactly the touched chunks, extended over the 16 x 16 + 4-byte index at the end
    assert reader.calls[1] == [ByteRange(4 * 32, 4 * 32 + 260)]


def test_partial_read_far_apart_chunks_one_call_two_ranges():
    codec, spec = make((2, 2048), (1, 1024))  # 8 KiB per inner chunk, more than MERGE_GAP
    assert 1024 * 8 > MERGE_GAP
    shard = sample((2, 2048))
    reader = CountingReader(codec.encode(shard, spec))
    # chunks (0, 0) and (1, 0); chunk (0, 1) lies between them in C order
    np.testing.assert_array_equal(
        read_region(codec, reader, (slice(0, 2), slice(0, 10)), spec), shard[:, :10]
    )
    assert len(reader.calls) == 2
    assert reader.calls[1] == [ByteRange(0, 8192), ByteRange(16384, 8192 + 68)]
    reader.calls.clear()
    np.testing.assert_array_equal(
        read_region(codec, reader, (slice(0, 2), slice(1000, 1030)), spec), shard[:, 1000:1030]
    )
    assert reader.calls[1] == [ByteRange(0, 4 * 8192 + 68)]  # all four, adjacent: one range


def test_partial_read_with_index_given_skips_the_index_request():
    codec, spec = make((3, 4), (1, 4))
    shard = sample((3, 4))
    reader = CountingReader(codec.encode(shard, spec))
    index = ShardView(codec.layout(spec), reader).read_index()
    assert index.shape == (3, 1, 2) and len(reader.calls) == 1
    reader.calls.clear()
    np.testing.assert_array_equal(read_region(codec, reader, (slice(1, 2),), spec, index=index), shard[1:2])
    assert reader.calls == [[ByteRange(32, 32 + 3 * 16 + 4)]]


def test_partial_read_of_missing_shard_is_none_after_one_request():
    codec, spec = make((4, 4), (2, 2))
    reader = CountingReader(None)
    assert read_region(codec, reader, (slice(0, 1), slice(0, 1)), spec) is None
    assert len(reader.calls) == 1


def test_partial_read_of_empty_inner_chunks_reads_only_the_index():
    codec, spec = make((4, 4), (2, 2), fill=-1)
    shard = np.full((4, 4), -1.0)
    shard[3, 3] = 5
    reader = CountingReader(codec.encode(shard, spec))
    np.testing.assert_array_equal(read_region(codec, reader, (slice(0, 2), slice(0, 4)), spec), shard[0:2])
    assert len(reader.calls) == 1


def test_partial_read_selection_errors_read_nothing():
    codec, spec = make((4, 4), (2, 2))
    reader = CountingReader(codec.encode(sample((4, 4)), spec))
    with pytest.raises(SelectionError, match="too many indices"):
        read_region(codec, reader, (slice(None),) * 3, spec)
    with pytest.raises(SelectionError, match="out of bounds for axis 1"):
        read_region(codec, reader, (np.array([0, 1]), np.array([0, 4])), spec)
    with pytest.raises(SelectionError, match="cannot be broadcast"):
        read_region(codec, reader, (np.array([0, 1, 2]), np.array([0, 1])), spec)
    assert reader.calls == []
    assert read_region(codec, reader, (slice(2, 2), slice(None)), spec).shape == (0, 4)
    assert read_region(codec, reader, (np.array([], dtype=int), np.array([], dtype=int)), spec).shape == (0,)
    assert reader.calls == []


def draw_selection(data, shape):
    """A numpy-ready shard selection of the kinds the Array hands to the codec: ints and slices
    of any step (basic), ``np.ix_``-shaped arrays (orthogonal) or same-length point arrays."""
    kind = data.draw(st.sampled_from(["basic", "orthogonal", "vectorized"]))
    if kind == "vectorized":
        n = data.draw(st.integers(1, 5))
        return tuple(
            np.array(data.draw(st.lists(st.integers(0, m - 1), min_size=n, max_size=n))) for m in shape
        )
    entries = []
    for m in shape:
        if kind == "orthogonal" and data.draw(st.booleans()):
            entries.append(np.array(data.draw(st.lists(st.integers(0, m - 1), min_size=1, max_size=4))))
        elif data.draw(st.booleans()):
            entries.append(data.draw(st.integers(0, m - 1)))
        else:
            step = data.draw(st.sampled_from([1, 2, 3, -1, -2]))
            entries.append(slice(data.draw(st.integers(0, m)), data.draw(st.integers(0, m)), step))
    if kind == "orthogonal" and sum(isinstance(e, np.ndarray) for e in entries) > 1:
        # what the orthogonal indexer produces: every non-int axis as an np.ix_ array
        lists = [np.arange(m)[e] if isinstance(e, slice) else e for e, m in zip(entries, shape, strict=True)]
        ix = iter(np.ix_(*[x for x in lists if not isinstance(x, int)]))
        entries = [x if isinstance(x, int) else next(ix) for x in lists]
    return tuple(entries)


@settings(max_examples=60, deadline=None)
@given(
    grid=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    chunk=st.lists(st.integers(1, 3), min_size=3, max_size=3),
    location=st.sampled_from(["start", "end"]),
    data=st.data(),
)
def test_partial_read_and_write_match_numpy(grid, chunk, location, data):
    chunk = chunk[: len(grid)]
    shape = tuple(g * c for g, c in zip(grid, chunk, strict=True))
    codec, spec = make(shape, chunk, dtype="int16", fill=0, index_location=location)
    size = int(np.prod(shape))
    shard = np.array(data.draw(st.lists(st.integers(0, 2), min_size=size, max_size=size)), dtype="int16")
    shard = shard.reshape(shape)
    encoded = codec.encode(shard, spec)
    assert (encoded is None) == (not shard.any())
    sel = draw_selection(data, shape)
    reader = CountingReader(encoded)
    got = read_region(codec, reader, sel, spec)
    if encoded is None:
        assert got is None or got.size == 0
    else:
        np.testing.assert_array_equal(got, shard[sel])
    assert len(reader.calls) <= 2 and all(len(c) >= 1 for c in reader.calls)
    # a partial write equals decode, numpy assignment, encode: byte for byte
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    value = rng.integers(0, 3, shard[sel].shape).astype("int16")  # repeated points: the last wins
    expected = shard.copy()
    expected[sel] = value
    new = codec.encode_partial(encoded, sel, value, spec)
    assert new == codec.encode(expected, spec)


# --- partial writes -----------------------------------------------------------------------------
def test_partial_write_keeps_untouched_inner_chunks_bytes_without_decoding_them():
    codec, spec = make((4, 4), (2, 2), codecs=[BYTES, GZIP, CRC])
    shard = sample((4, 4))
    data = codec.encode(shard, spec)
    index = raw_index(data, 4, "end", crc=True)
    off = int(index[3][0])  # inner chunk (1, 1): damage its bytes (checksum fails)
    bad = bytearray(data)
    bad[off + 3] ^= 0xFF
    with pytest.raises(ChecksumError, match=r"inner chunk \(1, 1\)"):
        codec.decode(bytes(bad), spec)
    new = codec.encode_partial(bytes(bad), (slice(0, 1), slice(0, 2)), np.array([[7.0, 8.0]]), spec)
    new_index = raw_index(new, 4, "end", crc=True)
    for i in (1, 2, 3):  # untouched: the very same stored bytes (the damaged ones too)
        o, n = (int(v) for v in index[i])
        o2, n2 = (int(v) for v in new_index[i])
        assert new[o2 : o2 + n2] == bytes(bad[o : o + n])
    shard[0, 0:2] = (7.0, 8.0)
    np.testing.assert_array_equal(
        read_region(codec, CountingReader(new), (slice(0, 2), slice(0, 2)), spec), shard[:2, :2]
    )


def test_partial_write_of_missing_shard_fill_and_write_empty_chunks():
    codec, spec = make((4, 4), (2, 2), fill=-1)
    new = codec.encode_partial(None, (1, 2), 5.0, spec)
    index = raw_index(new, 4, "end", crc=True)
    assert [int(i) for i in index[:, 0] != EMPTY] == [0, 1, 0, 0]
    expected = np.full((4, 4), -1.0)
    expected[1, 2] = 5.0
    np.testing.assert_array_equal(codec.decode(new, spec), expected)
    # writing the fill value back leaves nothing to store, unless empty chunks are written
    assert codec.encode_partial(new, (1, 2), -1.0, spec) is None
    kept = codec.encode_partial(new, (1, 2), -1.0, spec, write_empty_chunks=True)
    assert (raw_index(kept, 4, "end", crc=True)[:, 0] != EMPTY).all()
    assert kept == codec.encode(np.full((4, 4), -1.0), spec, write_empty_chunks=True)
    with pytest.raises(CodecError, match=r"shape \(3,\).*shape \(2,\)"):
        codec.encode_partial(new, (1, slice(0, 2)), np.zeros(3), spec)


def test_partial_write_of_a_corrupt_shard_raises():
    codec, spec = make((4, 4), (2, 2))
    data = codec.encode(sample((4, 4)), spec)
    with pytest.raises(CorruptionError, match="shorter than its 68-byte index"):
        codec.encode_partial(data[:50], (0, 0), 1.0, spec)
    bad = bytearray(data)
    bad[-10] ^= 1
    with pytest.raises(ChecksumError, match="shard index"):
        codec.encode_partial(bytes(bad), (0, 0), 1.0, spec)


# --- corruption ---------------------------------------------------------------------------------
def test_truncated_shard_shorter_than_index():
    codec, spec = make((4, 4), (2, 2))
    data = codec.encode(sample((4, 4)), spec)
    with pytest.raises(CorruptionError, match="shorter than its 68-byte index"):
        codec.decode(data[:60], spec)
    with pytest.raises(CorruptionError, match="shorter than its 68-byte index"):
        read_region(codec, CountingReader(data[:60]), (slice(0, 1), slice(0, 1)), spec)


def test_truncated_shard_index_at_start_points_past_end():
    codec, spec = make((4, 4), (2, 2), index_location="start")
    data = codec.encode(sample((4, 4)), spec)
    with pytest.raises(CorruptionError, match=r"inner chunk \(1, 1\).*past the end"):
        codec.decode(data[:-1], spec)
    reader = CountingReader(data[:-1])
    with pytest.raises(CorruptionError, match="past the end"):
        read_region(codec, reader, (slice(3, 4), slice(3, 4)), spec)


def test_truncated_shard_index_at_end_is_detected():
    codec, spec = make((4, 4), (2, 2))
    data = codec.encode(sample((4, 4)), spec)
    with pytest.raises(CorruptionError):  # the index is read from the wrong bytes: crc fails
        codec.decode(data[1:], spec)
    with pytest.raises(ChecksumError):
        codec.decode(data[:-1], spec)


def _with_index(codec, spec, data: bytes, index: np.ndarray) -> bytes:
    """``data`` with its (end) index replaced by ``index``, checksum recomputed."""
    layout = codec.layout(spec)
    return data[: len(data) - layout.index_size] + encode_index(index, layout.index)


def test_index_pointing_past_the_end():
    codec, spec = make((4, 4), (2, 2))
    data = codec.encode(sample((4, 4)), spec)
    index = raw_index(data, 4, "end", crc=True).reshape(2, 2, 2).copy()
    index[0, 1, 1] += 1000
    bad = _with_index(codec, spec, data, index)
    with pytest.raises(CorruptionError, match=r"inner chunk \(0, 1\) \(offset=32, nbytes=1032.*past the end"):
        codec.decode(bad, spec)
    with pytest.raises(CorruptionError, match="past the end"):
        read_region(codec, CountingReader(bad), (slice(0, 1), slice(2, 3)), spec)


def test_index_entry_inside_the_index_and_half_empty():
    codec, spec = make((4,), (2,), index_location="start")
    data = codec.encode(np.arange(4.0), spec)
    layout = codec.layout(spec)
    index = np.array([[0, 16], [52, 16]], dtype=np.uint64)  # chunk 0 would overlap the index
    bad = encode_index(index, layout.index) + data[layout.index_size :]
    with pytest.raises(CorruptionError, match=r"inner chunk \(0,\).*into the shard index"):
        codec.decode(bad, spec)
    index = np.array([[EMPTY, 16], [52, 16]], dtype=np.uint64)
    with pytest.raises(CorruptionError, match="half empty"):
        codec.decode(encode_index(index, layout.index) + data[layout.index_size :], spec)


@pytest.mark.parametrize("entry", [(128, 32), (100, 32), (128 + 60, 8)], ids=["index", "straddles", "inside"])
def test_partial_read_of_an_entry_pointing_into_the_end_index_is_corruption(entry):
    codec, spec = make((4, 4), (2, 2))
    shard = sample((4, 4))
    data = codec.encode(shard, spec)  # 4 x 32 bytes of chunk data, then the 68-byte index
    index = raw_index(data, 4, "end", crc=True).reshape(2, 2, 2).copy()
    index[1, 1] = entry
    bad = _with_index(codec, spec, data, index)
    with pytest.raises(CorruptionError, match=r"inner chunk \(1, 1\).*into the shard index"):
        codec.decode(bad, spec)
    for sel in [
        (slice(2, 4), slice(2, 4)),
        (3, 3),
        (np.array([0, 3]), np.array([0, 3])),
        (slice(None, None, 3),),
    ]:
        with pytest.raises(CorruptionError, match=r"inner chunk \(1, 1\).*\[0, 128\).*into the shard index"):
            read_region(codec, CountingReader(bad), sel, spec)
    # the sound inner chunks still read (only the ranges a read needs are checked)
    np.testing.assert_array_equal(read_region(codec, CountingReader(bad), (slice(0, 2),), spec), shard[:2])


def test_nested_shard_reaching_into_the_outer_end_index_is_corruption():
    nested = {"name": "sharding_indexed", "configuration": {"chunk_shape": [2], "codecs": [BYTES]}}
    codec, spec = make((8,), (4,), codecs=[nested])
    shard = sample((8,))
    data = codec.encode(shard, spec)
    index = raw_index(data, 2, "end", crc=True).copy()
    index[1, 0] += 10  # the second nested shard now ends 10 bytes into the outer index
    bad = _with_index(codec, spec, data, index.reshape(2, 2))
    with pytest.raises(CorruptionError, match=r"inner shard \(1,\).*inside the shard index"):
        read_region(codec, CountingReader(bad), (slice(4, 5),), spec)
    with pytest.raises(CorruptionError, match="into the shard index"):
        codec.decode(bad, spec)
    np.testing.assert_array_equal(read_region(codec, CountingReader(bad), (slice(0, 1),), spec), shard[:1])


def test_crc32c_mismatch_in_index_and_inner_chunk():
    codec, spec = make((4, 4), (2, 2), codecs=[BYTES, CRC])
    data = bytearray(codec.encode(sample((4, 4)), spec))
    bad_index = bytearray(data)
    bad_index[-10] ^= 0xFF
    with pytest.raises(ChecksumError, match="shard index"):
        codec.decode(bytes(bad_index), spec)
    with pytest.raises(ChecksumError):
        read_region(codec, CountingReader(bytes(bad_index)), (slice(0, 1), slice(0, 1)), spec)
    bad_chunk = bytearray(data)
    bad_chunk[36 + 5] ^= 0xFF  # inside inner chunk (0, 1): 36 bytes each (32 + crc)
    with pytest.raises(ChecksumError, match=r"inner chunk \(0, 1\) \(offset=36, nbytes=36\)"):
        codec.decode(bytes(bad_chunk), spec)
    with pytest.raises(ChecksumError, match=r"inner chunk \(0, 1\)"):
        read_region(codec, CountingReader(bytes(bad_chunk)), (slice(0, 1), slice(2, 3)), spec)


def test_garbage_inner_chunk_is_a_corruption_error():
    codec, spec = make((4,), (2,), codecs=[BYTES, GZIP])
    data = codec.encode(np.arange(4.0), spec)
    index = raw_index(data, 2, "end", crc=True)
    off, nb = (int(v) for v in index[0])
    bad = data[:off] + b"\x00" * nb + data[off + nb :]
    with pytest.raises(CorruptionError, match=r"inner chunk \(0,\)"):
        codec.decode(bad, spec)


def test_wrong_shard_shape_on_encode():
    codec, spec = make((4,), (2,))
    with pytest.raises(CodecError, match="shape"):
        codec.encode(np.zeros(6), spec)


# --- Array level --------------------------------------------------------------------------------
class CountingStore(Store):
    """Wraps a MemoryStore and records every read call (method, [(key, range), ...])."""

    def __init__(self, inner: MemoryStore | None = None) -> None:
        super().__init__()
        self.inner = inner if inner is not None else MemoryStore()
        self.reads: list[tuple[str, list[tuple[str, ByteRange | None]]]] = []

    def get(self, key, byte_range=None):
        self.reads.append(("get", [(key, byte_range)]))
        return self.inner.get(key, byte_range)

    def get_many(self, keys):
        self.reads.append(("get_many", [(k, None) for k in keys]))
        return self.inner.get_many(keys)

    def get_partial_values(self, key_ranges):
        self.reads.append(("get_partial_values", list(key_ranges)))
        return self.inner.get_partial_values(key_ranges)

    def exists(self, key):
        self.reads.append(("exists", [(key, None)]))
        return self.inner.exists(key)

    def set(self, key, value):
        self.inner.set(key, value)

    def set_many(self, items):
        self.inner.set_many(items)

    def erase(self, key):
        self.inner.erase(key)

    def erase_many(self, keys):
        self.inner.erase_many(keys)

    def list(self):
        return self.inner.list()

    def chunk_reads(self):
        """Read calls that touched chunk/shard keys (metadata reads left out)."""
        return [(m, kr) for m, kr in self.reads if any(not k.endswith("zarr.json") for k, _ in kr)]


def sharded(store, shape=(16, 16), chunks=(4, 4), shards=(8, 8), **kwargs):
    kwargs.setdefault("dtype", "float64")
    kwargs.setdefault("fill_value", 0)
    return z3.create_array(store, path="a", shape=shape, chunks=chunks, shards=shards, **kwargs)


def test_array_chunks_and_shards_properties():
    a = sharded(MemoryStore(), compressors=None)
    assert a.chunks == (4, 4) and a.shards == (8, 8) and a.storage_chunks == (8, 8)
    codec = a.codecs[0]
    assert codec["name"] == "sharding_indexed" and codec["configuration"]["chunk_shape"] == [4, 4]
    meta = json.loads(a.store.get("a/zarr.json"))
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [8, 8]


def test_array_refuses_non_multiple_shards_and_writes_nothing():
    store = MemoryStore()
    with pytest.raises(Zarr3Error) as e:
        sharded(store, chunks=(3, 4), shards=(8, 8))
    assert "(8, 8)" in str(e.value) and "(3, 4)" in str(e.value)
    assert list(store.list()) == []


def test_one_inner_chunk_read_is_one_index_read_plus_one_ranged_read():
    store = CountingStore()
    a = sharded(store, compressors=[ZSTD])
    data = sample((16, 16))
    a[...] = data
    store.reads.clear()
    with z3.settings.using(round_trip_bytes=0):  # the index first, not the whole (small) shard
        np.testing.assert_array_equal(a[9:11, 5:7], data[9:11, 5:7])  # inner chunk (0, 1) of shard (1, 0)
    reads = store.chunk_reads()
    assert [m for m, _ in reads] == ["get_partial_values", "get_partial_values"]
    assert reads[0][1] == [("a/c/1/0", ByteRange.suffix(4 * 16 + 4))]
    shard = store.inner.get("a/c/1/0")
    off, nb = raw_index(shard, 4, "end", crc=True)[1]
    assert off > 0
    assert reads[1][1] == [("a/c/1/0", ByteRange(int(off), int(nb) + 68))]  # + the index at the end


def test_read_of_adjacent_inner_chunks_is_one_merged_range():
    store = CountingStore()
    a = sharded(store, compressors=None)
    data = sample((16, 16))
    a[...] = data
    store.reads.clear()
    with z3.settings.using(round_trip_bytes=0):  # the index first, not the whole (small) shard
        np.testing.assert_array_equal(a[0:3, 0:7], data[0:3, 0:7])  # inner chunks (0,0), (0,1) of shard (0,0)
    reads = store.chunk_reads()
    assert len(reads) == 2
    assert reads[1][1] == [("a/c/0/0", ByteRange(0, 2 * 16 * 8 + 68))]


def test_whole_shard_read_is_one_request():
    store = CountingStore()
    a = sharded(store, compressors=[GZIP])
    data = sample((16, 16))
    a[...] = data
    store.reads.clear()
    np.testing.assert_array_equal(a[8:16, 0:8], data[8:16, 0:8])
    reads = store.chunk_reads()
    assert len(reads) == 1 and [k for k, _ in reads[0][1]] == ["a/c/1/0"]
    assert reads[0][1][0][1] is None


def test_write_covering_whole_shards_reads_nothing_partial_write_reads_the_shard():
    store = CountingStore()
    a = sharded(store, compressors=None)
    a[...] = 1.0
    store.reads.clear()
    a[0:8, 8:16] = sample((8, 8))
    assert store.chunk_reads() == []
    a[0:1, 0:1] = 5.0  # read-modify-write of shard (0, 0) only
    reads = store.chunk_reads()
    assert len(reads) == 1 and [k for k, _ in reads[0][1]] == ["a/c/0/0"]
    expected = np.ones((16, 16))
    expected[0:8, 8:16] = sample((8, 8))
    expected[0, 0] = 5.0
    np.testing.assert_array_equal(a[...], expected)


def test_fill_inner_chunks_dropped_and_empty_shard_deleted():
    store = MemoryStore()
    a = sharded(store, compressors=None, fill_value=-1)
    a[0:8, 0:8] = 3.0
    a[0:4, 0:4] = -1.0
    index = raw_index(store.get("a/c/0/0"), 4, "end", crc=True)
    assert index[0].tolist() == [EMPTY, EMPTY] and index[3][1] == 128
    a[0:8, 0:8] = -1.0
    assert store.get("a/c/0/0") is None
    np.testing.assert_array_equal(a[...], np.full((16, 16), -1.0))


SELECTIONS = [
    (slice(None),),
    (slice(2, 11), slice(1, 10)),
    (slice(None, None, 3), slice(1, None, 2)),
    (5, slice(None)),
    (-1, -2),
    (slice(10, 13), 0),
    (Ellipsis, slice(7, 11)),
]


@pytest.mark.parametrize("location", ["start", "end"])
def test_array_round_trip_every_selection_kind_with_overhanging_edge_shards(location):
    store = MemoryStore()
    shape, inner, outer = (13, 11), (2, 3), (4, 6)
    codecs = [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": list(inner),
                "codecs": [BYTES, GZIP],
                "index_codecs": [BYTES, CRC],
                "index_location": location,
            },
        }
    ]
    a = z3.create_array(
        store, path="a", shape=shape, dtype="int32", chunks=outer, codecs=codecs, fill_value=-7
    )
    assert a.chunks == inner and a.shards == outer
    ref = np.full(shape, -7, dtype="int32")
    np.testing.assert_array_equal(a[...], ref)
    rng = np.random.default_rng(1)
    for sel in SELECTIONS:
        value = rng.integers(0, 1000, ref[sel].shape).astype("int32")
        a[sel] = value
        ref[sel] = value
        np.testing.assert_array_equal(a[...], ref)
        np.testing.assert_array_equal(a[sel], ref[sel])
    rows, cols = np.array([0, 5, 12, 3]), np.array([10, 0, 4])
    np.testing.assert_array_equal(a.oindex[rows, cols], ref[np.ix_(rows, cols)])
    mask = rng.random(11) > 0.5
    np.testing.assert_array_equal(a.oindex[2:9, mask], ref[2:9][:, mask])
    a.oindex[[1, 12], [0, 10]] = np.array([[1, 2], [3, 4]], dtype="int32")
    ref[np.ix_([1, 12], [0, 10])] = [[1, 2], [3, 4]]
    pts = (np.array([0, 12, 7, 7]), np.array([10, 0, 3, 4]))
    np.testing.assert_array_equal(a.vindex[pts], ref[pts])
    a.vindex[pts] = np.array([-1, -2, -3, -4], dtype="int32")
    ref[pts] = [-1, -2, -3, -4]
    np.testing.assert_array_equal(a[...], ref)
    np.testing.assert_array_equal(z3.open_array(store, path="a")[...], ref)
    # edge shards hold full-size inner-chunk grids; the index always has all 4x2 entries
    shard = store.get("a/c/3/1")
    assert shard is not None
    raw_index(shard, 4, location, crc=True)


def test_array_nested_sharding_round_trip():
    store = CountingStore()
    nested = {"name": "sharding_indexed", "configuration": {"chunk_shape": [2, 2], "codecs": [BYTES, ZSTD]}}
    codecs = [{"name": "sharding_indexed", "configuration": {"chunk_shape": [4, 4], "codecs": [nested]}}]
    a = z3.create_array(store, path="a", shape=(10, 10), dtype="float32", chunks=(8, 8), codecs=codecs)
    assert a.chunks == (4, 4) and a.shards == (8, 8)
    data = sample((10, 10), "float32")
    a[...] = data
    np.testing.assert_array_equal(a[...], data)
    store.reads.clear()
    np.testing.assert_array_equal(a[5:6, 1:2], data[5:6, 1:2])
    assert len(store.chunk_reads()) == 3  # outer index, nested index, one nested chunk


def test_array_corruption_names_the_shard_key():
    store = MemoryStore()
    a = sharded(store, compressors=None)
    a[...] = sample((16, 16))
    good = store.get("a/c/0/1")
    bad = bytearray(good)
    bad[-8] ^= 0xFF  # inside the index
    store.set("a/c/0/1", bytes(bad))
    with pytest.raises(ChecksumError, match="a/c/0/1"):
        a[0:8, 8:16]
    with pytest.raises(ChecksumError, match="a/c/0/1"):
        a[0:1, 8:9]
    store.set("a/c/0/1", good[:10])
    with pytest.raises(CorruptionError, match=r"a/c/0/1.*shorter"):
        a[0:1, 8:9]
    with pytest.raises(CorruptionError, match=r"a/c/0/1.*shorter"):
        a[...]


FANCY_READS = {
    # name: (read, numpy reference, inner chunks touched in the one 128 x 128 shard of 32 x 32 chunks)
    "vindex": (
        lambda a: a.vindex[[0, 127, 70], [0, 127, 5]],
        np.s_[[0, 127, 70], [0, 127, 5]],
        [(0, 0), (2, 0), (3, 3)],
    ),
    "oindex": (
        lambda a: a.oindex[[127, 0], [0, 127]],
        np.ix_([127, 0], [0, 127]),
        [(0, 0), (0, 3), (3, 0), (3, 3)],
    ),
    "stepped": (
        lambda a: a[0:128:127, 127::-127],
        np.s_[0:128:127, 127::-127],
        [(0, 0), (0, 3), (3, 0), (3, 3)],
    ),
    "column": (lambda a: a[::64, 5], np.s_[::64, 5], [(0, 0), (2, 0)]),
}


@pytest.mark.parametrize("how", list(FANCY_READS))
def test_fancy_and_stepped_reads_in_one_big_shard_fetch_only_the_touched_inner_chunks(how):
    store = CountingStore()
    a = sharded(store, shape=(128, 128), chunks=(32, 32), shards=(128, 128), compressors=None)
    data = sample((128, 128))
    a[...] = data
    assert 32 * 32 * 8 > MERGE_GAP  # inner chunks are too big for their gaps to be merged
    read, ref, touched = FANCY_READS[how]
    store.reads.clear()
    with z3.settings.using(round_trip_bytes=0):  # the index first, not the whole (small) shard
        np.testing.assert_array_equal(read(a), data[ref])
    index = raw_index(store.inner.get("a/c/0/0"), 16, "end", crc=True)
    expected = [ByteRange(int(index[i * 4 + j][0]), int(index[i * 4 + j][1])) for i, j in sorted(touched)]
    index_size = 16 * 16 + 4
    # the highest range is extended over the index at the end, to catch entries pointing into it
    expected[-1] = ByteRange(expected[-1].offset, expected[-1].length + index_size)
    assert store.chunk_reads() == [
        ("get_partial_values", [("a/c/0/0", ByteRange.suffix(index_size))]),
        ("get_partial_values", [("a/c/0/0", r) for r in expected]),
    ]


def test_array_partial_read_of_an_entry_pointing_into_the_end_index_is_corruption():
    store = MemoryStore()
    a = sharded(store, shape=(4, 4), chunks=(2, 2), shards=(4, 4), compressors=None)
    data = np.arange(16.0).reshape(4, 4)
    a[...] = data
    raw = store.get("a/c/0/0")
    index = raw_index(raw, 4, "end", crc=True).reshape(2, 2, 2).copy()
    index[1, 1] = (128, 32)  # the index itself starts at byte 128
    codec, spec = make((4, 4), (2, 2))
    store.set("a/c/0/0", _with_index(codec, spec, raw, index))
    message = r"^shard 'a/c/0/0': .*inner chunk \(1, 1\).*into the shard index"
    for read in (lambda: a[2:4, 2:4], lambda: a[3, 3], lambda: a.vindex[[0, 3], [0, 3]], lambda: a[...]):
        with pytest.raises(CorruptionError, match=message):
            read()
    np.testing.assert_array_equal(a[0:2, :], data[0:2, :])


@pytest.mark.parametrize("shards", [(4,), None], ids=["sharded", "unsharded"])
def test_negative_zero_is_data_not_the_fill_value(shards):
    store = MemoryStore()
    a = z3.create_array(
        store, path="a", shape=(8,), chunks=(2,), shards=shards, dtype="float64", fill_value=0.0
    )
    a[:] = np.full(8, -0.0)
    assert np.signbit(a[:]).all()
    assert len([k for k in store.list() if "/c/" in k]) == (2 if shards else 4)
    a[3:4] = 0.0  # a partial write: the other -0.0 values stay
    assert np.signbit(z3.open_array(store, path="a")[:]).tolist() == [True] * 3 + [False] + [True] * 4
    b = z3.create_array(
        store, path="b", shape=(4,), chunks=(2,), shards=shards, dtype="float64", fill_value=-0.0
    )
    b[:] = 0.0
    assert not np.signbit(b[:]).any()
    b[:] = -0.0
    assert [k for k in store.list() if k.startswith("b/c/")] == []


@pytest.mark.parametrize("write_empty_chunks", [True, False])
def test_write_empty_chunks_on_a_sharded_array(write_empty_chunks):
    store = MemoryStore()
    # shards (1, *) overhang the array: their inner chunks (1, *) are outside it
    a = sharded(store, shape=(12, 16), compressors=None, write_empty_chunks=write_empty_chunks)
    a[...] = 0
    shards = sorted(k for k in store.list() if "/c/" in k)
    if write_empty_chunks:
        assert shards == ["a/c/0/0", "a/c/0/1", "a/c/1/0", "a/c/1/1"]
        for key in shards:  # every inner chunk is stored
            assert (raw_index(store.get(key), 4, "end", crc=True)[:, 0] != EMPTY).all()
    else:
        assert shards == []
    a[...] = 1
    a[0:8, 0:4] = 0  # a partial write of fill values into shard (0, 0)
    index = raw_index(store.get("a/c/0/0"), 4, "end", crc=True)
    assert (index[:, 0] != EMPTY).tolist() == (
        [True] * 4 if write_empty_chunks else [False, True, False, True]
    )
    a[0:8, 4:8] = 0  # the rest of it, partly
    if write_empty_chunks:
        assert (raw_index(store.get("a/c/0/0"), 4, "end", crc=True)[:, 0] != EMPTY).all()
    else:
        assert store.get("a/c/0/0") is None
    expected = np.ones((12, 16))
    expected[0:8, 0:8] = 0
    np.testing.assert_array_equal(a[...], expected)


def test_partial_write_reencodes_only_the_touched_inner_chunks():
    store = MemoryStore()
    a = sharded(store, compressors=[GZIP, CRC])
    data = sample((16, 16))
    a[...] = data
    shard = bytearray(store.get("a/c/0/0"))
    off = int(raw_index(bytes(shard), 4, "end", crc=True)[3][0])
    shard[off + 2] ^= 0xFF  # damage inner chunk (1, 1) of shard (0, 0): decoding it fails
    store.set("a/c/0/0", bytes(shard))
    with pytest.raises(ChecksumError, match=r"^shard 'a/c/0/0': .*inner chunk \(1, 1\)"):
        a[4:8, 4:8]
    a[0:1, 0:6] = 9.0  # touches inner chunks (0, 0) and (0, 1) only: the damaged one is not decoded
    data[0:1, 0:6] = 9.0
    np.testing.assert_array_equal(a[0:4, :], data[0:4, :])
    np.testing.assert_array_equal(a[4:8, 0:4], data[4:8, 0:4])
    with pytest.raises(ChecksumError, match=r"inner chunk \(1, 1\)"):  # kept as it was stored
        a[4:8, 4:8]
    before = {k: store.get(k) for k in store.list()}
    with pytest.raises(ChecksumError, match=r"^shard 'a/c/0/0': inner chunk \(1, 1\)"):
        a.vindex[[5, 2], [5, 9]] = [1.5, 2.5]  # a write into the damaged chunk decodes it: refused
    assert {k: store.get(k) for k in store.list()} == before  # shard (0, 1) was not written either


def test_failed_partial_write_of_a_corrupt_shard_writes_nothing():
    store = MemoryStore()
    a = sharded(store, compressors=None)
    a[...] = sample((16, 16))
    bad = bytearray(store.get("a/c/0/0"))
    bad[-10] ^= 1  # the index checksum fails
    store.set("a/c/0/0", bytes(bad))
    before = {k: store.get(k) for k in store.list()}
    with pytest.raises(ChecksumError, match=r"^shard 'a/c/0/0': shard index"):
        a[6:10, 6:10] = 1.0  # four shards, one of them corrupt
    assert {k: store.get(k) for k in store.list()} == before


@pytest.mark.parametrize("local", [False, True], ids=["memory", "local"])
def test_whole_shard_reads_decode_inner_chunks_straight_into_the_output(tmp_path, monkeypatch, local):
    store = z3.LocalStore(tmp_path) if local else MemoryStore()
    a = sharded(store, shape=(13, 16), compressors=[GZIP], fill_value=-1)  # edge shards along axis 0
    data = sample((13, 16))
    data[0:4, 0:4] = -1  # an empty inner chunk
    a[...] = data
    # whole shards selected in an order that cannot be a view of the output: the plain path
    np.testing.assert_array_equal(a.oindex[np.arange(7, -1, -1), :], data[7::-1, :])

    def full_decode(self, data, spec):
        raise AssertionError("a whole shard was decoded into a buffer of its own")

    monkeypatch.setattr(ShardingCodec, "decode", full_decode)
    np.testing.assert_array_equal(a[...], data)
    np.testing.assert_array_equal(a[8:13, 8:16], data[8:13, 8:16])
    np.testing.assert_array_equal(a[0:8, 0], data[0:8, 0])


def test_decode_errors_name_the_shard_or_the_chunk():
    store = MemoryStore()
    transpose = {"name": "transpose", "configuration": {"order": [1, 0]}}
    sharding = {"name": "sharding_indexed", "configuration": {"chunk_shape": [2, 2]}}
    a = z3.create_array(
        store, path="t", shape=(4, 4), dtype="float64", chunks=(4, 4), codecs=[transpose, sharding]
    )
    b = z3.create_array(store, path="u", shape=(4, 4), dtype="float64", chunks=(4, 4), compressors=None)
    a[...] = b[...] = sample((4, 4))
    store.set("t/c/0/0", store.get("t/c/0/0")[:40])
    store.set("u/c/0/0", store.get("u/c/0/0")[:40])
    with pytest.raises(CorruptionError, match=r"^shard 't/c/0/0': .*shorter"):
        a[...]
    with pytest.raises(CorruptionError, match=r"^chunk 'u/c/0/0': "):
        b[...]


# --- interop with zarr-python and tensorstore ---------------------------------------------------
INTEROP_CASES = [
    pytest.param("end", [BYTES, BLOSC], [BYTES, CRC], id="end-blosc-crc"),
    pytest.param("start", [BYTES, ZSTD], [BYTES, CRC], id="start-zstd-crc"),
    pytest.param("end", [BYTES, GZIP], [BYTES], id="end-gzip-nocrc"),
    pytest.param("start", [BYTES], [BYTES], id="start-raw-nocrc"),
]
SHAPE, SHARD, INNER = (13, 10), (8, 6), (4, 3)  # edge shards overhang the array


def sharding_codecs(location, inner, index):
    return [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": list(INNER),
                "codecs": inner,
                "index_codecs": index,
                "index_location": location,
            },
        }
    ]


def interop_data():
    data = sample(SHAPE)
    data[0:4, 0:3] = 0.5  # an inner chunk of fill values: left out of its shard
    data[8:13, 6:10] = 0.5  # a whole shard of fill values: not stored
    return data


def zarr_python_codec(location, inner, index):
    from zarr.codecs import ShardingCodec as ZarrSharding
    from zarr.registry import get_codec_class as zarr_codec

    def build(spec):
        cls = zarr_codec(spec["name"])
        return cls(**spec.get("configuration", {}))

    return ZarrSharding(
        chunk_shape=INNER,
        codecs=[build(c) for c in inner],
        index_codecs=[build(c) for c in index],
        index_location=location,
    )


@pytest.mark.interop
@pytest.mark.parametrize(("location", "inner", "index"), INTEROP_CASES)
def test_read_what_zarr_python_writes(tmp_path, location, inner, index):
    import zarr

    za = zarr.create_array(
        zarr.storage.LocalStore(tmp_path),
        name="a",
        shape=SHAPE,
        chunks=SHARD,
        dtype="float64",
        fill_value=0.5,
        serializer=zarr_python_codec(location, inner, index),
        compressors=None,
    )
    data = interop_data()
    za[...] = data
    assert not (tmp_path / "a" / "c" / "1" / "1").exists()
    a = z3.open_array(str(tmp_path), path="a")
    assert a.chunks == INNER and a.shards == SHARD
    np.testing.assert_array_equal(a[...], data)
    np.testing.assert_array_equal(a[5:7, 4:5], data[5:7, 4:5])
    np.testing.assert_array_equal(a.oindex[[0, 12], [1, 9]], data[np.ix_([0, 12], [1, 9])])


@pytest.mark.interop
@pytest.mark.parametrize(("location", "inner", "index"), INTEROP_CASES)
def test_zarr_python_reads_what_we_write(tmp_path, location, inner, index):
    import zarr

    a = z3.create_array(
        str(tmp_path),
        path="a",
        shape=SHAPE,
        dtype="float64",
        chunks=SHARD,
        fill_value=0.5,
        codecs=sharding_codecs(location, inner, index),
    )
    data = interop_data()
    a[...] = data
    a[1:2, 1:2] = 9.0  # a read-modify-write as well
    data[1:2, 1:2] = 9.0
    za = zarr.open_array(zarr.storage.LocalStore(tmp_path), path="a", mode="r")
    np.testing.assert_array_equal(za[...], data)
    np.testing.assert_array_equal(za[9:13, 2:8], data[9:13, 2:8])


def tensorstore_spec(path, location, inner, index):
    return {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(path)},
        "metadata": {
            "shape": list(SHAPE),
            "data_type": "float64",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(SHARD)}},
            "chunk_key_encoding": {"name": "default"},
            "fill_value": 0.5,
            "codecs": sharding_codecs(location, inner, index),
        },
    }


@pytest.mark.interop
@pytest.mark.parametrize(("location", "inner", "index"), INTEROP_CASES)
def test_read_what_tensorstore_writes(tmp_path, location, inner, index):
    import tensorstore as ts

    spec = tensorstore_spec(tmp_path / "a", location, inner, index)
    arr = ts.open(spec, create=True, delete_existing=True).result()
    data = interop_data()
    arr.write(data).result()
    a = z3.open_array(str(tmp_path), path="a")
    assert a.chunks == INNER and a.shards == SHARD
    np.testing.assert_array_equal(a[...], data)
    np.testing.assert_array_equal(a[11:13, 3:6], data[11:13, 3:6])
    np.testing.assert_array_equal(a.vindex[[0, 12, 6], [9, 0, 5]], data[[0, 12, 6], [9, 0, 5]])


@pytest.mark.interop
@pytest.mark.parametrize(("location", "inner", "index"), INTEROP_CASES)
def test_tensorstore_reads_what_we_write(tmp_path, location, inner, index):
    import tensorstore as ts

    a = z3.create_array(
        str(tmp_path),
        path="a",
        shape=SHAPE,
        dtype="float64",
        chunks=SHARD,
        fill_value=0.5,
        codecs=sharding_codecs(location, inner, index),
    )
    data = interop_data()
    a[...] = data
    spec = tensorstore_spec(tmp_path / "a", location, inner, index)
    del spec["metadata"]
    arr = ts.open(spec, open=True).result()
    np.testing.assert_array_equal(arr.read().result(), data)
    np.testing.assert_array_equal(arr[3:9, 2:7].read().result(), data[3:9, 2:7])


def test_importing_the_package_registers_sharding():
    # a fresh interpreter: this module's own import of codecs.sharding must not mask a missing one
    code = "import zarr3_backend.codecs as c; print(c.get_codec_class('sharding_indexed').__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ShardingCodec"
