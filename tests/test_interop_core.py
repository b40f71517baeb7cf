"""Interoperability: arrays we write open in zarr-python 3 and tensorstore, and theirs in ours."""

from __future__ import annotations

import numpy as np
import pytest
import tensorstore as ts
import zarr
from sample_data import DTYPES
from sample_data import sample as _sample

import zarr3_backend as z3
from zarr3_backend.core.dtypes import data_type_from_numpy

pytestmark = pytest.mark.interop

CODECS = {
    "none": [],
    "gzip": [{"name": "gzip", "configuration": {"level": 5}}],
    "zstd": [{"name": "zstd", "configuration": {"level": 3, "checksum": True}}],
    "blosc": [{"name": "blosc", "configuration": {"cname": "zstd", "clevel": 3, "shuffle": "bitshuffle"}}],
    "crc32c": [{"name": "crc32c"}],
}


def sample(dtype: str, shape=(11, 6)) -> np.ndarray:
    return _sample(dtype, shape, seed=42)


def ts_open(path, **kw):
    return ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}, **kw).result()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("codec", list(CODECS))
def test_ours_opens_in_zarr_python_and_tensorstore(tmp_path, dtype, codec):
    data = sample(dtype)
    transpose = [{"name": "transpose", "configuration": {"order": [1, 0]}}] if codec == "gzip" else []
    endian = "big" if codec == "crc32c" and np.dtype(dtype).itemsize > 1 else "little"
    chain = [*transpose, {"name": "bytes", "configuration": {"endian": endian}}, *CODECS[codec]]
    a = z3.create_array(
        tmp_path / "d.zarr",
        "x",
        shape=data.shape,
        dtype=dtype,
        chunks=(4, 4),
        codecs=chain,
        fill_value=1 if dtype != "bool" else True,
    )
    a[1:, :] = data[1:, :]  # row 0 stays the fill value (partly unwritten chunks)
    expected = data.copy()
    expected[0] = 1
    z = zarr.open_array(tmp_path / "d.zarr" / "x", mode="r")
    np.testing.assert_array_equal(z[...], expected)
    t = ts_open(tmp_path / "d.zarr" / "x")
    np.testing.assert_array_equal(t.read().result(), expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("compressor", ["default", "none", "blosc", "gzip"])
def test_zarr_python_written_opens_here(tmp_path, dtype, compressor):
    import numcodecs  # noqa: F401

    data = sample(dtype)
    comp = {
        "default": "auto",
        "none": None,
        "blosc": zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),
        "gzip": zarr.codecs.GzipCodec(level=3),
    }[compressor]
    z = zarr.create_array(
        tmp_path / "z.zarr", shape=data.shape, dtype=dtype, chunks=(4, 5), compressors=comp, fill_value=0
    )
    z[:8] = data[:8]
    expected = data.copy()
    expected[8:] = 0
    a = z3.open_array(tmp_path / "z.zarr")
    np.testing.assert_array_equal(a[...], expected)
    np.testing.assert_array_equal(a.oindex[[0, 9], [1, 3]], expected[np.ix_([0, 9], [1, 3])])


@pytest.mark.parametrize("dtype", ["int16", "uint32", "float32", "float64", "complex64"])
def test_tensorstore_written_opens_here(tmp_path, dtype):
    data = sample(dtype)
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(tmp_path / "t.zarr")},
        "metadata": {
            "shape": list(data.shape),
            "data_type": dtype,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [3, 4]}},
            "chunk_key_encoding": {"name": "v2", "configuration": {"separator": "."}},
            "codecs": [
                {"name": "transpose", "configuration": {"order": [1, 0]}},
                {"name": "bytes", "configuration": {"endian": "big"}},
                {
                    "name": "blosc",
                    "configuration": {
                        "cname": "lz4",
                        "clevel": 5,
                        "shuffle": "shuffle",
                        "typesize": np.dtype(dtype).itemsize,
                        "blocksize": 0,
                    },
                },
            ],
        },
        "create": True,
    }
    t = ts.open(spec).result()
    t[...] = data
    np.testing.assert_array_equal(z3.open_array(tmp_path / "t.zarr")[...], data)


def test_nan_fill_interop(tmp_path):
    a = z3.create_array(tmp_path / "n.zarr", shape=(5,), dtype="f4", chunks=(2,), fill_value=np.nan)
    a[0] = 1
    z = zarr.open_array(tmp_path / "n.zarr", mode="r")
    assert np.isnan(z.fill_value)
    np.testing.assert_array_equal(z[...], np.array([1, np.nan, np.nan, np.nan, np.nan], "f4"))


