"""The data types and codecs xarray stores need, in the forms zarr-python 3 writes them:
``string`` + ``vlen-utf8``, ``variable_length_bytes`` + ``vlen-bytes``, ``fixed_length_utf32``,
``null_terminated_bytes`` and the ``numcodecs.*`` codecs. zarr-python is the oracle both ways."""

from __future__ import annotations

import json
import warnings

import numcodecs
import numpy as np
import pytest
import xarray as xr
import zarr
import zarr.codecs.numcodecs as zarr_nc
from zarr.core.dtype import VariableLengthBytes

import zarr3_backend as z3
from zarr3_backend.codecs import ChunkSpec, CodecChain, codec_from_json, get_codec_class
from zarr3_backend.codecs.numcodecs_adapter import NUMCODECS_KINDS
from zarr3_backend.codecs.vlen import VLenBytesCodec, VLenUTF8Codec
from zarr3_backend.core.dtypes import as_data_type, parse_data_type
from zarr3_backend.core.dtypes_text import STRING_NUMPY
from zarr3_backend.errors import CodecError, CorruptionError, DataTypeError, UnknownCodecError

pytestmark = [
    pytest.mark.interop,
    pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning"),
    pytest.mark.filterwarnings("ignore::zarr.errors.ZarrUserWarning"),
    pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part"),
]

STRINGS = np.array(["Oslo", "", "Tromsø", "ünïcødé ✓", "a much longer station name"], dtype=object)
BYTES = np.array([b"\x00\xff", b"", b"abc", b"\x01" * 40, b"z"], dtype=object)


def text_cases():
    """(name, zarr-python dtype, our dtype, values, fill value) for each text/bytes type."""
    return [
        ("string", str, str, STRINGS.astype(STRING_NUMPY), "n/a"),
        (
            "vlen_bytes",
            VariableLengthBytes(),
            np.dtype(object, metadata={"element_type": bytes}),
            BYTES,
            b"\x07",
        ),
        ("fixed_utf32", "<U9", "<U9", np.array(["ab", "", "Tromsø", "ünïcødé", "123456789"]), "fill"),
        ("fixed_bytes", "S5", "S5", np.array([b"ab", b"", b"\x00x", b"abcde", b"q"]), b"zz"),
    ]


def _json(path, name):
    return json.loads((path / name / "zarr.json").read_text())


@pytest.mark.parametrize("case", text_cases(), ids=lambda c: c[0])
def test_text_types_written_by_zarr_python_read_back(tmp_path, case):
    name, zdtype, _, values, fill = case
    arr = zarr.create_array(
        tmp_path / "z.zarr", name=name, shape=(8,), chunks=(5,), dtype=zdtype, fill_value=fill
    )
    arr[:5] = values  # the second chunk is never written: it reads as the fill value
    ours = z3.open_array(tmp_path / "z.zarr", path=name)
    expected = arr[:]
    got = ours[:]
    assert got.dtype == expected.dtype
    assert got.tolist() == expected.tolist()
    assert ours.fill_value == arr.fill_value and type(ours.fill_value) is type(arr.fill_value)
    assert ours.metadata.data_type.to_json() == _json(tmp_path / "z.zarr", name)["data_type"]


@pytest.mark.parametrize("case", text_cases(), ids=lambda c: c[0])
def test_text_types_we_write_are_spelled_like_zarr_python(tmp_path, case):
    name, zdtype, dtype, values, fill = case
    zarr.create_array(
        tmp_path / "ref.zarr", name=name, shape=(8,), chunks=(5,), dtype=zdtype, fill_value=fill
    )
    serializer = {"name": "vlen-bytes"} if name == "vlen_bytes" else "auto"
    ours = z3.create_array(
        tmp_path / "ours.zarr",
        name,
        shape=(8,),
        chunks=(5,),
        dtype=dtype,
        fill_value=fill,
        serializer=serializer,
    )
    ours[:5] = values
    ref_doc, our_doc = _json(tmp_path / "ref.zarr", name), _json(tmp_path / "ours.zarr", name)
    for field in ("data_type", "fill_value"):
        assert our_doc[field] == ref_doc[field], field
    assert [c["name"] for c in our_doc["codecs"]] == [c["name"] for c in ref_doc["codecs"]]
    if name in ("string", "vlen_bytes"):
        assert our_doc["codecs"] == ref_doc["codecs"]
    back = zarr.open_array(tmp_path / "ours.zarr", path=name)[:]
    expected = ours[:]
    assert back.tolist() == expected.tolist()
    assert expected[:5].tolist() == list(values) and expected[5:].tolist() == [ours.fill_value] * 3


