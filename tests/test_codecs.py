"""The built-in codecs (bytes, transpose, gzip, blosc, zstd, crc32c), the chain and the registry."""

from __future__ import annotations

import gzip as stdlib_gzip
import json
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import crc32c as crc32c_pkg
import numcodecs
import numcodecs.blosc
import numcodecs.zstd
import numpy as np
import pytest
from sample_data import DTYPES as CORE_DTYPES

import zarr3_backend as z3
from zarr3_backend.codecs import (
    BloscCodec,
    BytesBytesCodec,
    BytesCodec,
    ChunkSpec,
    CodecChain,
    Crc32cCodec,
    GzipCodec,
    TransposeCodec,
    ZstdCodec,
    codec_from_json,
    get_codec_class,
    registered_codecs,
)
from zarr3_backend.codecs import registry as registry_module
from zarr3_backend.codecs.blosc import available_cnames
from zarr3_backend.errors import ChecksumError, CodecError, CorruptionError, UnknownCodecError

DTYPES = [*CORE_DTYPES, "V2"]  # V2: the raw type r16
SHAPES = [(), (0,), (7,), (3, 4), (2, 0, 3), (2, 3, 5)]
CHAINS = {
    "bytes-little": [{"name": "bytes", "configuration": {"endian": "little"}}],
    "bytes-big": [{"name": "bytes", "configuration": {"endian": "big"}}],
    "bytes-default": ["bytes"],
    "transpose": ["transpose-reversed", "bytes"],
    "gzip": ["bytes", {"name": "gzip", "configuration": {"level": 1}}],
    "blosc": ["bytes", "blosc"],
    "zstd": ["bytes", {"name": "zstd", "configuration": {"level": 3, "checksum": True}}],
    "crc32c": ["bytes", "crc32c"],
    "everything": [
        "transpose-reversed",
        {"name": "bytes", "configuration": {"endian": "big"}},
        "zstd",
        "crc32c",
    ],
}


def make_data(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    """Random values of ``dtype`` (raw bytes for void types, some NaN/inf for floats)."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    if dt.kind == "V":
        return np.frombuffer(rng.integers(0, 256, n * dt.itemsize, dtype=np.uint8).tobytes(), dt).reshape(
            shape
        )
    if dt.kind == "b":
        return (rng.integers(0, 2, n) == 1).reshape(shape)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, n, dtype=dt, endpoint=True).reshape(shape)
    values = rng.standard_normal(n) * 1000
    if dt.kind == "c":
        values = values + 1j * rng.standard_normal(n)
    out = values.astype(dt)
    if n > 2:
        out[0], out[1] = np.nan, np.inf
    return out.reshape(shape)


def spec_for(data: np.ndarray) -> ChunkSpec:
    return ChunkSpec(data.shape, data.dtype, np.zeros((), data.dtype)[()])


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-identical arrays of the same shape and dtype (NaN-safe, works for raw types)."""
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()
    )


def resolve_chain(names: list[Any], ndim: int) -> list[Any]:
    return [
        {"name": "transpose", "configuration": {"order": list(range(ndim))[::-1]}}
        if c == "transpose-reversed"
        else c
        for c in names
    ]


# --- round trips ---------------------------------------------------------------------------------
@pytest.mark.parametrize("chain_name", list(CHAINS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_every_codec_dtype_and_shape(chain_name: str, dtype: str) -> None:
    for shape in SHAPES:
        data = make_data(shape, dtype)
        chain = CodecChain.build(resolve_chain(CHAINS[chain_name], len(shape)), spec_for(data))
        encoded = chain.encode(data)
        assert isinstance(encoded, bytes | memoryview)
        decoded = chain.decode(encoded)
        assert same(decoded, data), (chain_name, dtype, shape)
        assert decoded.dtype.isnative
        size = chain.encoded_size()
        if size is not None:
            assert size == len(encoded)


@pytest.mark.parametrize(
    "codec", [GzipCodec(), BloscCodec(), ZstdCodec(), Crc32cCodec()], ids=lambda c: c.name
)
@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "ndarray"])
def test_bytes_codecs_decode_any_buffer_type(codec: BytesBytesCodec, kind: str) -> None:
    data = make_data((50,), "int32")
    spec = spec_for(data)
    codec = codec.evolve(spec)
    encoded = bytes(codec.encode(data.tobytes(), spec))
    given = {
        "bytes": encoded,
        "bytearray": bytearray(encoded),
        "memoryview": memoryview(encoded),
        "ndarray": np.frombuffer(encoded, np.uint8),
    }[kind]
    assert bytes(codec.decode(given, spec)) == data.tobytes()


