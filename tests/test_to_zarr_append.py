"""Appends: successive jobs grow the store along time, encoded exactly as the store already is,
validated in full before any array is resized."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.errors import ChunkAlignmentError, DataTypeError, EncodedRangeError, ShapeError
from zarr3_backend.stores import LocalStore, MemoryStore


def hourly(start, hours, nlat=4, nlon=6, seed=0):
    rng = np.random.default_rng(seed)
    return xr.Dataset(
        {
            "t2m": (("time", "lat", "lon"), (260 + 30 * rng.random((hours, nlat, nlon))).astype("float32")),
            "station_count": (("time",), rng.integers(0, 100, hours).astype("int32")),
            "orography": (("lat", "lon"), np.arange(nlat * nlon, dtype="float64").reshape(nlat, nlon)),
        },
        coords={
            "time": pd.date_range(start, periods=hours, freq="h"),
            "lat": np.linspace(-60, 60, nlat),
            "lon": np.arange(nlon) * 60.0,
        },
    )


def snapshot(store) -> dict:
    """Every key and value of a store, to show a refused call changed nothing."""
    return {k: store.get(k) for k in store.list()}


def test_three_hourly_jobs_into_an_hours_since_store_with_partly_filled_shards(tmp_path):
    store = LocalStore(tmp_path / "hourly.zarr")
    jobs = [
        hourly("2000-01-01", 20, seed=0),
        hourly("2000-01-01T20", 18, seed=1),
        hourly("2000-01-02T14", 20, seed=2),
    ]
    enc = {
        "t2m": {"chunks": (4, 4, 6), "shards": (8, 4, 6)},
        "time": {"units": "hours since 2000-01-01", "dtype": "int64"},
    }
    z3.to_zarr(jobs[0].chunk({"time": 8}), store, encoding=enc)
    # each append starts inside a partly filled shard (at 20, then 38): plain 8-hour dask chunks
    # would split a shard between two tasks; the error names the chunking that lines up
    for job, fix in zip(jobs[1:], [(4, 8, 6), (2, 8, 8, 2)], strict=True):
        before = snapshot(store)
        with pytest.raises(ChunkAlignmentError, match=rf"\.chunk\(\{{'time': {re.escape(str(fix))}\}}\)"):
            z3.to_zarr(job.chunk({"time": 8}), store, append_dim="time")
        assert snapshot(store) == before  # refused before any write or resize
        z3.to_zarr(job.chunk({"time": fix}), store, append_dim="time")
    expected = xr.concat(jobs, dim="time", data_vars="minimal", coords="minimal", compat="override")
    for engine in ("zarr3", "zarr"):
        back = xr.open_dataset(tmp_path / "hourly.zarr", engine=engine).load()
        xr.testing.assert_identical(back, expected)
    time_meta = json.loads(store.get("time/zarr.json"))
    assert time_meta["attributes"]["units"] == "hours since 2000-01-01"
    assert time_meta["shape"] == [58]


def test_align_chunks_handles_an_append_into_a_partly_filled_shard():
    store = MemoryStore()
    a, b = hourly("2000-01-01", 10), hourly("2000-01-01T10", 13, seed=3)
    z3.to_zarr(a, store, encoding={"t2m": {"chunks": (2, 4, 6), "shards": (4, 4, 6)}})
    z3.to_zarr(b.chunk({"time": 3}), store, append_dim="time", align_chunks=True)
    back = xr.open_dataset(store, engine="zarr3").load()
    xr.testing.assert_identical(
        back, xr.concat([a, b], "time", data_vars="minimal", coords="minimal", compat="override")
    )


@pytest.mark.parametrize("chunked", [False, True])
def test_hourly_values_cannot_go_into_an_integer_days_since_store(chunked):
    store = MemoryStore()
    daily = hourly("2000-01-01", 3).assign_coords(time=pd.date_range("2000-01-01", periods=3, freq="D"))
    z3.to_zarr(daily, store, encoding={"time": {"units": "days since 2000-01-01", "dtype": "int64"}})
    before = snapshot(store)
    more = hourly("2000-01-04", 5)
    with pytest.raises(ValueError, match=r"'time'.*days since 2000-01-01"):
        z3.to_zarr(more.chunk({"time": 5}) if chunked else more, store, append_dim="time")
    assert snapshot(store) == before
    # whole days still append fine, encoded in the stored units
    z3.to_zarr(
        daily.assign_coords(time=pd.date_range("2000-01-04", periods=3, freq="D")), store, append_dim="time"
    )
    assert json.loads(store._data["time/zarr.json"])["attributes"]["units"] == "days since 2000-01-01"
    times = xr.open_dataset(store, engine="zarr3").time.values
    np.testing.assert_array_equal(times, pd.date_range("2000-01-01", periods=6, freq="D").values)


def test_hourly_jobs_into_a_float_days_since_store():
    store = MemoryStore()
    jobs = [hourly(f"2000-01-0{d}", 24, seed=d) for d in (1, 2, 3)]
    z3.to_zarr(jobs[0], store, encoding={"time": {"units": "days since 2000-01-01", "dtype": "float64"}})
    for job in jobs[1:]:
        z3.to_zarr(job, store, append_dim="time")
    back = xr.open_dataset(store, engine="zarr3").load()
    assert json.loads(store._data["time/zarr.json"])["attributes"]["units"] == "days since 2000-01-01"
    np.testing.assert_array_equal(back.time.values, pd.date_range("2000-01-01", periods=72, freq="h").values)
    np.testing.assert_array_equal(back.t2m.values, np.concatenate([j.t2m.values for j in jobs]))


def test_noleap_calendar_appends_keep_the_stored_calendar():
    import cftime  # noqa: F401

    store = MemoryStore()
    times = xr.date_range("2001-02-27", periods=6, freq="D", calendar="noleap", use_cftime=True)
    ds = hourly("2000-01-01", 6).assign_coords(time=times)
    z3.to_zarr(ds.isel(time=slice(0, 3)), store)
    z3.to_zarr(ds.isel(time=slice(3, 6)), store, append_dim="time")
    back = xr.open_dataset(
        store, engine="zarr3", decode_times=xr.coders.CFDatetimeCoder(use_cftime=True)
    ).load()
    assert back.time.encoding["calendar"] == "noleap"
    assert list(back.time.values) == list(times)  # Feb 28 is followed by Mar 1


def test_every_variable_is_validated_before_any_array_is_resized():
    store = MemoryStore()
    z3.to_zarr(hourly("2000-01-01", 4), store)
    before = snapshot(store)
    bad = hourly("2000-01-01T04", 4)
    bad["station_count"] = bad.station_count.astype("S3")  # cannot be appended to int32
    with pytest.raises(ValueError, match="station_count"):
        z3.to_zarr(bad, store, append_dim="time")
    assert snapshot(store) == before
    wrong_size = hourly("2000-01-01T04", 4, nlon=5)
    with pytest.raises(ValueError, match="lon"):
        z3.to_zarr(wrong_size.drop_vars("lon"), store, append_dim="time")
    assert snapshot(store) == before


def test_non_append_coordinates_must_match_the_store():
    store = MemoryStore()
    z3.to_zarr(hourly("2000-01-01", 4), store)
    before = snapshot(store)
    moved = hourly("2000-01-01T04", 4).assign_coords(lat=np.linspace(-50, 50, 4))
    with pytest.raises(ValueError, match="coordinate 'lat' differs"):
        z3.to_zarr(moved, store, append_dim="time")
    assert snapshot(store) == before
    z3.to_zarr(hourly("2000-01-01T04", 4), store, append_dim="time")
    assert xr.open_dataset(store, engine="zarr3").sizes["time"] == 8


def test_stored_variables_missing_from_the_append_are_refused():
    store = MemoryStore()
    z3.to_zarr(hourly("2000-01-01", 4), store)
    with pytest.raises(ValueError, match=r"\['station_count'\]"):
        z3.to_zarr(hourly("2000-01-01T04", 4).drop_vars("station_count"), store, append_dim="time")
    with pytest.raises(ValueError, match="append_dim='level'"):
        z3.to_zarr(hourly("2000-01-01T04", 4), store, append_dim="level")


def test_mode_a_minus_leaves_variables_without_the_append_dimension_alone():
    store = MemoryStore()
    z3.to_zarr(hourly("2000-01-01", 4), store)
    changed = hourly("2000-01-01T04", 4)
    changed["orography"] = changed.orography + 1000
    z3.to_zarr(changed, store, append_dim="time", mode="a-")
    back = xr.open_dataset(store, engine="zarr3").load()
    assert back.orography.max() < 1000 and back.sizes["time"] == 8
    z3.to_zarr(
        hourly("2000-01-01T08", 4).assign(orography=changed.orography), store, append_dim="time", mode="a"
    )
    assert xr.open_dataset(store, engine="zarr3").orography.min() >= 1000


@pytest.mark.parametrize("mode", ["a", "a-"])
def test_an_append_whose_other_index_is_reordered_or_moved_is_refused(mode):
    # "a-" never writes lat, but the appended t2m values are labelled by it all the same: the
    # same latitudes in another order (or other latitudes) would be stored under the store's
    store = MemoryStore()
    z3.to_zarr(hourly("2000-01-01", 4), store)
    before = snapshot(store)
    step = hourly("2000-01-01T04", 4)
    for wrong in (step.isel(lat=slice(None, None, -1)), step.assign_coords(lat=step.lat + 1)):
        with pytest.raises(ValueError, match=r"coordinate 'lat' differs.*reindex"):
            z3.to_zarr(wrong, store, append_dim="time", mode=mode)
        assert snapshot(store) == before
    z3.to_zarr(
        step.isel(lat=slice(None, None, -1)).reindex(lat=step.lat), store, append_dim="time", mode=mode
    )
    back = xr.open_dataset(store, engine="zarr3").load()
    np.testing.assert_array_equal(back.t2m.isel(time=slice(4, 8)).values, step.t2m.values)


def daily(start, n, seed=0, width=4):
    rng = np.random.default_rng(seed)
    return xr.Dataset(
        {"t": (("time", "x"), rng.random((n, width)).astype("float32"))},
        coords={"time": pd.date_range(start, periods=n, freq="D")},
    )


def test_deferred_appends_that_would_share_a_shard_are_refused(tmp_path):
    """Two compute=False appends computed together would both read-modify-write the shard
    where one ends and the next begins: the second is refused, before anything is written."""
    store = LocalStore(tmp_path / "d.zarr")
    jobs = [daily("2000-01-01", 8, 0), daily("2000-01-09", 6, 1), daily("2000-01-15", 6, 2)]
    z3.to_zarr(jobs[0].chunk({"time": 4}), store, encoding={"t": {"chunks": (2, 4), "shards": (4, 4)}})
    first = z3.to_zarr(jobs[1].chunk({"time": 4}), store, append_dim="time", compute=False)  # 8..14
    before = snapshot(store)
    with pytest.raises(
        ChunkAlignmentError, match=r"'t'.*compute=False.*\[12, 16\).*safe_chunks=False"
    ) as info:
        z3.to_zarr(jobs[2].chunk({"time": (2, 4)}), store, append_dim="time", compute=False)  # 14..20
    assert "Compute the previous write first" in str(info.value)
    assert snapshot(store) == before
    first.compute()
    z3.to_zarr(jobs[2].chunk({"time": (2, 4)}), store, append_dim="time")  # computed at once: fine
    expected = xr.concat(jobs, "time")
    for engine in ("zarr3", "zarr"):
        xr.testing.assert_identical(xr.open_dataset(tmp_path / "d.zarr", engine=engine).load(), expected)


def test_a_deferred_append_into_a_partly_filled_shard_needs_safe_chunks_false():
    store = MemoryStore()
    a, b = daily("2000-01-01", 6, 0), daily("2000-01-07", 5, 1)
    z3.to_zarr(a, store, encoding={"t": {"chunks": (2, 4), "shards": (4, 4)}})
    before = snapshot(store)
    with pytest.raises(ChunkAlignmentError, match=r"time=6:11.*\[4, 8\)"):
        z3.to_zarr(b.chunk({"time": (2, 3)}), store, append_dim="time", compute=False)
    assert snapshot(store) == before
    d = z3.to_zarr(b.chunk({"time": (2, 3)}), store, append_dim="time", compute=False, safe_chunks=False)
    d.compute()  # the only pending write: nothing to race with
    xr.testing.assert_identical(xr.open_dataset(store, engine="zarr3").load(), xr.concat([a, b], "time"))


def test_a_new_variable_with_the_append_dimension_is_refused_up_front(tmp_path):
    store = LocalStore(tmp_path / "n.zarr")
    z3.to_zarr(daily("2000-01-01", 3), store)
    before = snapshot(store)
    new = daily("2000-01-04", 3).assign(u=(("time", "x"), np.zeros((3, 4))))
    with pytest.raises(ValueError, match=r"\['u'\].*append dimension 'time'"):
        z3.to_zarr(new, store, append_dim="time")
    assert snapshot(store) == before
    # a new variable without the append dimension is simply added
    z3.to_zarr(daily("2000-01-04", 3).assign(elev=("x", np.arange(4.0))), store, append_dim="time")
    back = xr.open_dataset(tmp_path / "n.zarr", engine="zarr").load()
    assert back.sizes["time"] == 6 and back.elev.values.tolist() == [0, 1, 2, 3]


def test_a_coordinate_stored_in_float32_matches_its_float64_source(tmp_path):
    store = LocalStore(tmp_path / "f.zarr")

    def job(start, lat):
        return daily(start, 3, width=5).rename(x="lat").assign_coords(lat=lat)

    lat = np.linspace(-89.9, 89.9, 5)
    z3.to_zarr(job("2000-01-01", lat), store, encoding={"lat": {"dtype": "float32"}})
    z3.to_zarr(job("2000-01-04", lat), store, append_dim="time")  # equal once stored as float32
    assert xr.open_dataset(tmp_path / "f.zarr", engine="zarr").sizes == {"time": 6, "lat": 5}
    before = snapshot(store)
    moved = lat + 1e-3  # beyond float32 rounding
    with pytest.raises(ValueError, match="coordinate 'lat' differs"):
        z3.to_zarr(job("2000-01-07", moved), store, append_dim="time")
    assert snapshot(store) == before


PACKED = {"dtype": "int16", "scale_factor": 0.01, "add_offset": 270.0, "_FillValue": -32768}


def kelvin(start, values):
    return xr.Dataset(
        {"t": (("time",), np.array(values, "float32"))},
        coords={"time": pd.date_range(start, periods=len(values), freq="D")},
    )


@pytest.mark.parametrize("chunked", [False, True])
def test_packed_values_beyond_int16_raise_instead_of_wrapping(tmp_path, chunked):
    store = LocalStore(tmp_path / "p.zarr")
    z3.to_zarr(kelvin("2000-01-01", [280, 290]), store, encoding={"t": PACKED})
    before = snapshot(store)
    old = xr.open_dataset(tmp_path / "p.zarr", engine="zarr3").load()
    hot = kelvin("2000-01-03", [300.0, 700.0])  # (700 - 270) / 0.01 = 43000 > 32767
    with pytest.raises(EncodedRangeError) as info:
        z3.to_zarr(hot.chunk({"time": 2}) if chunked else hot, store, append_dim="time")
    msg = str(info.value)
    assert "'t'" in msg and "int16" in msg and "43000" in msg and "scale_factor=0.01" in msg
    assert isinstance(info.value, DataTypeError)
    if chunked:  # raised in the write task of t's shard, before it wrote; no zarr.json moved on
        kept = [k for k in before if k.startswith("t/") or k.endswith("zarr.json")]
        assert {k: store.get(k) for k in kept} == {k: before[k] for k in kept}
        assert not [k for k in set(snapshot(store)) - set(before) if k.startswith("t/")]
    else:  # checked before anything was written
        assert snapshot(store) == before
    xr.testing.assert_identical(xr.open_dataset(tmp_path / "p.zarr", engine="zarr3").load(), old)
    z3.to_zarr(kelvin("2000-01-03", [300.0, np.nan]), store, append_dim="time")  # in range; NaN -> fill
    back = xr.open_dataset(tmp_path / "p.zarr", engine="zarr").load()
    np.testing.assert_allclose(back.t.values, [280, 290, 300, np.nan], atol=0.006)


def test_integer_days_since_times_beyond_int16_raise():
    store = MemoryStore()
    enc = {"time": {"units": "days since 2000-01-01", "dtype": "int16"}}
    z3.to_zarr(daily("2000-01-01", 2), store, encoding=enc)
    before = snapshot(store)
    with pytest.raises(EncodedRangeError, match=r"'time'.*36525.*days since 2000-01-01.*int16"):
        z3.to_zarr(daily("2100-01-01", 2), store, append_dim="time")
    assert snapshot(store) == before
    z3.to_zarr(daily("2000-01-03", 2), store, append_dim="time")
    assert list(xr.open_dataset(store, engine="zarr3").time.values) == list(
        pd.date_range("2000-01-01", periods=4, freq="D").values
    )


def test_nan_into_an_integer_without_fill_value_raises():
    ds = xr.Dataset({"n": (("x",), np.array([1.0, np.nan, 3.0]))})
    store = MemoryStore()
    with pytest.raises(EncodedRangeError, match=r"'n'.*1 values are NaN"):
        z3.to_zarr(ds, store, encoding={"n": {"dtype": "int8"}})
    assert not [k for k in store.list() if k.startswith("n/")]


def test_append_refuses_a_store_whose_arrays_disagree_on_the_append_length():
    # a store left by an interrupted append of another writer: t2m grew, time and station_count did not
    store = MemoryStore()
    z3.to_zarr(hourly("2024-01-01", 4), store, mode="w")
    t2m = z3.open_array(store, "t2m", mode="r+")
    t2m.resize((6, 4, 6))
    before = snapshot(store)
    with pytest.raises(ShapeError) as err:
        z3.to_zarr(hourly("2024-01-01T04", 2), store, append_dim="time")
    message = str(err.value)
    for name, length in (("t2m", 6), ("time", 4), ("station_count", 4)):
        assert f"{name!r}: {length}" in message
    assert "orography" not in message  # it has no time axis
    assert snapshot(store) == before


def test_append_to_a_consistent_store_passes_the_length_check():
    store = MemoryStore()
    z3.to_zarr(hourly("2024-01-01", 4), store, mode="w")
    z3.to_zarr(hourly("2024-01-01T04", 2, seed=1), store, append_dim="time")
    back = xr.open_dataset(store, engine="zarr3")
    assert {back[n].sizes["time"] for n in ("t2m", "station_count", "time")} == {6}


def test_append_along_a_dimension_named_only_by_the_array_dimensions_attribute(tmp_path):
    """A v3 array whose dimensions are named only by xarray's ``_ARRAY_DIMENSIONS`` attribute
    opens with them, and is appended along them (the writer matches as the reader reads)."""
    path = str(tmp_path / "s.zarr")
    a = z3.create_array(
        path, "v", shape=(3,), dtype="f8", chunks=(3,), attributes={"_ARRAY_DIMENSIONS": ["t"]}
    )
    a[...] = [1.0, 2.0, 3.0]
    assert xr.open_dataset(path, engine="zarr3").v.dims == ("t",)
    z3.to_zarr(xr.Dataset({"v": ("t", [4.0])}), path, append_dim="t")
    np.testing.assert_array_equal(xr.open_dataset(path, engine="zarr3").v.values, [1.0, 2.0, 3.0, 4.0])


def test_append_matches_axes_named_partly_by_dimension_names_and_partly_by_the_attribute(tmp_path):
    """Axis by axis, as the reader: ``dimension_names`` where it names an axis, the
    ``_ARRAY_DIMENSIONS`` attribute where it does not (the writer took the attribute whole)."""
    path = str(tmp_path / "s.zarr")
    a = z3.create_array(
        path,
        "v",
        shape=(2, 3),
        dtype="f8",
        chunks=(2, 3),
        dimension_names=("time", None),
        attributes={"_ARRAY_DIMENSIONS": ["old_name", "x"]},
    )
    a[...] = np.zeros((2, 3))
    assert xr.open_dataset(path, engine="zarr3").v.dims == ("time", "x")
    z3.to_zarr(xr.Dataset({"v": (("time", "x"), np.ones((1, 3)))}), path, append_dim="time")
    np.testing.assert_array_equal(z3.open_array(path, "v")[...], [[0, 0, 0], [0, 0, 0], [1, 1, 1]])