def test_default_fill_values_match_zarr_python(tmp_path):
    for name, zdtype, dtype, _, _ in text_cases():
        ref = zarr.create_array(tmp_path / "ref.zarr", name=name, shape=(2,), dtype=zdtype)
        serializer = {"name": "vlen-bytes"} if name == "vlen_bytes" else "auto"
        ours = z3.create_array(tmp_path / "ours.zarr", name, shape=(2,), dtype=dtype, serializer=serializer)
        assert ours.fill_value == ref.fill_value, name
        assert (
            _json(tmp_path / "ours.zarr", name)["fill_value"]
            == _json(tmp_path / "ref.zarr", name)["fill_value"]
        )


def test_numpy_dtypes_map_to_the_text_types():
    assert as_data_type(np.dtypes.StringDType()).name == "string"
    assert as_data_type(str).name == "string"
    assert as_data_type(np.dtype(object, metadata={"element_type": str})).name == "string"
    with pytest.raises(DataTypeError):  # plain object: strings or bytes? refused, like zarr-python
        as_data_type(np.dtype(object))
    assert as_data_type(np.dtype(object, metadata={"element_type": bytes})).name == "variable_length_bytes"
    assert as_data_type("<U3").to_json() == {
        "name": "fixed_length_utf32",
        "configuration": {"length_bytes": 12},
    }
    assert as_data_type("S3").to_json() == {
        "name": "null_terminated_bytes",
        "configuration": {"length_bytes": 3},
    }
    assert parse_data_type("bytes").numpy == np.dtype(object)  # older spelling still reads
    assert parse_data_type("string").numpy == STRING_NUMPY


@pytest.mark.parametrize(
    ("data_type", "match"),
    [
        (
            {"name": "fixed_length_utf32", "configuration": {"length_bytes": 6}},
            r"fixed_length_utf32.*multiple of 4",
        ),
        ({"name": "fixed_length_utf32", "configuration": {}}, "fixed_length_utf32.*length_bytes"),
        (
            {"name": "fixed_length_utf32", "configuration": {"length_bytes": 8, "x": 1}},
            r"fixed_length_utf32.*\['x'\]",
        ),
        ({"name": "null_terminated_bytes", "configuration": {"length_bytes": 0}}, "null_terminated_bytes"),
        ({"name": "string", "configuration": {"encoding": "latin1"}}, "'string' takes no configuration"),
    ],
)
def test_bad_text_data_types(data_type, match):
    with pytest.raises(DataTypeError, match=match):
        parse_data_type(data_type)


@pytest.mark.parametrize(
    ("dtype", "fill", "match"),
    [
        ("<U2", "abc", "longer than 2"),
        ("<U2", 5, "expected a string"),
        ("S2", "not base64!", "base64"),
        ("string", 1.5, "expected a string"),
        ("variable_length_bytes", "%%%", "base64"),
    ],
)
def test_bad_text_fill_values_write_nothing(tmp_path, dtype, fill, match):
    with pytest.raises(DataTypeError, match=match):
        z3.create_array(tmp_path / "bad.zarr", "v", shape=(2,), dtype=dtype, fill_value=fill)
    assert not (tmp_path / "bad.zarr" / "v").exists()


# ---- vlen codecs ------------------------------------------------------------------------------------
def test_vlen_codecs_round_trip_and_match_numcodecs_bytes():
    spec = ChunkSpec((2, 3), STRING_NUMPY, "")
    chunk = np.array([["a", "", "ø"], ["xyz", "✓", "long"]], dtype=STRING_NUMPY)
    codec = VLenUTF8Codec()
    data = codec.encode(chunk, spec)
    assert bytes(data) == bytes(numcodecs.VLenUTF8().encode(np.asarray(chunk, dtype=object).ravel()))
    out = codec.decode(data, spec)
    assert out.dtype == STRING_NUMPY and out.tolist() == np.asarray(chunk).tolist()
    bspec = ChunkSpec((5,), np.dtype(object), b"")
    bout = VLenBytesCodec().decode(VLenBytesCodec().encode(BYTES, bspec), bspec)
    assert bout.dtype == object and bout.tolist() == BYTES.tolist()
    assert codec.to_json() == {"name": "vlen-utf8", "configuration": {}}