# ---- key encodings, fill values and 0-d arrays -------------------------------------------------
# Raw data types (r<N>) are checked only against our own writer and the spec (tests/test_dtypes.py
# and tests/test_array.py): neither oracle can read them here. zarr-python 3.1.6 refuses the data
# type ("No Zarr data type found that matches 'r16'") and tensorstore aborts the whole process when
# it creates an r16 array, and expects a base64 string instead of the spec's list of bytes as the
# fill value when it opens ours.
ENCODINGS = {
    "default/": {"name": "default", "configuration": {"separator": "/"}},
    "default.": {"name": "default", "configuration": {"separator": "."}},
    "v2.": {"name": "v2", "configuration": {"separator": "."}},
    "v2/": {"name": "v2", "configuration": {"separator": "/"}},
}
# (data type, fill value as we take it, whether zarr-python keeps its bits: it parses a hex
# float16 NaN into a plain float and loses the payload; tensorstore keeps the bits of all)
FILLS = [
    ("float32", "0x7fc00001", True),
    ("float32", "0xffc00000", True),
    ("float64", "0x7ff8000000000001", True),
    ("float16", "0x7e01", False),
    ("float32", -0.0, True),
    ("float16", -0.0, True),
    ("float64", "-Infinity", True),
    ("float32", "Infinity", True),
    ("complex64", ["0x7fc00001", -0.0], True),
    ("complex128", ["-Infinity", "NaN"], True),
    ("int8", -5, True),
    ("uint64", 2**64 - 1, True),
    ("bool", True, True),
]


def files_below(root) -> set[str]:
    """Relative paths of every chunk file under an array directory (zarr.json left out)."""
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != "zarr.json"}


@pytest.mark.parametrize("encoding", list(ENCODINGS))
@pytest.mark.parametrize(("dtype", "fill", "zarr_keeps_bits"), FILLS, ids=lambda v: str(v))
def test_our_fill_values_and_key_encodings_open_bit_exact(tmp_path, dtype, fill, zarr_keeps_bits, encoding):
    path = tmp_path / "f.zarr"
    a = z3.create_array(
        path,
        shape=(5, 7),
        dtype=dtype,
        chunks=(2, 3),
        fill_value=fill,
        chunk_key_encoding=ENCODINGS[encoding],
    )
    data = sample(dtype, (5, 7))
    a[1:4, 2:] = data[1:4, 2:]  # chunks in the first column and the last row stay unwritten
    expected = np.full((5, 7), a.fill_value, dtype=dtype)
    expected[1:4, 2:] = data[1:4, 2:]
    ours_fill = np.array(a.fill_value, dtype=dtype)

    t = ts_open(path)
    assert t.read().result().tobytes() == expected.tobytes()
    assert np.array(t.fill_value, dtype=dtype).tobytes() == ours_fill.tobytes()

    z = zarr.open_array(path, mode="r")
    got = z[...]
    if zarr_keeps_bits:
        assert got.tobytes() == expected.tobytes()
        assert np.array(z.fill_value, dtype=dtype).tobytes() == ours_fill.tobytes()
    else:  # the same values, NaN payloads aside
        np.testing.assert_array_equal(got, expected)
        assert np.isnan(z.fill_value)


@pytest.mark.parametrize("encoding", list(ENCODINGS))
@pytest.mark.parametrize("dtype", ["float32", "int16", "complex64", "bool", "uint64"])
def test_zarr_python_key_encodings_open_here_with_the_same_keys(tmp_path, dtype, encoding):
    """zarr-python's chunk files are where we look for them, and where we would write them."""
    enc = ENCODINGS[encoding]
    flat = {"name": enc["name"], **enc["configuration"]}  # zarr-python's spelling
    data = sample(dtype, (9, 5))
    z = zarr.create_array(
        tmp_path / "z.zarr",
        shape=(9, 5),
        dtype=dtype,
        chunks=(4, 3),
        chunk_key_encoding=flat,
        dimension_names=("y", "x"),
        attributes={"a": 1},
    )
    z[1:8, :4] = data[1:8, :4]
    a = z3.open_array(tmp_path / "z.zarr")
    assert a[...].tobytes() == z[...].tobytes()
    assert a.dimension_names == ("y", "x")
    assert a.attrs["a"] == 1
    ours = z3.create_array(
        tmp_path / "o.zarr", shape=(9, 5), dtype=dtype, chunks=(4, 3), chunk_key_encoding=enc
    )
    ours[1:8, :4] = data[1:8, :4]
    assert files_below(tmp_path / "o.zarr") == files_below(tmp_path / "z.zarr")
    assert len(files_below(tmp_path / "z.zarr")) == 4  # rows 1:8 touch 2 row chunks, columns :4 two


