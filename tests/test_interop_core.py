"""Interoperability: arrays we write open in zarr-python 3 and tensorstore, and theirs in ours."""

from __future__ import annotations

import numpy as np
import pytest

import zarr3_backend as z3

zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")

pytestmark = pytest.mark.interop

DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]
CODECS = {
    "none": [],
    "gzip": [{"name": "gzip", "configuration": {"level": 5}}],
    "zstd": [{"name": "zstd", "configuration": {"level": 3, "checksum": True}}],
    "blosc": [{"name": "blosc", "configuration": {"cname": "zstd", "clevel": 3, "shuffle": "bitshuffle"}}],
    "crc32c": [{"name": "crc32c"}],
}


def sample(dtype: str, shape=(11, 6)) -> np.ndarray:
    rng = np.random.default_rng(42)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(shape) > 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    return rng.standard_normal(shape).astype(dt)


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