def test_vlen_codec_errors_name_the_codec():
    spec = ChunkSpec((3,), STRING_NUMPY, "")
    data = VLenUTF8Codec().encode(np.array(["a", "b", "c"], dtype=STRING_NUMPY), spec)
    with pytest.raises(CorruptionError, match=r"'vlen-utf8'.*truncated|'vlen-utf8'.*cannot decode"):
        VLenUTF8Codec().decode(bytes(data)[:-1], spec)
    with pytest.raises(CorruptionError, match=r"'vlen-utf8'.*header says 3 items.*holds 4"):
        VLenUTF8Codec().decode(data, ChunkSpec((4,), STRING_NUMPY, ""))
    with pytest.raises(CodecError, match=r"'vlen-bytes'.*bytes"):
        VLenBytesCodec().encode(np.array(["text"], dtype=object), ChunkSpec((1,), np.dtype(object), b""))
    with pytest.raises(CodecError, match=r"'vlen-utf8'.*variable-length"):
        CodecChain.build([{"name": "vlen-utf8"}], ChunkSpec((3,), np.dtype("float32"), np.float32(0)))
    with pytest.raises(CodecError, match="vlen-utf8"):
        codec_from_json({"name": "vlen-utf8", "configuration": {"encoding": "latin1"}})


# ---- numcodecs.* codecs -------------------------------------------------------------------------------
def numcodecs_cases():
    """(id, dtype, filters, compressors) in zarr-python's classes."""
    nc = zarr_nc
    return [
        ("delta-zlib", "int32", [nc.Delta(dtype="int32")], [nc.Zlib(level=3)]),
        (
            "fixedscaleoffset-shuffle-crc32",
            "float64",
            [nc.FixedScaleOffset(offset=10, scale=100, dtype="float64", astype="int32")],
            [nc.Shuffle(), nc.CRC32()],
        ),
        ("bitround-lz4-adler32", "float32", [nc.BitRound(keepbits=6)], [nc.LZ4(), nc.Adler32()]),
        ("quantize-bz2-fletcher32", "float64", [nc.Quantize(digits=3)], [nc.BZ2(level=2), nc.Fletcher32()]),
        ("packbits-lzma-jenkins", "bool", [nc.PackBits()], [nc.LZMA(), nc.JenkinsLookup3()]),
        (
            "astype-gzip-crc32c",
            "float64",
            [nc.AsType(encode_dtype="float32", decode_dtype="float64")],
            [nc.GZip(level=1), nc.CRC32C()],
        ),
        (
            "delta-astype-blosc-zstd",
            "int64",
            [nc.Delta(dtype="int64", astype="int16")],
            [nc.Blosc(cname="lz4"), nc.Zstd(level=2)],
        ),
    ]


def _sample(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(5)
    if dtype == "bool":
        return rng.random((7, 9)) > 0.5
    return (rng.random((7, 9)) * 100).astype(dtype)


@pytest.mark.parametrize("case", numcodecs_cases(), ids=lambda c: c[0])
def test_numcodecs_codecs_interoperate_both_ways(tmp_path, case):
    _, dtype, filters, compressors = case
    data = _sample(dtype)
    ref = zarr.create_array(
        tmp_path / "z.zarr",
        name="ref",
        shape=data.shape,
        chunks=(3, 4),
        dtype=dtype,
        filters=filters,
        compressors=compressors,
        fill_value=0,
    )
    ref[:] = data
    expected = ref[:]  # lossy filters: what zarr-python itself reads back is the truth
    np.testing.assert_array_equal(z3.open_array(tmp_path / "z.zarr", path="ref")[:], expected)

    codecs = _json(tmp_path / "z.zarr", "ref")["codecs"]
    assert all(c["name"].startswith("numcodecs.") for c in codecs if c["name"] != "bytes")
    ours = z3.create_array(
        tmp_path / "z.zarr", "ours", shape=data.shape, chunks=(3, 4), dtype=dtype, codecs=codecs, fill_value=0
    )
    ours[:] = data
    assert _json(tmp_path / "z.zarr", "ours")["codecs"] == codecs
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "z.zarr", path="ours")[:], expected)
    np.testing.assert_array_equal(ours[:], expected)