@pytest.mark.parametrize(
    ("dtype", "fill"),
    [
        ("float32", -0.0),
        ("float16", -0.0),
        ("float64", -np.inf),
        ("float32", np.inf),
        ("float64", np.nan),
        ("complex64", complex(-0.0, np.inf)),
        ("int32", -7),
    ],
    ids=str,
)
def test_zarr_python_fill_values_open_here_bit_exact(tmp_path, dtype, fill):
    z = zarr.create_array(tmp_path / "z.zarr", shape=(5,), dtype=dtype, chunks=(2,), fill_value=fill)
    z[0] = 1
    a = z3.open_array(tmp_path / "z.zarr")
    assert np.array(a.fill_value, dtype=dtype).tobytes() == np.array(fill, dtype=dtype).tobytes()
    expected = np.full(5, fill, dtype=dtype)
    expected[0] = 1
    assert a[...].tobytes() == expected.tobytes()
    assert a[...].tobytes() == z[...].tobytes()


@pytest.mark.parametrize("encoding", ["default/", "v2."])
@pytest.mark.parametrize("dtype", ["int32", "float64", "bool", "complex128", "uint8"])
def test_zero_d_arrays_both_ways(tmp_path, dtype, encoding):
    enc = ENCODINGS[encoding]
    value = sample(dtype, ())
    # ours -> zarr-python and tensorstore (a never-written 0-d array reads as its fill value)
    a = z3.create_array(tmp_path / "o.zarr", shape=(), dtype=dtype, chunk_key_encoding=enc)
    assert zarr.open_array(tmp_path / "o.zarr", mode="r")[()] == a.fill_value
    a[()] = value
    assert zarr.open_array(tmp_path / "o.zarr", mode="r")[()] == value
    assert ts_open(tmp_path / "o.zarr").read().result()[()] == value
    # zarr-python -> ours
    z = zarr.create_array(
        tmp_path / "z.zarr",
        shape=(),
        dtype=dtype,
        chunk_key_encoding={"name": enc["name"], **enc["configuration"]},
    )
    z[()] = value
    assert np.asarray(z3.open_array(tmp_path / "z.zarr")[...]).tobytes() == np.asarray(value).tobytes()
    assert files_below(tmp_path / "z.zarr") == files_below(tmp_path / "o.zarr")
    # tensorstore -> ours
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(tmp_path / "t.zarr")},
        "metadata": {
            "shape": [],
            "data_type": dtype,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": []}},
            "chunk_key_encoding": enc,
            "codecs": [{"name": "bytes", "configuration": {"endian": "big"}}]
            if np.dtype(dtype).itemsize > 1
            else [{"name": "bytes"}],
        },
        "create": True,
    }
    t = ts.open(spec).result()
    t[...] = value
    assert np.asarray(z3.open_array(tmp_path / "t.zarr")[...]).tobytes() == np.asarray(value).tobytes()


# ---- tensorstore-written chains and data types -------------------------------------------------
def ts_chain(name: str, dtype: str) -> list[dict]:
    """A codec chain tensorstore writes; ``bytes`` takes no endian for one-byte types."""
    endian = {"configuration": {"endian": "big" if name == "zstd" else "little"}}
    raw = {"name": "bytes", **(endian if np.dtype(dtype).itemsize > 1 else {})}
    return {
        "gzip": [raw, {"name": "gzip", "configuration": {"level": 6}}],
        "zstd": [raw, {"name": "zstd", "configuration": {"level": 3, "checksum": True}}],
        "crc32c": [{"name": "transpose", "configuration": {"order": [1, 0]}}, raw, {"name": "crc32c"}],
        "zstd+crc32c": [raw, {"name": "zstd", "configuration": {"level": -1}}, {"name": "crc32c"}],
    }[name]