# --- bytes ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "dtype", ["int16", "int32", "uint64", "float16", "float64", "complex64", "complex128"]
)
@pytest.mark.parametrize("endian, code", [("little", "<"), ("big", ">")])
def test_bytes_codec_writes_the_requested_byte_order(dtype: str, endian: str, code: str) -> None:
    data = make_data((3, 4), dtype)
    encoded = BytesCodec(endian).encode(data, spec_for(data))
    assert bytes(encoded) == data.astype(np.dtype(dtype).newbyteorder(code)).tobytes()


def test_bytes_codec_big_endian_int32_known_bytes() -> None:
    data = np.array([1, -2, 0x01020304], dtype="int32")
    assert bytes(BytesCodec("big").encode(data, spec_for(data))) == (
        b"\x00\x00\x00\x01" + b"\xff\xff\xff\xfe" + b"\x01\x02\x03\x04"
    )
    assert bytes(BytesCodec("little").encode(data, spec_for(data))) == (
        b"\x01\x00\x00\x00" + b"\xfe\xff\xff\xff" + b"\x04\x03\x02\x01"
    )


def test_bytes_codec_bool_is_one_byte_zero_or_one() -> None:
    data = np.array([True, False, True])
    assert bytes(BytesCodec().encode(data, spec_for(data))) == b"\x01\x00\x01"


def test_bytes_codec_decodes_big_endian_into_native_order() -> None:
    data = np.arange(6, dtype="float64").reshape(2, 3)
    decoded = BytesCodec("big").decode(data.astype(">f8").tobytes(), spec_for(data))
    assert decoded.dtype == np.dtype("float64") and decoded.dtype.isnative
    np.testing.assert_array_equal(decoded, data)


def test_bytes_codec_encode_is_zero_copy_for_contiguous_little_endian() -> None:
    data = np.arange(12, dtype="<i4").reshape(3, 4)
    encoded = BytesCodec("little").encode(data, spec_for(data))
    assert isinstance(encoded, memoryview)
    assert np.shares_memory(np.frombuffer(encoded, np.uint8), data)


def test_bytes_codec_encode_handles_strided_and_foreign_order_input() -> None:
    base = np.arange(40, dtype="int32").reshape(4, 10)
    strided = base[:, ::3]
    spec = ChunkSpec(strided.shape, np.dtype("int32"), 0)
    assert bytes(BytesCodec("little").encode(strided, spec)) == strided.astype("<i4").tobytes()
    foreign = strided.astype(">i4")
    assert bytes(BytesCodec("little").encode(foreign, spec)) == strided.astype("<i4").tobytes()
    assert bytes(BytesCodec("big").encode(foreign, spec)) == strided.astype(">i4").tobytes()


def test_bytes_codec_decode_accepts_every_buffer_type() -> None:
    data = make_data((4, 5), "uint16")
    raw = data.astype("<u2").tobytes()
    for given in (raw, bytearray(raw), memoryview(raw), np.frombuffer(raw, np.uint8)):
        assert same(BytesCodec("little").decode(given, spec_for(data)), data)


def test_bytes_codec_wrong_length_is_corruption_naming_sizes() -> None:
    spec = ChunkSpec((3, 4), np.dtype("int32"), 0)
    with pytest.raises(CorruptionError, match=r"47 bytes.*expected 48"):
        BytesCodec("little").decode(b"\x00" * 47, spec)


def test_bytes_codec_raw_type_is_endian_free() -> None:
    data = make_data((5,), "V2")
    spec = spec_for(data)
    codec = CodecChain.build(["bytes"], spec).array_bytes
    assert codec.to_json() == {"name": "bytes"}
    assert bytes(codec.encode(data, spec)) == data.tobytes()


def test_bytes_codec_evolve_makes_endian_explicit_for_multibyte_types() -> None:
    assert CodecChain.build(["bytes"], ChunkSpec((2,), np.dtype("int16"), 0)).to_json() == [
        {"name": "bytes", "configuration": {"endian": "little"}}
    ]
    assert CodecChain.build(["bytes"], ChunkSpec((2,), np.dtype("uint8"), 0)).to_json() == [{"name": "bytes"}]
    assert BytesCodec("big").evolve(ChunkSpec((2,), np.dtype("int16"), 0)) == BytesCodec("big")