def test_numcodecs_kinds_match_zarr_python():
    from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec

    from zarr3_backend.codecs import ArrayArrayCodec as AA
    from zarr3_backend.codecs import ArrayBytesCodec as AB
    from zarr3_backend.codecs import BytesBytesCodec as BB

    theirs = {}
    for obj in vars(zarr_nc).values():
        name = getattr(obj, "codec_name", None)
        if isinstance(obj, type) and isinstance(name, str) and name.startswith("numcodecs."):
            kind = next(
                k
                for k, base in (("aa", ArrayArrayCodec), ("ab", ArrayBytesCodec), ("bb", BytesBytesCodec))
                if issubclass(obj, base)
            )
            theirs[name] = kind
    ours = {f"numcodecs.{i}": k for i, k in NUMCODECS_KINDS.items()}
    assert ours == theirs
    bases = {"aa": AA, "ab": AB, "bb": BB}
    for name, kind in ours.items():
        assert issubclass(get_codec_class(name), bases[kind]), name


def test_numcodecs_evolve_fills_in_settings_like_zarr_python(tmp_path):
    ours = z3.create_array(
        tmp_path / "e.zarr",
        "v",
        shape=(10,),
        dtype="float64",
        filters=[{"name": "numcodecs.fixedscaleoffset", "configuration": {"offset": 0, "scale": 10}}],
        compressors=[{"name": "numcodecs.shuffle"}],
    )
    codecs = _json(tmp_path / "e.zarr", "v")["codecs"]
    assert np.dtype(codecs[0]["configuration"]["dtype"]) == np.dtype("float64")
    assert codecs[2]["configuration"]["elementsize"] == 8
    ours[:] = np.arange(10) / 10
    np.testing.assert_allclose(zarr.open_array(tmp_path / "e.zarr", path="v")[:], np.arange(10) / 10)


def test_numcodecs_filter_encodes_its_fill_value_once(monkeypatch):
    """Encoding a chunk runs the numcodecs filter on the chunk only; the fill value the filter
    stores (needed to resolve the next codec's spec) is computed once, not per chunk."""
    calls: list[int] = []
    original = numcodecs.FixedScaleOffset.encode

    def counting(self, buf):
        calls.append(np.asarray(buf).size)
        return original(self, buf)

    monkeypatch.setattr(numcodecs.FixedScaleOffset, "encode", counting)
    filt = {
        "name": "numcodecs.fixedscaleoffset",
        "configuration": {"offset": 10, "scale": 100, "astype": "<i4"},
    }
    spec = ChunkSpec((4,), np.dtype("float64"), np.float64(1.5))
    chain = CodecChain.build([filt, "bytes"], spec)
    assert chain.specs[1].dtype == np.dtype("int32")
    assert chain.specs[1].fill_value == np.int32(-850)  # (1.5 - 10) * 100, as numcodecs stores it
    codec = chain.array_array[0]
    assert codec.resolve(spec) == chain.specs[1]  # resolving again is served from the cache
    assert calls == [1]
    reference = numcodecs.FixedScaleOffset(offset=10, scale=100, dtype="<f8", astype="<i4")
    chunks = [np.arange(4, dtype="float64") + k for k in range(5)]
    calls.clear()
    for chunk in chunks:
        assert bytes(chain.encode(chunk)) == original(reference, chunk).astype("<i4").tobytes()
    assert calls == [4] * 5  # one filter call per chunk, no one-element fill encodes


def test_numcodecs_errors_name_the_codec(tmp_path):
    with pytest.raises(UnknownCodecError, match=r"numcodecs.nope"):
        codec_from_json({"name": "numcodecs.nope"})
    with pytest.raises(CodecError, match=r"'numcodecs.zlib'.*bogus"):
        codec_from_json({"name": "numcodecs.zlib", "configuration": {"bogus": 1}})
    with pytest.raises(CodecError, match=r"'numcodecs.delta'.*'id'"):
        codec_from_json({"name": "numcodecs.delta", "configuration": {"id": "zlib", "dtype": "i4"}})
    with pytest.raises(CodecError, match=r"'numcodecs.packbits' needs a bool"):
        CodecChain.build(
            [{"name": "numcodecs.packbits"}, "bytes"], ChunkSpec((4,), np.dtype("i1"), np.int8(0))
        )
    for optional in ("zfpy", "pcodec"):
        try:
            numcodecs.get_codec({"id": optional})
        except Exception:  # not installed here: a typed error naming it, not an ImportError
            with pytest.raises(CodecError, match=f"numcodecs.{optional}"):
                codec_from_json({"name": f"numcodecs.{optional}"})
    a = z3.create_array(
        tmp_path / "c.zarr",
        "v",
        shape=(4,),
        chunks=(4,),
        dtype="int32",
        compressors=[{"name": "numcodecs.zlib", "configuration": {"level": 1}}],
    )
    a[:] = [1, 2, 3, 4]
    (tmp_path / "c.zarr" / "v" / "c" / "0").write_bytes(b"not zlib at all")
    with pytest.raises(CorruptionError, match=r"numcodecs.zlib"):
        z3.open_array(tmp_path / "c.zarr", path="v")[:]


