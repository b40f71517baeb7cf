"""A zarr-python store object (wrapped by ``ZarrPythonStore``) that fails or answers ranged
gets with the wrong number of bytes: the read fails typed naming the key, never decodes the
bytes as another part of the shard. Before, one that gave the whole value for a range read
wrong values silently, and a failure named no key ("reading 3 keys failed")."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

zarr_storage = pytest.importorskip("zarr.storage")
from sample_data import UNGUARDED_SHARDS  # noqa: E402
from zarr.abc.store import RangeByteRequest, SuffixByteRequest  # noqa: E402

import zarr3_backend as z3  # noqa: E402
from zarr3_backend.byte_range import ByteRange  # noqa: E402
from zarr3_backend.errors import StoreError  # noqa: E402
from zarr3_backend.stores import ZarrPythonStore  # noqa: E402
from zarr3_backend.stores.fsspec_errors import ResponseMismatchError  # noqa: E402
from zarr3_backend.stores.range_answers import range_length_problem  # noqa: E402

DATA = np.arange(256, dtype="i4")


class BrokenRanges(zarr_storage.MemoryStore):
    """A memory store whose ranged gets of chunk keys go wrong in the way ``fault`` names."""

    fault: str | None = None

    async def get(self, key, prototype, byte_range=None):
        if self.fault is None or "/c/" not in key or byte_range is None:
            return await super().get(key, prototype, byte_range)
        if self.fault == "raise":
            raise OSError("injected failure")
        value = await super().get(key, prototype, byte_range)
        data = value.to_bytes()
        if self.fault == "whole" and isinstance(byte_range, RangeByteRequest):
            return await super().get(key, prototype, None)  # the range ignored
        if self.fault == "longer":
            return prototype.buffer.from_bytes(data + b"\0" * 8)
        if self.fault == "shorter" and isinstance(byte_range, RangeByteRequest | SuffixByteRequest):
            return prototype.buffer.from_bytes(data[:-4])
        return value


@pytest.fixture
def broken() -> BrokenRanges:
    store = BrokenRanges()
    z3.create_array(
        ZarrPythonStore(store),
        path="sh",
        shape=DATA.shape,
        dtype=DATA.dtype,
        chunks=(128,),
        codecs=UNGUARDED_SHARDS,
        dimension_names=("x",),
    )[...] = DATA
    return store


def read(store: BrokenRanges, how: str) -> np.ndarray:
    """``DATA[20:40]`` read by its shard's index, then inner ranges (never the shard whole)."""
    wrapped = ZarrPythonStore(store, read_only=True, settings={"round_trip_bytes": 0})
    if how == "array":
        return z3.open_array(wrapped, path="sh", mode="r")[20:40]
    ds = xr.open_dataset(wrapped, engine="zarr3", chunks={} if how == "dask" else None)
    return ds["sh"][20:40].compute().values


@pytest.mark.parametrize("fault", ["longer", "shorter"])
@pytest.mark.parametrize("how", ["array", "xarray", "dask"])
def test_wrong_length_answers_to_ranged_gets_are_refused_naming_the_key(broken, fault, how):
    np.testing.assert_array_equal(read(broken, how), DATA[20:40])
    broken.fault = fault
    with pytest.raises(ResponseMismatchError, match=r"get 'sh/c/0': \d+ bytes given for"):
        read(broken, how)


@pytest.mark.parametrize("how", ["array", "xarray", "dask"])
def test_the_whole_value_given_for_a_range_is_cut_to_it(broken, how):
    """A store over a server that ignores Range gives the whole value for each range: its size
    says so, and the range is cut from it (review14 F3: it was refused, where FsspecStore and
    ObstoreStore cut such answers)."""
    broken.fault = "whole"
    np.testing.assert_array_equal(read(broken, how), DATA[20:40])


def test_a_failing_ranged_get_is_a_store_error_naming_the_key(broken):
    broken.fault = "raise"
    with pytest.raises(StoreError, match=r"get 'sh/c/0' failed: OSError: injected failure"):
        read(broken, "array")


def test_a_range_past_the_end_of_the_value_is_still_clipped(broken):
    """A short answer at the value's end is right (its size says so): ByteRange clips. zarr
    3.1's MemoryStore answers a suffix longer than the value with too few bytes (the last
    ``2 * size - n``): refused, where it was handed on as the value's bytes."""
    store = ZarrPythonStore(broken, read_only=True)
    whole = store.get("sh/c/0")
    assert store.get("sh/c/0", ByteRange(len(whole) - 10, 100)) == whole[-10:]
    assert store.get("sh/c/0", ByteRange.suffix(len(whole))) == whole
    with pytest.raises(ResponseMismatchError, match=rf"the last {len(whole) + 50} bytes of a value of"):
        store.get("sh/c/0", ByteRange.suffix(len(whole) + 50))


@pytest.mark.parametrize(
    "r, nbytes, size, wrong",
    [
        (ByteRange(10, 20), 20, None, False),
        (ByteRange(10, 20), 25, None, True),
        (ByteRange(10, 20), 15, 25, False),  # the value ends at 25
        (ByteRange(10, 20), 15, 100, True),
        (ByteRange.suffix(20), 20, None, False),
        (ByteRange.suffix(20), 21, None, True),
        (ByteRange.suffix(20), 5, 5, False),
        (ByteRange.suffix(20), 5, 50, True),
        (ByteRange(10), 90, 100, False),
        (ByteRange(10), 80, 100, True),
    ],
)
def test_range_length_rule(r, nbytes, size, wrong):
    assert (range_length_problem(r, nbytes, size) is not None) is wrong