def test_bytes_codec_validate_refuses_missing_endian_and_object_dtype() -> None:
    with pytest.raises(CodecError, match=r"'endian'.*int16"):
        BytesCodec().validate(ChunkSpec((2,), np.dtype("int16"), 0))
    BytesCodec().validate(ChunkSpec((2,), np.dtype("uint8"), 0))
    BytesCodec().validate(ChunkSpec((2,), np.dtype("bool"), False))
    with pytest.raises(CodecError, match=r"bytes.*object"):
        BytesCodec("little").validate(ChunkSpec((2,), np.dtype(object), None))


def test_bytes_codec_refuses_chunk_of_wrong_shape_or_dtype() -> None:
    spec = ChunkSpec((3, 4), np.dtype("int32"), 0)
    with pytest.raises(CodecError, match=r"\(4, 3\).*\(3, 4\)"):
        BytesCodec("little").encode(np.zeros((4, 3), "int32"), spec)
    with pytest.raises(CodecError, match=r"float64.*int32"):
        BytesCodec("little").encode(np.zeros((3, 4), "float64"), spec)


# --- transpose -----------------------------------------------------------------------------------
def test_transpose_follows_the_spec_formula() -> None:
    order = (2, 0, 1)
    a = make_data((2, 3, 4), "int32")
    spec = spec_for(a)
    codec = TransposeCodec(order)
    b = codec.encode(a, spec)
    assert b.shape == tuple(a.shape[order[i]] for i in range(3)) == codec.resolve(spec).shape
    for a_pos in np.ndindex(*a.shape):
        b_pos = tuple(a_pos[order[i]] for i in range(3))
        assert b[b_pos] == a[a_pos]
    assert np.shares_memory(b, a)  # a view: the bytes codec makes it contiguous
    assert same(codec.decode(np.ascontiguousarray(b), spec), a)


def test_transpose_then_bytes_stores_the_transposed_c_order() -> None:
    a = make_data((3, 5), "float32")
    chain = CodecChain.build(
        [{"name": "transpose", "configuration": {"order": [1, 0]}}, "bytes"], spec_for(a)
    )
    assert bytes(chain.encode(a)) == np.ascontiguousarray(a.T).astype("<f4").tobytes()
    assert chain.specs[-1].shape == (5, 3)


def test_transpose_validation_names_order_and_ndim() -> None:
    with pytest.raises(CodecError, match=r"\[1, 0\].*3"):
        CodecChain.build(
            [{"name": "transpose", "configuration": {"order": [1, 0]}}, "bytes"],
            ChunkSpec((2, 3, 4), np.dtype("int8"), 0),
        )
    with pytest.raises(CodecError, match=r"transpose.*\[0, 0\]"):
        TransposeCodec((0, 0))
    with pytest.raises(CodecError, match=r"transpose.*order"):
        codec_from_json({"name": "transpose", "configuration": {"order": "F"}})
    with pytest.raises(CodecError, match=r"transpose.*'order' is required"):
        codec_from_json({"name": "transpose"})
    with pytest.raises(CodecError, match=r"transpose.*order.*integer"):
        codec_from_json({"name": "transpose", "configuration": {"order": [0.0, 1.0]}})


# --- gzip ----------------------------------------------------------------------------------------
def test_gzip_writes_standard_deterministic_gzip() -> None:
    payload = make_data((1000,), "int16").tobytes()
    codec = GzipCodec(level=6)
    encoded = codec.encode(payload, spec_for(np.zeros(1)))
    assert encoded[:2] == b"\x1f\x8b"
    assert stdlib_gzip.decompress(encoded) == payload
    assert numcodecs.GZip().decode(encoded) == payload
    assert codec.encode(payload, spec_for(np.zeros(1))) == encoded


def test_gzip_decodes_numcodecs_and_multi_member_streams() -> None:
    spec = spec_for(np.zeros(1))
    a, b = b"first member " * 20, b"second member" * 30
    assert GzipCodec().decode(numcodecs.GZip(level=3).encode(a), spec) == a
    assert GzipCodec().decode(stdlib_gzip.compress(a) + stdlib_gzip.compress(b), spec) == a + b


