"""Open -> modify -> write keeps the storage layout: ``encoding`` holds chunks, shards, the split
codec chain, the shard index settings and the chunk key encoding, in a form that xarray's own
``to_zarr`` and zarr3_backend's ``to_zarr`` both write back."""

from __future__ import annotations

import json
import pathlib
import warnings

import numpy as np
import pytest
import xarray as xr
import zarr

import zarr3_backend as z3
from zarr3_backend.errors import UnknownCodecError
from zarr3_backend.xarray.encoding import SHARD_INDEX_KEY, split_codecs

BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
GZIP = {"name": "gzip", "configuration": {"level": 3}}
CRC = {"name": "crc32c"}


def sharding(chunk_shape, codecs=(BYTES,), index_codecs=(BYTES,), index_location="start") -> dict:
    return {
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": list(chunk_shape),
            "codecs": list(codecs),
            "index_codecs": list(index_codecs),
            "index_location": index_location,
        },
    }


def transpose(*order: int) -> dict:
    return {"name": "transpose", "configuration": {"order": list(order)}}


# ---- split_codecs: pure ---------------------------------------------------------------------------
def test_split_unsharded_chain():
    delta = {"name": "numcodecs.delta", "configuration": {"dtype": "<i4"}}
    got = split_codecs([delta, BYTES, GZIP, CRC], (4, 5))
    assert got == {
        "chunks": (4, 5),
        "shards": None,
        SHARD_INDEX_KEY: None,
        "filters": (delta,),
        "serializer": BYTES,
        "compressors": (GZIP, CRC),
    }


def test_split_sharded_chain_keeps_the_index_settings():
    got = split_codecs([sharding((2, 5), codecs=(BYTES, GZIP), index_codecs=(BYTES, CRC))], (4, 10))
    assert got == {
        "chunks": (2, 5),
        "shards": (4, 10),
        SHARD_INDEX_KEY: {"index_location": "start", "index_codecs": (BYTES, CRC)},
        "filters": (),
        "serializer": BYTES,
        "compressors": (GZIP,),
    }


@pytest.mark.parametrize(
    "before, inner_transposed, inner_array_order",
    [
        ([transpose(1, 0, 2)], (3, 2, 5), (2, 3, 5)),
        # encoded axis i holds array axis order[i]: (2, 0, 1) puts array axis 2 first
        ([transpose(2, 0, 1)], (5, 2, 3), (2, 3, 5)),
        ([transpose(1, 0, 2), transpose(1, 0, 2)], (2, 3, 5), (2, 3, 5)),  # cancel out
        ([transpose(2, 0, 1), transpose(2, 0, 1)], (3, 5, 2), (2, 3, 5)),  # order applied twice
    ],
)
def test_split_transpose_before_sharding_moves_it_inside(before, inner_transposed, inner_array_order):
    got = split_codecs([*before, sharding(inner_transposed, codecs=(BYTES, GZIP))], (4, 6, 10))
    assert got["chunks"] == inner_array_order
    assert got["shards"] == (4, 6, 10)
    assert got["filters"] == tuple(before) and got["serializer"] == BYTES and got["compressors"] == (GZIP,)
    assert got[SHARD_INDEX_KEY] == {"index_location": "start", "index_codecs": (BYTES,)}
    assert "codecs" not in got


@pytest.mark.parametrize(
    "chain",
    [
        [sharding((2, 5)), CRC],  # a checksum over the whole shard
        [{"name": "numcodecs.delta", "configuration": {"dtype": "<i4"}}, sharding((2, 5))],
        [transpose(0, 1, 2), sharding((2, 5))],  # a malformed transpose is not reinterpreted
    ],
    ids=["codec-after", "filter-before", "bad-transpose"],
)
def test_split_other_sharded_chains_are_kept_whole(chain):
    got = split_codecs(chain, (4, 10))
    assert got == {"chunks": (4, 10), "shards": None, SHARD_INDEX_KEY: None, "codecs": tuple(chain)}


def test_split_unknown_codec_names_it():
    with pytest.raises(UnknownCodecError, match="mystery"):
        split_codecs([BYTES, {"name": "mystery"}], (4,))


# ---- end to end: both writers -----------------------------------------------------------------------
def _store_with(tmp_path, codecs, *, shape=(8, 12, 10), grid=(4, 6, 10), **kwargs) -> pathlib.Path:
    path = tmp_path / "src.zarr"
    g = z3.create_group(path)
    a = g.create_array(
        "v",
        shape=shape,
        dtype="float32",
        chunks=grid,
        codecs=codecs,
        fill_value=0,
        dimension_names=("t", "y", "x")[: len(shape)],
        **kwargs,
    )
    a[...] = np.arange(np.prod(shape), dtype="float32").reshape(shape)
    return path