# ---- through xarray ----------------------------------------------------------------------------------
def test_xarray_text_variables_identical_to_zarr_engine(tmp_path):
    ds = xr.Dataset(
        {"obs": (("station",), np.arange(4.0))},
        coords={
            "station": ("station", np.array(["Oslo", "Bergen", "Tromsø", "Bodø"])),
            "code": ("station", np.array(["OSL", "BGO", "TOS", "BOO"], dtype=object)),
            "raw": ("station", np.array([b"\x00a", b"", b"bb", b"ccc"])),
            "flag": ("station", np.array([b"y", b"n", b"y", b"y"], dtype="S1")),
        },
    )
    ds.to_zarr(tmp_path / "t.zarr", zarr_format=3, consolidated=False)
    for kwargs in ({}, {"concat_characters": False}, {"decode_cf": False}):
        ref = xr.open_dataset(tmp_path / "t.zarr", engine="zarr", consolidated=False, **kwargs)
        got = xr.open_dataset(tmp_path / "t.zarr", engine="zarr3", **kwargs)
        xr.testing.assert_identical(ref, got)
        for name in ref.variables:
            assert ref[name].dtype == got[name].dtype, name
            assert ref[name].encoding.get("dtype") == got[name].encoding.get("dtype"), name


def test_xarray_numcodecs_filters_identical_to_zarr_engine(tmp_path):
    ds = xr.Dataset({"counts": (("t",), np.arange(100, dtype="int32") * 3)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(
            tmp_path / "n.zarr",
            zarr_format=3,
            consolidated=False,
            encoding={
                "counts": {
                    "filters": [zarr_nc.Delta(dtype="int32")],
                    "compressors": [zarr_nc.Zlib(level=4)],
                    "chunks": (30,),
                }
            },
        )
    ref = xr.open_dataset(tmp_path / "n.zarr", engine="zarr", consolidated=False)
    got = xr.open_dataset(tmp_path / "n.zarr", engine="zarr3")
    xr.testing.assert_identical(ref, got)
    assert list(got.counts.encoding["filters"]) == [f.to_dict() for f in ref.counts.encoding["filters"]]
    assert list(got.counts.encoding["compressors"]) == [
        c.to_dict() for c in ref.counts.encoding["compressors"]
    ]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_fixed_width_text_read_from_a_store_writes_back(tmp_path, zarr_format):
    """A fixed-width text variable read back carries its source's ``bytes`` serializer in its
    encoding; the copy is stored fixed-width too, as xarray's engine stores it."""
    ds = xr.Dataset(
        {
            "name": ("s", np.array(["ab", "cde"], dtype="<U3")),
            "raw": ("s", np.array([b"x", b"yz"], dtype="S2")),
        }
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(tmp_path / "src.zarr", zarr_format=zarr_format, consolidated=False)
    src = xr.open_dataset(tmp_path / "src.zarr", engine="zarr3")
    assert src["name"].encoding["serializer"]["name"] == "bytes"  # fixed_length_utf32 there
    z3.to_zarr(src, tmp_path / "copy.zarr", mode="w")
    copy = z3.open_group(tmp_path / "copy.zarr", mode="r")
    assert copy["name"].dtype == np.dtype("<U3") and copy["raw"].dtype == np.dtype("S2")
    xr.testing.assert_identical(xr.open_dataset(tmp_path / "copy.zarr", engine="zarr3").load(), ds)
    # a serializer the user asks for is still checked against the data type
    with pytest.raises(CodecError, match="vlen-bytes"):
        z3.to_zarr(
            ds, tmp_path / "bad.zarr", mode="w", encoding={"name": {"serializer": {"name": "vlen-bytes"}}}
        )
    assert not (tmp_path / "bad.zarr").exists()  # nothing written