# --- blosc ---------------------------------------------------------------------------------------
_BLOSC_HEADER_CODE = {"blosclz": 0, "lz4": 1, "lz4hc": 1, "snappy": 2, "zlib": 3, "zstd": 4}


@pytest.mark.parametrize("shuffle", ["noshuffle", "shuffle", "bitshuffle"])
@pytest.mark.parametrize("cname", ["lz4", "lz4hc", "blosclz", "zstd", "snappy", "zlib"])
def test_blosc_every_cname_and_shuffle(cname: str, shuffle: str) -> None:
    data = make_data((64, 33), "float32")
    spec = spec_for(data)
    chain = CodecChain.build(
        ["bytes", {"name": "blosc", "configuration": {"cname": cname, "shuffle": shuffle}}], spec
    )
    config = chain.to_json()[1]["configuration"]
    assert config == {"cname": cname, "clevel": 5, "shuffle": shuffle, "typesize": 4, "blocksize": 0}
    if cname not in available_cnames():  # this c-blosc build lacks it: a clear error, metadata still parses
        with pytest.raises(CodecError, match=f"'{cname}'"):
            chain.encode(data)
        return
    encoded = bytes(chain.encode(data))
    flags = encoded[2]
    assert flags >> 5 == _BLOSC_HEADER_CODE[cname]
    assert encoded[3] == 4  # typesize in the frame header
    if not flags & 0x2:  # not stored as a plain copy: the shuffle bits tell the filter used
        assert (bool(flags & 0x1), bool(flags & 0x4)) == (shuffle == "shuffle", shuffle == "bitshuffle")
    assert same(chain.decode(encoded), data)
    assert numcodecs.blosc.Blosc().decode(encoded) == data.tobytes()


def test_blosc_uses_the_metadata_typesize_for_shuffling() -> None:
    payload = np.arange(4096, dtype="<u4").tobytes()
    spec = ChunkSpec((len(payload),), np.dtype("uint8"), 0)  # the bytes alone say itemsize 1
    frames = {}
    for typesize in (1, 2, 4, 8):
        frames[typesize] = BloscCodec(cname="lz4", shuffle="shuffle", typesize=typesize).encode(payload, spec)
        assert frames[typesize][3] == typesize
        assert BloscCodec().decode(frames[typesize], spec) == payload
    reference = numcodecs.blosc.Blosc(cname="lz4", shuffle=numcodecs.blosc.SHUFFLE).encode(
        np.frombuffer(payload, "<u4")
    )
    assert frames[4] == reference
    assert len(frames[4]) < len(frames[1])  # shuffling by the right stride compresses integers better


def test_blosc_decodes_frames_of_any_cname_written_by_numcodecs() -> None:
    data = make_data((500,), "int32")
    spec = ChunkSpec((data.nbytes,), np.dtype("uint8"), 0)
    configured = BloscCodec(cname="lz4", shuffle="noshuffle", typesize=1)
    for cname in sorted(available_cnames()):
        frame = numcodecs.blosc.Blosc(cname=cname, clevel=5, shuffle=numcodecs.blosc.SHUFFLE).encode(data)
        assert frame[3] == 4
        assert configured.decode(frame, spec) == data.tobytes()


def test_blosc_evolve_fills_typesize_and_shuffle() -> None:
    assert BloscCodec().evolve(ChunkSpec((4,), np.dtype("uint8"), 0)) == BloscCodec(
        shuffle="bitshuffle", typesize=1
    )
    assert BloscCodec().evolve(ChunkSpec((4,), np.dtype("float64"), 0)) == BloscCodec(
        shuffle="shuffle", typesize=8
    )
    kept = BloscCodec(shuffle="noshuffle").evolve(ChunkSpec((4,), np.dtype("int16"), 0))
    assert kept.to_json()["configuration"] == {
        "cname": "zstd",
        "clevel": 5,
        "shuffle": "noshuffle",
        "typesize": 2,
        "blocksize": 0,
    }
    explicit = BloscCodec(shuffle="shuffle", typesize=4)
    assert explicit.evolve(ChunkSpec((4,), np.dtype("float64"), 0)) is explicit


def test_blosc_validate_requires_typesize_when_shuffling() -> None:
    with pytest.raises(CodecError, match=r"blosc.*'typesize'.*'shuffle'"):
        BloscCodec(shuffle="shuffle").validate(ChunkSpec((4,), np.dtype("int32"), 0))
    BloscCodec(shuffle="noshuffle").validate(ChunkSpec((4,), np.dtype("int32"), 0))


