"""review17: a 0-d array whose codec is ``sharding_indexed`` (``chunk_shape: []``), as tensorstore
writes it, opens here.

The sharding spec asks ``chunk_shape`` to have as many entries as the shard has dimensions: none
for a 0-d array. tensorstore creates and reads such arrays and zarr-python 3 reads them; on main
``ShardingCodec`` refuses any empty ``chunk_shape`` ("must be a non-empty list"), so the array
cannot be opened (CodecError) and cannot be created here either.
"""

from __future__ import annotations

import numpy as np
import pytest

import zarr3_backend as z3

ts = pytest.importorskip("tensorstore")

BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
CRC = {"name": "crc32c"}


def _sharded(location: str) -> list[dict]:
    config = {"chunk_shape": [], "codecs": [BYTES], "index_codecs": [BYTES, CRC], "index_location": location}
    return [{"name": "sharding_indexed", "configuration": config}]


@pytest.mark.parametrize("location", ["end", "start"])
def test_a_tensorstore_0d_sharded_array_opens_here(tmp_path, location):
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(tmp_path / "t.zarr")},
        "metadata": {
            "shape": [],
            "data_type": "float64",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": []}},
            "codecs": _sharded(location),
            "fill_value": 1.5,
        },
        "create": True,
    }
    t = ts.open(spec).result()
    assert z3.open_array(tmp_path / "t.zarr")[()] == 1.5  # nothing stored yet: the fill value
    t[()] = 4.5
    a = z3.open_array(tmp_path / "t.zarr", mode="r+")
    assert a[()] == 4.5
    a[()] = -2.25  # and what we write back is what tensorstore reads
    assert ts.open({"driver": "zarr3", "kvstore": spec["kvstore"]}).result().read().result()[()] == -2.25


@pytest.mark.parametrize("location", ["end", "start"])
def test_our_0d_sharded_array_opens_in_tensorstore(tmp_path, location):
    a = z3.create_array(
        tmp_path / "o.zarr", shape=(), dtype="int32", chunks=(), codecs=_sharded(location), fill_value=-1
    )
    a[()] = 7
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "o.zarr")}}).result()
    assert t.read().result()[()] == 7
    a[()] = -1  # back to the fill value: the shard goes
    assert t.read().result()[()] == -1
    assert np.asarray(z3.open_array(tmp_path / "o.zarr")[...]).tolist() == -1
