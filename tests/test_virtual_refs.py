"""Virtual datasets: chunks that live inside NetCDF4/HDF5 files, reached through kerchunk
references (fsspec ``reference://``, JSON and parquet) and VirtualiZarr's ManifestStore (the
zarr-python store adapter). Values must equal the original file opened with xarray, and what
xarray's own zarr engine reads from the same references."""

from __future__ import annotations

import json
import pickle
import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.errors import CorruptionError, ReadOnlyError, StoreError
from zarr3_backend.stores import ZarrPythonStore, make_store

pytest.importorskip("h5netcdf")
kerchunk_hdf = pytest.importorskip("kerchunk.hdf")
kerchunk_df = pytest.importorskip("kerchunk.df")
pytest.importorskip("fastparquet")
virtualizarr_parsers = pytest.importorskip("virtualizarr.parsers")
obspec_registry = pytest.importorskip("obspec_utils.registry")
obstore_store = pytest.importorskip("obstore.store")

pytestmark = [
    pytest.mark.interop,
    # pandas' note that its fastparquet engine (which fsspec's parquet references use) is deprecated
    pytest.mark.filterwarnings("ignore:The 'fastparquet' engine is deprecated"),
]


def sample(seed: int = 0) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    return xr.Dataset(
        {
            "t2m": (
                ("time", "lat", "lon"),
                (250 + 40 * rng.random((6, 4, 5))).astype("float32"),
                {"units": "K", "long_name": "2 metre temperature"},
            ),
            "count": (("time",), np.arange(6, dtype="int16") * 3),
        },
        coords={
            "time": pd.date_range("2000-01-01", periods=6, freq="D"),
            "lat": np.linspace(-60.0, 60.0, 4),
            "lon": np.arange(5) * 72.0,
        },
        attrs={"title": "virtual test"},
    )


def write_netcdf(path, fletcher32: bool) -> xr.Dataset:
    """A NetCDF4 file with chunked, deflated, shuffled (and optionally checksummed) variables."""
    ds = sample()
    t_encoding = {"zlib": True, "shuffle": True, "chunksizes": (2, 2, 5), "fletcher32": fletcher32}
    encoding = {"t2m": t_encoding, "count": {"zlib": True, "chunksizes": (3,)}}
    ds.to_netcdf(path, engine="h5netcdf", encoding=encoding)
    return xr.open_dataset(path, engine="h5netcdf").load()


@pytest.fixture
def netcdf(tmp_path):
    """(path, dataset as xarray reads the file) without fletcher32 (kerchunk refuses it)."""
    path = tmp_path / "plain.nc"
    return path, write_netcdf(path, fletcher32=False)


@pytest.fixture
def netcdf_checksummed(tmp_path):
    path = tmp_path / "checksummed.nc"
    return path, write_netcdf(path, fletcher32=True)


def kerchunk_refs(path) -> dict:
    return kerchunk_hdf.SingleHdf5ToZarr(str(path), inline_threshold=0).translate()


