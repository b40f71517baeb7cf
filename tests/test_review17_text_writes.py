"""review17: what a write stores in a ``string`` (variable-length text) array does not depend on
the path the write takes, and text with no UTF-8 form is a typed error.

On main ``coerce_value`` keeps text values as Python objects. A write that leaves a chunk partly
old (or any write into an unsharded array) assembles the chunk in numpy's ``StringDType`` (the
data type's numpy dtype), which turns ``None`` into the text ``"None"`` and ``1`` into ``"1"``, as
zarr-python 3 does; but a write covering a whole shard hands the objects straight to numcodecs'
``vlen-utf8``, which stores ``None`` as ``""`` and refuses ``1``. The same values written to the
same array are stored differently by where the write starts. And a lone surrogate (what
``os.fsdecode`` makes of a file name that is not UTF-8, ``"bad\\udcff"``) raises an untyped
``UnicodeEncodeError`` from numpy or numcodecs, from ``Array.__setitem__`` and ``to_zarr``.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend import errors

VALUES = np.array([None, "a", 1, "b"], dtype=object)


@pytest.mark.parametrize("shards", [None, (4,)])
def test_the_same_values_are_stored_alike_whole_or_in_part(shards):
    a = z3.create_array(z3.MemoryStore(), shape=(4,), chunks=(2,), shards=shards, dtype="string")
    a[1:3] = VALUES[1:3]  # a part of the shard: assembled as text
    a[...] = VALUES  # the whole shard
    whole = a[...].tolist()
    a[...] = np.array(["q"] * 4, dtype=object)
    a[0:3] = VALUES[0:3]
    a[3:] = VALUES[3:]
    assert whole == a[...].tolist() == ["None", "a", "1", "b"]  # as zarr-python 3 stores them


BAD = np.array(["ok", "bad\udcff"], dtype=object)


@pytest.mark.parametrize("shards", [None, (4,)])
@pytest.mark.parametrize("zarr_format", [3, 2])
def test_a_lone_surrogate_is_a_typed_error_and_nothing_changes(zarr_format, shards):
    if zarr_format == 2 and shards:
        pytest.skip("v2 has no sharding")
    a = z3.create_array(
        z3.MemoryStore(), shape=(4,), chunks=(2,), shards=shards, dtype="string", zarr_format=zarr_format
    )
    a[...] = np.array(["a", "b", "c", "d"], dtype=object)
    for where in (slice(1, 3), slice(0, 2), slice(None)):
        with pytest.raises(errors.Zarr3Error, match="not valid Unicode"):
            a[where] = BAD if where != slice(None) else np.concatenate([BAD, BAD])
    assert a[...].tolist() == ["a", "b", "c", "d"]


@pytest.mark.parametrize("encoding", [{}, {"name": {"chunks": (1,), "shards": (2,)}}])
@pytest.mark.parametrize("chunks", [None, {"x": 1}])
def test_to_zarr_of_a_lone_surrogate_is_a_typed_error(tmp_path, chunks, encoding):
    ds = xr.Dataset({"name": ("x", BAD)})
    if chunks:
        ds = ds.chunk(chunks)
    with pytest.raises(errors.Zarr3Error, match="not valid Unicode"):
        z3.to_zarr(ds, tmp_path / "s.zarr", mode="w", encoding=encoding)
    assert not (tmp_path / "s.zarr").exists()