def _write_both(ds: xr.Dataset, tmp_path) -> dict[str, pathlib.Path]:
    out = {"xarray": tmp_path / "xr.zarr", "zarr3": tmp_path / "z3.zarr"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python: consolidated metadata not in the spec
        ds.to_zarr(out["xarray"], zarr_format=3, consolidated=False)
    z3.to_zarr(ds, out["zarr3"], mode="w")
    return out


def _meta(path: pathlib.Path, name: str = "v") -> dict:
    return json.loads((path / name / "zarr.json").read_text())


def test_transpose_before_sharding_writes_again_with_both_writers(tmp_path):
    # encoded shard axes are (x, t, y); the inner chunk (5, 2, 3) is (t=2, y=3, x=5) in array order
    path = _store_with(tmp_path, [transpose(2, 0, 1), sharding((5, 2, 3), codecs=(BYTES, GZIP))])
    expected = z3.open_array(path, "v")[...]
    ds = xr.open_dataset(path, engine="zarr3")
    enc = ds.v.encoding
    assert enc["chunks"] == (2, 3, 5) and enc["shards"] == (4, 6, 10)
    assert enc["filters"] == (transpose(2, 0, 1),) and enc["compressors"] == (GZIP,)
    assert enc["preferred_chunks"] == {"t": 4, "y": 6, "x": 10}
    for writer, out in _write_both(ds, tmp_path).items():
        inner = _meta(out)["codecs"][0]
        assert inner["name"] == "sharding_indexed", writer
        assert inner["configuration"]["chunk_shape"] == [2, 3, 5], writer
        assert inner["configuration"]["codecs"][0] == transpose(2, 0, 1), writer
        assert _meta(out)["chunk_grid"]["configuration"]["chunk_shape"] == [4, 6, 10], writer
        np.testing.assert_array_equal(xr.open_dataset(out, engine="zarr3").v.values, expected)
        # zarr-python reads both copies (it cannot read the source: it checks the inner chunk
        # against the untransposed shard shape)
        np.testing.assert_array_equal(zarr.open_array(out / "v", mode="r")[...], expected)


def test_chain_that_cannot_be_split_is_kept_whole_by_our_writer(tmp_path):
    chain = [sharding((2, 3, 5), codecs=(BYTES,), index_location="end"), CRC]
    path = _store_with(tmp_path, chain)
    expected = z3.open_array(path, "v")[...]
    ds = xr.open_dataset(path, engine="zarr3")
    assert ds.v.encoding["chunks"] == (4, 6, 10) and ds.v.encoding["shards"] is None
    assert "compressors" not in ds.v.encoding and "serializer" not in ds.v.encoding
    out = _write_both(ds, tmp_path)
    source = _meta(path)
    for field in ("codecs", "chunk_grid", "chunk_key_encoding"):
        assert _meta(out["zarr3"])[field] == source[field], field
    # xarray's writer cannot take a whole chain: it writes its default codecs, values intact
    assert _meta(out["xarray"])["chunk_grid"] == source["chunk_grid"]
    for copy in out.values():
        np.testing.assert_array_equal(xr.open_dataset(copy, engine="zarr3").v.values, expected)


@pytest.mark.parametrize(
    "key_encoding, chunk_file",
    [
        ({"name": "default", "configuration": {"separator": "."}}, "c.1.0.0"),
        ({"name": "v2", "configuration": {"separator": "/"}}, "1/0/0"),
    ],
    ids=["default-dot", "v2-slash"],
)
def test_chunk_key_encoding_is_kept_by_both_writers(tmp_path, key_encoding, chunk_file):
    path = _store_with(tmp_path, [BYTES], chunk_key_encoding=key_encoding)
    ds = xr.open_dataset(path, engine="zarr3")
    assert ds.v.encoding["chunk_key_encoding"] == key_encoding
    assert ds.v.encoding[SHARD_INDEX_KEY] is None
    assert (path / "v" / chunk_file).is_file()
    for writer, out in _write_both(ds, tmp_path).items():
        assert _meta(out)["chunk_key_encoding"] == key_encoding, writer
        assert (out / "v" / chunk_file).is_file(), writer
        np.testing.assert_array_equal(xr.open_dataset(out, engine="zarr3").v.values, ds.v.values)


def test_shard_index_settings_are_in_the_encoding(tmp_path):
    path = _store_with(tmp_path, [sharding((2, 3, 5), codecs=(BYTES, GZIP), index_codecs=(BYTES,))])
    ds = xr.open_dataset(path, engine="zarr3")
    assert ds.v.encoding[SHARD_INDEX_KEY] == {"index_location": "start", "index_codecs": (BYTES,)}
    # xarray's writer ignores the key it does not know, as it does for any read-back encoding
    out = tmp_path / "xr.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(out, zarr_format=3, consolidated=False)
    np.testing.assert_array_equal(xr.open_dataset(out, engine="zarr3").v.values, ds.v.values)