def manifest_store(path):
    registry = obspec_registry.ObjectStoreRegistry({"file://": obstore_store.LocalStore()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python's note that numcodecs codecs are not in the spec
        return virtualizarr_parsers.HDFParser()(url=f"file://{path}", registry=registry)


# ---- kerchunk references through the fsspec store --------------------------------------------
def test_kerchunk_json_refs_read_like_the_file_and_the_zarr_engine(netcdf, tmp_path):
    path, original = netcdf
    refs = kerchunk_refs(path)
    assert any(k.startswith("t2m/") and not k.endswith((".zarray", ".zattrs")) for k in refs["refs"])
    refs_file = tmp_path / "refs.json"
    refs_file.write_text(json.dumps(refs))

    for fo in (refs, str(refs_file)):
        ours = xr.open_dataset("reference://", engine="zarr3", storage_options={"fo": fo}).load()
        xr.testing.assert_identical(ours, original)
    theirs = xr.open_dataset(
        "reference://", engine="zarr", consolidated=False, storage_options={"fo": refs}
    ).load()
    xr.testing.assert_identical(ours, theirs)


def test_kerchunk_parquet_refs_read_like_the_file(netcdf, tmp_path):
    path, original = netcdf
    parquet = tmp_path / "refs.parq"
    kerchunk_df.refs_to_dataframe(kerchunk_refs(path), str(parquet))
    options = {"fo": str(parquet), "remote_protocol": "file"}

    ours = xr.open_dataset("reference://", engine="zarr3", storage_options=options).load()
    xr.testing.assert_identical(ours, original)
    with z3.settings.using(remote_task_bytes=0):
        lazy = xr.open_dataset("reference://", engine="zarr3", storage_options=options, chunks={})
    assert lazy.t2m.chunks == ((2, 2, 2), (2, 2), (5,))  # one dask task per HDF5 chunk
    xr.testing.assert_identical(lazy.load(), original)


def test_kerchunk_refs_open_as_arrays_with_partial_reads(netcdf):
    path, original = netcdf
    group = z3.open_group("reference://", storage_options={"fo": kerchunk_refs(path)})
    t2m = group["t2m"]
    assert t2m.shape == (6, 4, 5)
    np.testing.assert_array_equal(t2m[1:4, 1, ::2], original.t2m.values[1:4, 1, ::2])
    np.testing.assert_array_equal(t2m.oindex[[0, 5], :, [4]], original.t2m.values[[0, 5]][:, :, [4]])


# ---- VirtualiZarr's ManifestStore through the zarr-python adapter -----------------------------
def test_manifest_store_reads_like_the_file_and_the_zarr_engine(netcdf_checksummed):
    path, original = netcdf_checksummed
    ms = manifest_store(path)
    assert isinstance(make_store(ms), ZarrPythonStore)

    ours = xr.open_dataset(ms, engine="zarr3").load()
    xr.testing.assert_identical(ours, original)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = xr.open_dataset(ms, engine="zarr", consolidated=False, zarr_format=3).load()
    xr.testing.assert_identical(ours, theirs)

    with z3.settings.using(remote_task_bytes=0):
        lazy = xr.open_dataset(ms, engine="zarr3", chunks={})
    assert lazy.t2m.chunks == ((2, 2, 2), (2, 2), (5,))
    xr.testing.assert_identical(lazy.load(), original)


def test_manifest_store_codecs_are_the_hdf5_filters(netcdf_checksummed):
    path, original = netcdf_checksummed
    store = make_store(manifest_store(path))
    names = [c["name"] for c in json.loads(store.get("t2m/zarr.json"))["codecs"]]
    assert any("fletcher32" in n for n in names)
    assert any("zlib" in n for n in names)
    assert any("shuffle" in n for n in names)
    t2m = z3.open_array(store, path="t2m")
    np.testing.assert_array_equal(t2m[4:, 1:3, 2], original.t2m.values[4:, 1:3, 2])


def test_manifest_store_detects_a_corrupted_chunk(netcdf_checksummed):
    """A byte flipped inside an HDF5 chunk fails its fletcher32 checksum: a typed error."""
    path, _ = netcdf_checksummed
    ms = manifest_store(path)
    t2m = z3.open_array(ms, path="t2m")
    entry = ms._group.arrays["t2m"].manifest.get_entry((0, 0, 0))  # where chunk 0.0.0 lives in the file
    data = bytearray(path.read_bytes())
    data[entry["offset"] + 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptionError, match="fletcher32"):
        t2m[0:2, 0:2, :]


def test_manifest_store_is_read_only_and_pickles(netcdf_checksummed):
    path, original = netcdf_checksummed
    store = make_store(manifest_store(path))
    assert store.read_only
    with pytest.raises(ReadOnlyError):
        make_store(store.store, mode="a")
    with pytest.raises(ReadOnlyError):
        store.set("t2m/zarr.json", b"{}")
    copy = pickle.loads(pickle.dumps(store))
    np.testing.assert_array_equal(z3.open_array(copy, path="t2m")[...], original.t2m.values)


# ---- virtual chunks inside an Icechunk repository ----------------------------------------------
def test_icechunk_virtual_chunks_read_like_the_file(netcdf_checksummed, tmp_path):
    """VirtualiZarr writes references to the NetCDF4 chunks into an Icechunk repository; the
    session store serves them (Icechunk fetches the bytes from the file) and our codecs decode."""
    icechunk = pytest.importorskip("icechunk")
    virtualizarr = pytest.importorskip("virtualizarr")
    path, original = netcdf_checksummed
    prefix = f"file://{path.parent}/"
    registry = obspec_registry.ObjectStoreRegistry({"file://": obstore_store.LocalStore()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vds = virtualizarr.open_virtual_dataset(
            f"file://{path}",
            registry=registry,
            parser=virtualizarr_parsers.HDFParser(),
            loadable_variables=["time", "lat", "lon"],
        )
    config = icechunk.RepositoryConfig.default()
    container = icechunk.VirtualChunkContainer(prefix, icechunk.local_filesystem_store(str(path.parent)))
    config.set_virtual_chunk_container(container)
    storage = icechunk.local_filesystem_storage(str(tmp_path / "repo"))
    repo = icechunk.Repository.create(storage, config, authorize_virtual_chunk_access={prefix: None})
    session = repo.writable_session("main")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vds.vz.to_icechunk(session.store)
    session.commit("virtual references to a NetCDF4 file")

    readonly = repo.readonly_session(branch="main")
    assert {f"file://{path}"} == set(readonly.all_virtual_chunk_locations())
    ours = xr.open_dataset(readonly.store, engine="zarr3").load()
    xr.testing.assert_identical(ours, original)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = xr.open_dataset(readonly.store, engine="zarr", consolidated=False).load()
    xr.testing.assert_identical(ours, theirs)

    # the same repository opened without authorising the container: a typed error naming the read
    unauthorised = icechunk.Repository.open(storage).readonly_session(branch="main")
    with pytest.raises(StoreError, match="t2m/c"):
        z3.open_array(unauthorised.store, path="t2m")[...]


def test_manifest_store_datatree_of_a_grouped_file(tmp_path):
    path = tmp_path / "grouped.nc"
    sample().to_netcdf(path, engine="h5netcdf")
    sample(seed=1).drop_vars("count").to_netcdf(path, engine="h5netcdf", group="member1", mode="a")
    original = xr.open_datatree(path, engine="h5netcdf").load()
    ours = xr.open_datatree(manifest_store(path), engine="zarr3").load()
    assert set(ours.groups) == {"/", "/member1"}
    for group in ("/", "/member1"):
        xr.testing.assert_identical(ours[group].to_dataset(), original[group].to_dataset())