@pytest.mark.parametrize("chain", ["gzip", "zstd", "crc32c", "zstd+crc32c"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_tensorstore_chains_open_here(tmp_path, dtype, chain):
    encoding = ENCODINGS["default." if DTYPES.index(dtype) % 2 else "default/"]
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(tmp_path / "t.zarr")},
        "metadata": {
            "shape": [9, 5],
            "data_type": dtype,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 3]}},
            "chunk_key_encoding": encoding,
            "codecs": ts_chain(chain, dtype),
        },
        "create": True,
    }
    t = ts.open(spec).result()
    data = sample(dtype, (9, 5))
    t[2:7, 1:4] = data[2:7, 1:4]  # edge chunks partly written, corner chunks never
    expected = t.read().result()
    a = z3.open_array(tmp_path / "t.zarr")
    assert a[...].tobytes() == expected.tobytes()
    assert a.oindex[[8, 2, 2], [4, 0]].tobytes() == expected[np.ix_([8, 2, 2], [4, 0])].tobytes()


@pytest.mark.parametrize(
    ("dtype", "fill"),
    [
        ("float32", "0x7fc00001"),
        ("float16", "0x7e01"),
        ("float64", "0x8000000000000000"),
        ("float32", "-Infinity"),
        ("complex128", ["NaN", "0x7ff8000000000001"]),
        ("uint16", 65535),
    ],
    ids=str,
)
def test_tensorstore_fill_values_open_here_bit_exact(tmp_path, dtype, fill):
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(tmp_path / "t.zarr")},
        "metadata": {
            "shape": [3],
            "data_type": dtype,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
            "chunk_key_encoding": {"name": "default"},
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "fill_value": fill,
        },
        "create": True,
    }
    t = ts.open(spec).result()
    t[0] = 1
    a = z3.open_array(tmp_path / "t.zarr")
    assert np.array(a.fill_value, dtype=dtype).tobytes() == np.array(t.fill_value, dtype=dtype).tobytes()
    assert a[...].tobytes() == t.read().result().tobytes()


# --- extension data types zarr-python 3.1 reads and writes (tensorstore has none of them) -------
GZIP = [{"name": "gzip", "configuration": {"level": 1}}]
TIME_DTYPES = ["datetime64[s]", "datetime64[10ms]", "datetime64[D]", "timedelta64[ns]", "timedelta64[7m]"]


def _time_sample(dtype: str) -> np.ndarray:
    values = np.array([0, 1, -5, 2**40, np.iinfo(np.int64).min, 12345], dtype=np.int64)
    return values.view(np.dtype(dtype).newbyteorder("<")).astype(dtype).reshape(2, 3)


@pytest.mark.parametrize("dtype", TIME_DTYPES)
@pytest.mark.parametrize("endian", ["little", "big"])
def test_zarr_python_time_arrays_open_here_exactly(tmp_path, dtype, endian):
    from zarr.codecs import BytesCodec, GzipCodec

    data = _time_sample(dtype)
    z = zarr.create_array(
        tmp_path / "t.zarr",
        shape=(3, 3),
        chunks=(2, 2),
        dtype=dtype,
        serializer=BytesCodec(endian=endian),
        compressors=[GzipCodec(level=1)],
    )
    z[:2] = data
    a = z3.open_array(tmp_path / "t.zarr", mode="r")
    assert a.dtype == np.dtype(dtype)
    got = a[...]
    assert got.view(np.int64).tolist() == z[...].view(np.int64).tolist()  # NaT fill included
    assert np.isnat(a.fill_value)


@pytest.mark.parametrize("dtype", TIME_DTYPES)
def test_our_time_arrays_open_in_zarr_python_exactly(tmp_path, dtype):
    data = _time_sample(dtype)
    fill = np.array(3, dtype=np.int64).view(dtype)[()]
    a = z3.create_array(tmp_path / "t.zarr", shape=(3, 3), dtype=dtype, chunks=(2, 2), fill_value=fill)
    a[:2] = data
    z = zarr.open_array(tmp_path / "t.zarr", mode="r")
    assert z.dtype == np.dtype(dtype)
    assert z.fill_value.view(np.int64) == 3
    expected = np.full((3, 3), fill, dtype=dtype)
    expected[:2] = data
    assert z[...].view(np.int64).tolist() == expected.view(np.int64).tolist()


STRUCTS = [
    np.dtype([("a", "<i4"), ("b", "u1"), ("c", "<f8")]),
    np.dtype([("p", [("x", "<f4"), ("y", "<f4")]), ("t", "<M8[s]"), ("s", "S3")]),
]