def test_blosc_damaged_frames_are_corruption() -> None:
    data = np.arange(1000, dtype="int32")  # compressible: the frame has a block table, not a copy
    spec = spec_for(data)
    codec = BloscCodec(cname="lz4").evolve(spec)
    frame = codec.encode(data.tobytes(), spec)
    with pytest.raises(CorruptionError, match=r"blosc.*truncated"):
        codec.decode(frame[:-10], spec)
    with pytest.raises(CorruptionError, match=r"blosc.*10 bytes"):
        codec.decode(frame[:10], spec)
    damaged = bytearray(frame)
    damaged[16:20] = (0x7FFFFFFF).to_bytes(4, "little")  # first block starts past the end
    with pytest.raises(CorruptionError, match=r"blosc.*invalid"):
        codec.decode(damaged, spec)


# --- zstd ----------------------------------------------------------------------------------------
def test_zstd_config_and_checksum_flag() -> None:
    payload = make_data((300,), "float64").tobytes()
    spec = spec_for(np.zeros(1))
    plain = ZstdCodec(level=5).encode(payload, spec)
    checked = ZstdCodec(level=5, checksum=True).encode(payload, spec)
    assert plain[:4] == checked[:4] == b"\x28\xb5\x2f\xfd"
    assert not plain[4] & 0x04 and checked[4] & 0x04  # Content_Checksum_flag of the frame header
    assert numcodecs.zstd.Zstd().decode(checked) == payload
    assert ZstdCodec().decode(numcodecs.zstd.Zstd(level=1).encode(payload), spec) == payload
    damaged = bytearray(checked)
    damaged[len(damaged) // 2] ^= 0xFF
    with pytest.raises(CorruptionError, match=r"zstd"):
        ZstdCodec().decode(damaged, spec)
    with pytest.raises(CorruptionError, match=r"zstd"):
        ZstdCodec().decode(checked[:-7], spec)


def _streaming_zstd_frame(payload: bytes, block: int = 1000) -> bytes:
    """A zstd frame as a streaming compressor writes it: no content size in the header.

    Built by hand from RFC 8878: magic, a frame header descriptor with no content-size field
    and no single-segment flag, a window descriptor, then raw blocks.
    """
    frame = bytearray(b"\x28\xb5\x2f\xfd")
    frame += bytes([0x00])  # FCS flag 0 + single segment 0 -> no Frame_Content_Size
    frame += bytes([(20 - 10) << 3])  # window 1 MiB
    pieces = [payload[i : i + block] for i in range(0, len(payload), block)] or [b""]
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        frame += (int(last) | (0 << 1) | (len(piece) << 3)).to_bytes(3, "little")  # Raw_Block
        frame += piece
    return bytes(frame)


def test_zstd_decodes_frames_without_content_size() -> None:
    payload = make_data((2000,), "int32").tobytes()
    frame = _streaming_zstd_frame(payload)
    assert frame[4] >> 6 == 0 and not frame[4] & 0x20  # really no content size
    assert ZstdCodec().decode(frame, spec_for(np.zeros(1))) == payload
    assert ZstdCodec().decode(_streaming_zstd_frame(b""), spec_for(np.zeros(1))) == b""


# --- crc32c --------------------------------------------------------------------------------------
def test_crc32c_appends_the_rfc3720_checksum_little_endian() -> None:
    spec = spec_for(np.zeros(1))
    encoded = Crc32cCodec().encode(b"123456789", spec)
    assert encoded == b"123456789" + (0xE3069283).to_bytes(4, "little")  # the CRC-32C check value
    payload = make_data((100,), "uint8").tobytes()
    assert Crc32cCodec().encode(payload, spec)[-4:] == crc32c_pkg.crc32c(payload).to_bytes(4, "little")
    assert Crc32cCodec().encoded_size(len(payload)) == len(payload) + 4


def test_crc32c_decode_returns_a_view_without_the_checksum() -> None:
    spec = spec_for(np.zeros(1))
    encoded = Crc32cCodec().encode(b"abcdef", spec)
    decoded = Crc32cCodec().decode(encoded, spec)
    assert isinstance(decoded, memoryview) and decoded.obj is encoded
    assert bytes(decoded) == b"abcdef"
    assert bytes(Crc32cCodec().decode(Crc32cCodec().encode(b"", spec), spec)) == b""


def test_crc32c_mismatch_is_checksum_error_with_both_values() -> None:
    spec = spec_for(np.zeros(1))
    encoded = bytearray(Crc32cCodec().encode(b"123456789", spec))
    encoded[0] ^= 0x01
    before = bytes(encoded)
    with pytest.raises(ChecksumError) as info:
        Crc32cCodec().decode(encoded, spec)
    actual = crc32c_pkg.crc32c(bytes(encoded[:-4]))
    assert "0xe3069283" in str(info.value) and f"{actual:#010x}" in str(info.value)
    assert isinstance(info.value, CorruptionError)
    assert bytes(encoded) == before  # a failed decode leaves the input alone


def test_crc32c_too_short_is_corruption() -> None:
    for short in (b"", b"abc"):
        with pytest.raises(CorruptionError, match=f"crc32c.*{len(short)} bytes"):
            Crc32cCodec().decode(short, spec_for(np.zeros(1)))


# --- chain ---------------------------------------------------------------------------------------
SPEC_2D = ChunkSpec((4, 5), np.dtype("int32"), 0)


@pytest.mark.parametrize(
    "codecs, message",
    [
        (["gzip", "bytes"], "'gzip' must come after"),
        (["bytes", "transpose-2d"], "'transpose' must come before"),
        (["bytes", "bytes"], "two array->bytes codecs"),
        (["transpose-2d", "crc32c"], "'crc32c' must come after"),
        ([], "exactly one array->bytes"),
        (["transpose-2d"], "exactly one array->bytes"),
    ],
)
def test_chain_ordering_errors(codecs: list[str], message: str) -> None:
    given = [
        {"name": "transpose", "configuration": {"order": [1, 0]}} if c == "transpose-2d" else c
        for c in codecs
    ]
    with pytest.raises(CodecError, match=message):
        CodecChain.build(given, SPEC_2D)


def test_chain_encoded_size_is_exact_only_for_fixed_size_chains() -> None:
    data = make_data(SPEC_2D.shape, "int32")
    fixed = CodecChain.build(["bytes", "crc32c", "crc32c"], SPEC_2D)
    assert fixed.encoded_size() == SPEC_2D.nbytes + 8 == len(fixed.encode(data))
    assert CodecChain.build(["bytes", "gzip", "crc32c"], SPEC_2D).encoded_size() is None


ALL_CODECS = [
    BytesCodec(),
    BytesCodec("little"),
    BytesCodec("big"),
    TransposeCodec((2, 0, 1)),
    GzipCodec(),
    GzipCodec(level=0),
    BloscCodec(),
    BloscCodec(cname="lz4hc", clevel=9, shuffle="bitshuffle", typesize=2, blocksize=4096),
    ZstdCodec(),
    ZstdCodec(level=-5, checksum=True),
    Crc32cCodec(),
]


@pytest.mark.parametrize("codec", ALL_CODECS, ids=repr)
def test_to_json_from_config_round_trip(codec: Any) -> None:
    doc = json.loads(json.dumps(codec.to_json()))
    assert doc["name"] == codec.name
    again = codec_from_json(doc)
    assert type(again) is type(codec) and again == codec and again.to_json() == doc
    assert hash(again) == hash(codec)


def test_unknown_codec_name_is_named() -> None:
    with pytest.raises(UnknownCodecError, match=r"'no-such-codec'"):
        codec_from_json({"name": "no-such-codec", "configuration": {}})
    with pytest.raises(UnknownCodecError, match=r"'lzw'"):
        CodecChain.build(["bytes", "lzw"], SPEC_2D)


@pytest.mark.parametrize(
    "doc, key",
    [
        ({"name": "bytes", "configuration": {"endian": "middle"}}, "endian"),
        ({"name": "bytes", "configuration": {"endianness": "little"}}, "endianness"),
        ({"name": "transpose", "configuration": {"order": [0, 1], "x": 1}}, "x"),
        ({"name": "gzip", "configuration": {"level": 10}}, "level"),
        ({"name": "gzip", "configuration": {"level": "5"}}, "level"),
        ({"name": "gzip", "configuration": {"level": True}}, "level"),
        ({"name": "gzip", "configuration": {"lvl": 5}}, "lvl"),
        ({"name": "blosc", "configuration": {"cname": "lzma"}}, "cname"),
        ({"name": "blosc", "configuration": {"clevel": -1}}, "clevel"),
        ({"name": "blosc", "configuration": {"shuffle": 1}}, "shuffle"),
        ({"name": "blosc", "configuration": {"typesize": 0}}, "typesize"),
        ({"name": "blosc", "configuration": {"blocksize": 1.5}}, "blocksize"),
        ({"name": "blosc", "configuration": {"nthreads": 4}}, "nthreads"),
        ({"name": "zstd", "configuration": {"level": 23}}, "level"),
        ({"name": "zstd", "configuration": {"checksum": "yes"}}, "checksum"),
        ({"name": "zstd", "configuration": {"checksum": 1}}, "checksum"),
        ({"name": "crc32c", "configuration": {"seed": 1}}, "seed"),
    ],
)
def test_bad_configuration_names_codec_and_key(doc: dict[str, Any], key: str) -> None:
    with pytest.raises(CodecError) as info:
        codec_from_json(doc)
    assert f"'{doc['name']}'" in str(info.value) and f"'{key}'" in str(info.value)


def test_configuration_must_be_an_object() -> None:
    with pytest.raises(CodecError, match=r"gzip"):
        codec_from_json({"name": "gzip", "configuration": [5]})
    with pytest.raises(CodecError, match=r"'bytes'"):
        BytesCodec.from_config("little")  # type: ignore[arg-type]


def test_builtin_codecs_are_registered_by_name() -> None:
    expected = {
        "bytes": BytesCodec,
        "transpose": TransposeCodec,
        "gzip": GzipCodec,
        "blosc": BloscCodec,
        "zstd": ZstdCodec,
        "crc32c": Crc32cCodec,
    }
    for name, cls in expected.items():
        assert get_codec_class(name) is cls
        assert registered_codecs()[name] is cls


# --- registry entry points -----------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class _PluginCodec(BytesBytesCodec):
    """A do-nothing bytes -> bytes codec that a fake plugin package provides."""

    name: ClassVar[str] = "test.plugin"

    def configuration(self) -> None:
        return None

    def encode(self, data: Any, spec: ChunkSpec) -> Any:
        return data

    def decode(self, data: Any, spec: ChunkSpec) -> Any:
        return data


class _FakeEntryPoint:
    def __init__(self, name: str, target: Any) -> None:
        self.name, self.value, self.group = name, f"fake_pkg:{name}", registry_module.ENTRY_POINT_GROUP
        self._target = target
        self.loads = 0

    def load(self) -> Any:
        self.loads += 1
        if isinstance(self._target, Exception):
            raise self._target
        return self._target


@pytest.fixture
def fake_plugins(monkeypatch: pytest.MonkeyPatch) -> dict[str, _FakeEntryPoint]:
    plugins = {
        "test.plugin": _FakeEntryPoint("test.plugin", _PluginCodec),
        "test.broken": _FakeEntryPoint("test.broken", ImportError("no module named fake_pkg")),
    }

    def fake_entry_points(**params: str) -> list[_FakeEntryPoint]:
        return [ep for ep in plugins.values() if all(getattr(ep, k) == v for k, v in params.items())]

    monkeypatch.setattr(registry_module, "entry_points", fake_entry_points)
    monkeypatch.setattr(registry_module, "_registry", dict(registry_module._registry))
    return plugins


def test_entry_point_codec_is_found_by_name(fake_plugins: dict[str, _FakeEntryPoint]) -> None:
    assert get_codec_class("test.plugin") is _PluginCodec
    chain = CodecChain.build(["bytes", {"name": "test.plugin"}], SPEC_2D)
    data = make_data(SPEC_2D.shape, "int32")
    assert same(chain.decode(chain.encode(data)), data)
    assert fake_plugins["test.plugin"].loads == 1  # loaded once, then registered
    assert fake_plugins["test.broken"].loads == 0  # an unrelated broken plugin is never imported


def test_broken_entry_point_fails_only_when_used(fake_plugins: dict[str, _FakeEntryPoint]) -> None:
    with pytest.raises(UnknownCodecError, match=r"'elsewhere'"):
        get_codec_class("elsewhere")
    with pytest.raises(CodecError, match=r"'test.broken'.*no module named fake_pkg"):
        get_codec_class("test.broken")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        codecs = registered_codecs()
    assert codecs["test.plugin"] is _PluginCodec and "test.broken" not in codecs
    assert any("test.broken" in str(w.message) for w in caught)


def test_entry_point_that_is_not_a_codec_is_refused(fake_plugins: dict[str, _FakeEntryPoint]) -> None:
    fake_plugins["test.notacodec"] = _FakeEntryPoint("test.notacodec", dict)
    with pytest.raises(CodecError, match=r"'test.notacodec'.*not a Codec"):
        get_codec_class("test.notacodec")


# --- interoperability with zarr-python (an oracle only) ------------------------------------------
INTEROP_CHAINS = [
    [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "zstd", "configuration": {"level": 0, "checksum": False}},
    ],
    [
        {"name": "transpose", "configuration": {"order": [1, 0]}},
        {"name": "bytes", "configuration": {"endian": "big"}},
        {
            "name": "blosc",
            "configuration": {
                "cname": "lz4",
                "clevel": 3,
                "shuffle": "shuffle",
                "typesize": 4,
                "blocksize": 0,
            },
        },
        {"name": "crc32c"},
    ],
    [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "gzip", "configuration": {"level": 5}},
        {"name": "crc32c"},
    ],
]


