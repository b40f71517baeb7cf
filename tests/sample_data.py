"""Random test data shared by the test modules (a plain module, imported as ``sample_data``)."""

from __future__ import annotations

import os

import numpy as np
import xarray as xr

#: The numeric core data types of the Zarr v3 spec, as numpy names.
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


def sample(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Random values covering the whole range of integer types; normal values for floats."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(shape) > 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    return rng.standard_normal(shape).astype(dt)


#: Shards of 16-element inner chunks with no checksum on the index or the chunks: only the store
#: can tell that the bytes it returns are the ones asked for.
UNGUARDED_SHARDS = [
    {
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": [16],
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        },
    }
]


def small_dataset(**variables) -> xr.Dataset:
    """A dataset of float64 variables along dimension ``t`` (name -> values): the races' data."""
    return xr.Dataset({n: ("t", np.asarray(v, dtype="f8")) for n, v in variables.items()})


def stored_values(store, group=None) -> dict[str, list[float]] | str:
    """What ``engine="zarr3"`` reads of ``group`` (name -> values), or the error's class name
    when the group is gone or refused."""
    try:
        got = xr.open_dataset(store, engine="zarr3", consolidated=False, group=group).load()
    except Exception as e:  # the group is gone
        return type(e).__name__
    return {name: got[name].values.tolist() for name in sorted(got.data_vars)}


def files_under(root) -> dict[str, bytes]:
    """Every file below directory ``root`` (relative path -> bytes): what a refused command must
    leave as it was."""
    out = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out