def _struct_sample(dtype: np.dtype) -> np.ndarray:
    raw = np.random.default_rng(7).integers(0, 256, size=5 * dtype.itemsize, dtype=np.uint8)
    out = raw.view(dtype).copy()
    for name in dtype.names:  # keep float fields finite so equality is meaningful
        if dtype[name].kind == "f":
            out[name] = np.arange(5)
    return out


@pytest.mark.parametrize("dtype", STRUCTS, ids=["flat", "nested"])
def test_zarr_python_structured_arrays_open_here_exactly(tmp_path, dtype):
    data = _struct_sample(dtype)
    from zarr.codecs import GzipCodec

    z = zarr.create_array(
        tmp_path / "s.zarr", shape=(6,), chunks=(4,), dtype=dtype, compressors=[GzipCodec()]
    )
    z[:5] = data
    a = z3.open_array(tmp_path / "s.zarr", mode="r")
    assert a.dtype == dtype
    assert a[...].tobytes() == z[...].tobytes()
    assert a.metadata.to_json()["data_type"]["name"] == "structured"


@pytest.mark.parametrize("dtype", STRUCTS, ids=["flat", "nested"])
def test_our_structured_arrays_open_in_zarr_python_exactly(tmp_path, dtype):
    """zarr-python 3.1 reads the legacy ``structured`` spelling (3.4 and the spec write ``struct``)."""
    data = _struct_sample(dtype)
    legacy = data_type_from_numpy(dtype).as_legacy()
    fill = data[0]
    a = z3.create_array(
        tmp_path / "s.zarr",
        shape=(6,),
        dtype=legacy,
        chunks=(4,),
        fill_value=fill,
        codecs=[{"name": "bytes", "configuration": {"endian": "little"}}, *GZIP],
    )
    a[1:5] = data[1:]
    z = zarr.open_array(tmp_path / "s.zarr", mode="r")
    expected = np.concatenate([data, data[:1]])
    assert z[...].tobytes() == expected.tobytes()
    assert z.fill_value.tobytes() == fill.tobytes()


# tensorstore reads and writes flat "struct" arrays one field at a time (no nested structs)
TS_STRUCT = {
    "name": "struct",
    "configuration": {
        "fields": [
            {"name": "x", "data_type": "int32"},
            {"name": "y", "data_type": "float32"},
            {"name": "f", "data_type": "uint8"},
        ]
    },
}


def test_tensorstore_struct_arrays_open_here_exactly(tmp_path):
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "t")}}
    meta = {
        "shape": [5],
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
        "data_type": TS_STRUCT,
        "fill_value": {"x": -1, "y": "NaN", "f": 7},
        "codecs": [{"name": "bytes", "configuration": {"endian": "big"}}],
    }
    for field, values in (("x", [1, 2, 3, 4]), ("y", [0.5, -1.5, 2.25, 8.0]), ("f", [9, 8, 7, 6])):
        t = ts.open({**spec, "field": field, "metadata": meta}, create=True, open=True).result()
        t[:4] = values
    a = z3.open_array(tmp_path / "t", mode="r")
    got = a[...]
    assert got.dtype == np.dtype([("x", "<i4"), ("y", "<f4"), ("f", "u1")])
    assert got["x"].tolist() == [1, 2, 3, 4, -1] and got["f"].tolist() == [9, 8, 7, 6, 7]
    assert got["y"][:4].tolist() == [0.5, -1.5, 2.25, 8.0] and np.isnan(got["y"][4])


@pytest.mark.parametrize("endian", ["little", "big"])
def test_our_struct_arrays_open_in_tensorstore_exactly(tmp_path, endian):
    dtype = np.dtype([("x", "<i4"), ("y", "<f4"), ("f", "u1")])
    data = np.array([(1, 0.5, 9), (2, -1.5, 8), (3, 2.25, 7)], dtype=dtype)
    a = z3.create_array(
        tmp_path / "o.zarr",
        shape=(4,),
        dtype=dtype,
        chunks=(2,),
        fill_value=np.array((-1, 4.0, 3), dtype=dtype)[()],
        codecs=[{"name": "bytes", "configuration": {"endian": endian}}, *GZIP],
    )
    a[:3] = data
    for field in dtype.names:
        t = ts.open(
            {
                "driver": "zarr3",
                "kvstore": {"driver": "file", "path": str(tmp_path / "o.zarr")},
                "field": field,
            }
        ).result()
        expected = np.concatenate([data[field], np.array([(-1, 4.0, 3)], dtype=dtype)[field]])
        np.testing.assert_array_equal(t.read().result(), expected)