@pytest.mark.interop
@pytest.mark.parametrize("codecs", INTEROP_CHAINS, ids=["zstd", "transpose-big-blosc-crc", "gzip-crc"])
def test_chunks_interoperate_with_zarr_python(codecs: list[dict[str, Any]], tmp_path: Any) -> None:
    import zarr

    data = make_data((6, 5), "int32")
    chain = CodecChain.build(codecs, spec_for(data))
    assert chain.to_json() == codecs

    ours = tmp_path / "ours.zarr"
    (ours / "c" / "0").mkdir(parents=True)
    meta = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(data.shape),
        "data_type": "int32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(data.shape)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": codecs,
        "attributes": {},
    }
    (ours / "zarr.json").write_text(json.dumps(meta))
    (ours / "c" / "0" / "0").write_bytes(bytes(chain.encode(data)))
    np.testing.assert_array_equal(zarr.open_array(str(ours), mode="r")[...], data)

    theirs = tmp_path / "theirs.zarr"
    arr = zarr.create_array(
        str(theirs),
        shape=data.shape,
        chunks=data.shape,
        dtype="int32",
        filters=[c for c in codecs if c["name"] == "transpose"],
        serializer=next(c for c in codecs if c["name"] == "bytes"),
        compressors=[c for c in codecs if c["name"] not in ("transpose", "bytes")],
        fill_value=0,
    )
    arr[...] = data
    written = json.loads((theirs / "zarr.json").read_text())["codecs"]
    decoded = CodecChain.build(written, spec_for(data)).decode((theirs / "c" / "0" / "0").read_bytes())
    np.testing.assert_array_equal(decoded, data)


