"""What we write as Zarr v2 reads value for value in zarr-python 2.18 and 3.4 (issue 16): arrays
across dtypes, codecs, order and separators, and xarray datasets written and appended by
``to_zarr(zarr_format=2)``, through ``.zmetadata`` too."""

from __future__ import annotations

import numcodecs
import numpy as np
import pytest
import xarray as xr

import zarr3_backend as z3

pytestmark = [pytest.mark.slow, pytest.mark.interop]

rng = np.random.default_rng(7)

CASES = {
    "i2_blosc_C": dict(
        data=rng.integers(-500, 500, (7, 9)).astype("i2"), compressors=[numcodecs.Blosc("lz4")]
    ),
    "u8_zstd_F": dict(
        data=rng.integers(0, 2**40, (5, 6, 3)).astype("u8"), compressors=[numcodecs.Zstd(3)], order="F"
    ),
    "f4_gzip_slash": dict(
        data=rng.standard_normal((10, 4)).astype("f4"),
        compressors=[numcodecs.GZip(5)],
        dimension_separator="/",
    ),
    "f8_delta_nan_fill": dict(  # exact values: a float Delta rounds, and a NaN spreads in its chunk
        data=rng.integers(-100, 100, 9).astype("f8"),
        filters=[numcodecs.Delta(dtype="f8")],
        compressors=None,
        fill_value=np.nan,
    ),
    "f8_nan_values": dict(
        data=np.where(rng.random((9,)) < 0.3, np.nan, rng.standard_normal(9)),
        compressors=[numcodecs.Blosc()],
        fill_value=np.nan,
    ),
    "big_endian_f8": dict(data=rng.standard_normal((6, 5)).astype(">f8"), compressors=[numcodecs.Zlib(1)]),
    "c16": dict(data=(rng.standard_normal(8) + 1j * rng.standard_normal(8)).astype("c16"), compressors=None),
    "bool": dict(data=rng.random((4, 4)) < 0.5, compressors=[numcodecs.Blosc("zstd")]),
    "datetime": dict(data=np.arange("2020-01-01", "2020-01-08", dtype="M8[D]"), compressors=None),
    "fixed_bytes": dict(data=np.array([b"ab", b"cde", b""], dtype="S3"), compressors=None),
    "fixed_text": dict(data=np.array(["x", "yz", "ä"], dtype="U2"), compressors=None),
    "scale_offset": dict(
        data=np.round(rng.uniform(0, 10, (12,)), 2),
        filters=[numcodecs.FixedScaleOffset(offset=0, scale=100, dtype="f8", astype="i4")],
        compressors=[numcodecs.Blosc()],
    ),
}


def _write_arrays(root):
    g = z3.create_group(str(root), zarr_format=2)
    for name, case in CASES.items():
        case = dict(case)
        data = case.pop("data")
        chunks = tuple(max(1, n // 2) for n in data.shape)
        a = g.create_array(name, shape=data.shape, dtype=data.dtype, chunks=chunks, **case)
        a[...] = data
    z3.consolidate_metadata(str(root))
    return {name: case["data"] for name, case in CASES.items()}


def _same(got, want, where):
    got = np.asarray(got)
    assert got.shape == want.shape, where
    if want.dtype.kind in "fc":
        np.testing.assert_array_equal(got, want, err_msg=where)
    else:
        assert (got == want).all(), where


def test_arrays_we_write_as_v2_read_the_same_in_zarr_218_and_34(tmp_path, zarr218, zarr34):
    root = tmp_path / "ours.zarr"
    want = _write_arrays(root)
    for consolidated in (False, True):
        theirs = zarr218.read(root, consolidated=consolidated)
        assert set(theirs) == set(want)
        for name, values in want.items():
            _same(theirs[name], values, f"zarr 2.18 {name} consolidated={consolidated}")
    theirs = zarr34.read(root, sorted(want))
    for name, values in want.items():
        assert not isinstance(theirs[name], str), theirs[name]
        _same(theirs[name], values, f"zarr 3.4 {name}")
    info = zarr218.info(root)
    assert info["u8_zstd_F"]["order"] == "F" and info["f4_gzip_slash"]["dimension_separator"] == "/"


def test_datasets_we_write_and_append_as_v2_read_the_same_in_zarr_218(tmp_path, zarr218, zarr34):
    time = np.arange(10)
    ds = xr.Dataset(
        {"t2m": (("time", "y"), rng.standard_normal((10, 3)).astype("f4"), {"units": "K"})},
        coords={"time": time, "y": [10.0, 20.0, 30.0]},
    )
    path = str(tmp_path / "ds.zarr")
    z3.to_zarr(ds.isel(time=slice(0, 6)), path, zarr_format=2, encoding={"t2m": {"chunks": (4, 3)}})
    z3.to_zarr(ds.isel(time=slice(6, 10)), path, mode="a", append_dim="time")
    for consolidated in (False, True):
        theirs = zarr218.read(path, consolidated=consolidated)
        _same(theirs["t2m"], ds.t2m.values, "zarr 2.18 t2m")
        _same(theirs["time"], time, "zarr 2.18 time")
    assert zarr218.info(path)["t2m"]["attrs"]["_ARRAY_DIMENSIONS"] == ["time", "y"]
    _same(zarr34.read(path, ["t2m"])["t2m"], ds.t2m.values, "zarr 3.4 t2m")