def test_one_chain_shared_by_many_threads() -> None:
    from zarr3_backend._threads import thread_map

    spec = ChunkSpec((64, 64), np.dtype("float64"), 0.0)
    arrays = [make_data(spec.shape, "float64", seed=i) for i in range(16)]
    for compressor in ("blosc", "zstd", "gzip"):
        chain = CodecChain.build(["bytes", compressor, "crc32c"], spec)
        encoded = thread_map(lambda a, chain=chain: bytes(chain.encode(a)), arrays, kind="cpu")
        decoded = thread_map(chain.decode, encoded, kind="cpu")
        assert all(same(d, a) for d, a in zip(decoded, arrays, strict=True)), compressor


def test_a_numcodecs_instance_is_taken_and_anything_else_refused():
    """``compressors=`` takes numcodecs codec instances (translated to v3 codecs); any other
    object is refused with CodecError naming it (an object with ``get_config`` and ``codec_id``
    attributes that is no numcodecs codec included)."""
    a = z3.create_array(z3.MemoryStore(), "x", shape=(4,), dtype="f8", compressors=[numcodecs.Zstd(level=3)])
    a[:] = np.arange(4.0)
    np.testing.assert_array_equal(a[:], np.arange(4.0))
    assert [type(c).__name__ for c in a.metadata.codecs] == ["BytesCodec", "ZstdCodec"]

    class LooksLikeOne:
        codec_id = "zstd"

        def get_config(self):
            return {"id": "zstd", "level": 3}

    for bad in (object(), LooksLikeOne()):
        with pytest.raises(CodecError, match="not a codec"):
            z3.create_array(z3.MemoryStore(), "x", shape=(4,), dtype="f8", compressors=[bad])
