"""Array and Group API: round trips over dtypes x codecs x key encodings, selections, modes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sample_data import DTYPES, sample
from store_doubles import RecordingStore

import zarr3_backend as z3
from zarr3_backend.errors import (
    ArrayNotFoundError,
    GroupNotFoundError,
    NodeExistsError,
    ReadOnlyError,
    ShapeError,
)

CODECS = {
    "raw": None,
    "gzip": [{"name": "gzip", "configuration": {"level": 1}}],
    "blosc": [{"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle"}}],
    "zstd+crc": [{"name": "zstd", "configuration": {"level": 1, "checksum": False}}, {"name": "crc32c"}],
}
KEY_ENCODINGS = [
    None,
    {"name": "default", "configuration": {"separator": "."}},
    {"name": "v2", "configuration": {"separator": "."}},
    {"name": "v2", "configuration": {"separator": "/"}},
]


@pytest.fixture(params=["memory", "local"])
def store(request, tmp_path):
    return z3.MemoryStore() if request.param == "memory" else z3.LocalStore(tmp_path / "data.zarr")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("key_encoding", KEY_ENCODINGS, ids=["default/", "default.", "v2.", "v2/"])
def test_round_trip_dtype_codec(store, dtype, codec, key_encoding):
    data = sample(dtype, (13, 7))
    a = z3.create_array(
        store,
        "x",
        shape=data.shape,
        dtype=dtype,
        chunks=(5, 4),
        compressors=CODECS[codec] if codec != "raw" else None,
        chunk_key_encoding=key_encoding,
        fill_value=1 if dtype != "bool" else True,
    )
    a[5:, :] = data[5:, :]  # the first chunk row is never written: it reads as the fill value
    assert not [k for k in store.list() if k.endswith(("c/0/0", "c.0.0", "x/0.0", "x/0/0"))]
    data[:5, :] = 1
    b = z3.open_array(store, "x")
    np.testing.assert_array_equal(b[...], data)
    np.testing.assert_array_equal(b[3:11, 2:6], data[3:11, 2:6])
    assert b.dtype == np.dtype(dtype)


@pytest.mark.parametrize("encoding", KEY_ENCODINGS, ids=["default/", "default.", "v2.", "v2/"])
def test_key_encodings_write_expected_keys(store, encoding):
    a = z3.create_array(store, "g/x", shape=(4, 4), dtype="i4", chunks=(2, 2), chunk_key_encoding=encoding)
    a[...] = np.arange(16).reshape(4, 4)
    keys = set(store.list_prefix("g/x/")) - {"g/x/zarr.json"}
    name = (encoding or {"name": "default"})["name"]
    sep = (encoding or {}).get("configuration", {}).get("separator", "/")
    expected = {
        f"g/x/{'c' + sep if name == 'default' else ''}{i}{sep}{j}" for i in range(2) for j in range(2)
    }
    assert keys == expected
    np.testing.assert_array_equal(z3.open_array(store, "g/x")[...], np.arange(16).reshape(4, 4))


def test_partial_edge_chunks_store_full_size_with_fill(store):
    a = z3.create_array(store, "x", shape=(5,), dtype="i2", chunks=(4,), fill_value=-7, compressors=None)
    a[...] = np.arange(5)
    edge = store.get("x/c/1")
    assert len(edge) == 4 * 2  # full chunk size on disk
    assert np.frombuffer(edge, "<i2").tolist() == [4, -7, -7, -7]


def test_unwritten_chunks_read_as_fill_value(store):
    a = z3.create_array(store, "x", shape=(10, 10), dtype="f8", chunks=(3, 3), fill_value=np.nan)
    a[0:3, 0:3] = 1.0
    out = a[...]
    assert np.all(out[:3, :3] == 1.0) and np.isnan(out[3:, :]).all() and np.isnan(out[:, 3:]).all()
    assert sorted(k for k in store.list() if "/c/" in k) == ["x/c/0/0"]


@pytest.mark.parametrize("fill", [np.nan, np.inf, -np.inf, "0x7fc00001", 2.5])
def test_special_float_fill_values(store, fill):
    a = z3.create_array(store, "x", shape=(4,), dtype="f4", chunks=(2,), fill_value=fill)
    doc = json.loads(store.get("x/zarr.json"), parse_constant=lambda c: pytest.fail(f"bare {c}"))
    got = z3.open_array(store, "x")[...]
    if isinstance(fill, str):
        assert doc["fill_value"] == fill
        assert got.view("u4").tolist() == [0x7FC00001] * 4  # NaN payload kept bit-exact
    else:
        np.testing.assert_array_equal(got, np.full(4, fill, "f4"))
    assert a.fill_value.dtype == np.dtype("f4")


def test_zero_d_array(store):
    a = z3.create_array(store, "s", shape=(), dtype="f8", fill_value=1.5)
    assert a[()] == 1.5
    a[()] = 3.25
    b = z3.open_array(store, "s")
    assert b[...] == 3.25 and b.shape == () and b[()] == 3.25
    assert "s/c" in set(store.list())


def test_fill_chunks_not_written_and_deleted(store):
    a = z3.create_array(store, "x", shape=(4,), dtype="i4", chunks=(2,), fill_value=0)
    a[:] = [1, 2, 0, 0]
    assert {k for k in store.list() if "/c/" in k} == {"x/c/0"}
    a[:2] = 0  # existing chunk now equals the fill: deleted
    assert not [k for k in store.list() if "/c/" in k]
    b = z3.open_array(store, "x", mode="r+", write_empty_chunks=True)
    b[:] = 0
    assert {k for k in store.list() if "/c/" in k} == {"x/c/0", "x/c/1"}


def test_orthogonal_and_vectorized(store):
    data = sample("int32", (9, 8, 7))
    a = z3.create_array(store, "x", shape=data.shape, dtype="int32", chunks=(4, 3, 2))
    a[...] = data
    rows, cols = [7, 1, 1, 3], np.array([True, False] * 4)
    np.testing.assert_array_equal(a.oindex[rows, cols, 2:5], data[np.ix_(rows, cols, np.arange(2, 5))])
    idx = (np.array([[0, 8], [3, 3]]), np.array([[1, 7], [2, 2]]), np.array([[6, 0], [5, 5]]))
    np.testing.assert_array_equal(a.vindex[idx], data[idx])
    a.oindex[[0, 2], :, [1]] = -1
    data[np.ix_([0, 2], np.arange(8), [1])] = -1
    a.vindex[idx] = 99
    data[idx] = 99
    np.testing.assert_array_equal(a[...], data)
    np.testing.assert_array_equal(a[::2, 1::3, -1], data[::2, 1::3, -1])


def test_resize_and_append(store):
    a = z3.create_array(store, "x", shape=(6, 4), dtype="u1", chunks=(2, 2), fill_value=0)
    a[...] = 1
    a.resize((3, 4))
    assert a.shape == (3, 4)
    assert not [k for k in store.list() if k.startswith("x/c/2/") or k.startswith("x/c/3/")]
    a.append(np.full((2, 4), 5, "u1"))
    b = z3.open_array(store, "x")
    assert b.shape == (5, 4)
    np.testing.assert_array_equal(b[3:], 5)
    np.testing.assert_array_equal(b[:3], 1)


def test_attrs_persist_and_dimension_names(store):
    a = z3.create_array(store, "x", shape=(2,), dtype="i1", dimension_names=["time"], attributes={"a": 1})
    a.attrs["units"] = "K"
    a.attrs.update(b=[1, 2])
    b = z3.open_array(store, "x")
    assert dict(b.attrs) == {"a": 1, "units": "K", "b": [1, 2]}
    assert b.dimension_names == ("time",)


def test_groups_members_implicit_and_tree(store):
    g = z3.open_group(store, mode="w", attributes={"title": "t"})
    g.create_group("a").create_array("x", shape=(3,), dtype="i4")
    g.create_array("y", shape=(2, 2), dtype="f4")
    z3.create_array(store, "implicit/deep/z", shape=(1,), dtype="i1")
    store.erase("implicit/zarr.json")  # a prefix with nodes but no zarr.json: implicit group
    store.set("._zarr.json", b"junk")  # stray files never break listing
    g = z3.open_group(store, mode="r")
    members = g.members(max_depth=None)
    assert set(members) == {"a", "a/x", "y", "implicit", "implicit/deep", "implicit/deep/z"}
    assert isinstance(members["implicit"], z3.Group)
    assert sorted(g) == ["a", "implicit", "y"]
    assert g["a/x"].shape == (3,)
    assert "a/x" in g and "nope" not in g
    assert g.attrs["title"] == "t"
    tree = g.tree()
    assert "x (3,) int32" in tree and "deep/" in tree


def test_consolidated_metadata_used_without_listing(store):
    g = z3.open_group(store, mode="w")
    g.create_group("sub").create_array("x", shape=(3,), dtype="i4")
    g.create_array("y", shape=(2,), dtype="f4", attributes={"k": "v"})
    z3.consolidate_metadata(store)

    store = store.with_read_only(True)  # passed through as is by open_group(mode="r")
    listed = []
    original = store.list_dir

    def spy(prefix):
        listed.append(prefix)
        return original(prefix)

    store.list_dir = spy
    g = z3.open_group(store, mode="r")
    assert set(g.members(max_depth=None)) == {"sub", "sub/x", "y"}
    assert g["y"].attrs["k"] == "v" and g["sub"]["x"].shape == (3,)
    assert listed == []
    assert set(z3.open_group(store, mode="r", use_consolidated=False).members(None)) == {"sub", "sub/x", "y"}
    assert listed  # the non-consolidated path lists


def test_modes(store):
    with pytest.raises(GroupNotFoundError):
        z3.open_group(store, "g", mode="r")
    with pytest.raises(GroupNotFoundError):
        z3.open_group(store, "g", mode="r+")
    z3.open_group(store, "g", mode="a")
    with pytest.raises(NodeExistsError):
        z3.open_group(store, "g", mode="w-")
    z3.create_array(store, "g/x", shape=(2,), dtype="i4")
    g = z3.open_group(store, "g", mode="w")  # overwrite: children gone
    assert list(g) == []
    with pytest.raises(ArrayNotFoundError):
        z3.open_array(store, "g/x")
    a = z3.open_array(store, "g/x", mode="w", shape=(3,), dtype="i2")
    a[:] = 4
    ro = z3.open_array(store, "g/x", mode="r")
    with pytest.raises(ReadOnlyError, match="g/x"):
        ro[:] = 1
    with pytest.raises(ReadOnlyError):
        ro.attrs["a"] = 1
    assert z3.open_array(store, "g/x")[...].tolist() == [4, 4, 4]


def test_create_refuses_existing_and_array_parent(store):
    z3.create_array(store, "x", shape=(2,), dtype="i4")
    before = dict((k, store.get(k)) for k in store.list())
    with pytest.raises(NodeExistsError, match="x"):
        z3.create_array(store, "x", shape=(3,), dtype="i4")
    with pytest.raises(NodeExistsError, match="ancestor 'x' is an array"):
        z3.create_array(store, "x/y", shape=(3,), dtype="i4")
    assert dict((k, store.get(k)) for k in store.list()) == before


def test_write_shape_mismatch_writes_nothing(store):
    a = z3.create_array(store, "x", shape=(4, 4), dtype="i4", chunks=(2, 2))
    with pytest.raises(ShapeError, match="'x'"):
        a[:2, :2] = np.ones((3, 3))
    assert [k for k in store.list() if "/c/" in k] == []


def test_pathlib_and_string_paths(tmp_path):
    p = tmp_path / "p.zarr"
    a = z3.create_array(p, "x", shape=(3,), dtype="i4")
    a[:] = [1, 2, 3]
    assert z3.open_array(str(p), "x")[...].tolist() == [1, 2, 3]
    assert (p / "x" / "zarr.json").exists()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_property_matches_numpy(data):
    ndim = data.draw(st.integers(0, 3))
    shape = tuple(data.draw(st.lists(st.integers(0, 9), min_size=ndim, max_size=ndim)))
    chunks = tuple(data.draw(st.integers(1, 5)) for _ in range(ndim))
    ref = np.arange(int(np.prod(shape)), dtype="i4").reshape(shape)
    store = z3.MemoryStore()
    a = z3.create_array(store, "x", shape=shape, dtype="i4", chunks=chunks or None, fill_value=-1)
    a[...] = ref
    sel = []
    for n in shape:
        kind = data.draw(st.sampled_from(["int", "slice"] if n else ["slice"]))
        if kind == "int":
            sel.append(data.draw(st.integers(-n, n - 1)))
        else:
            start = data.draw(st.integers(0, n))
            stop = data.draw(st.integers(start, n))
            sel.append(slice(start, stop, data.draw(st.integers(1, 3))))
    sel = tuple(sel)
    np.testing.assert_array_equal(a[sel], ref[sel])
    value = -np.arange(np.asarray(ref[sel]).size, dtype="i4").reshape(np.shape(ref[sel])) - 2
    a[sel] = value
    ref[sel] = value
    np.testing.assert_array_equal(z3.open_array(store, "x")[...], ref)
    if ndim:
        idx = [data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=4)) if n else [] for n in shape]
        if all(idx):
            np.testing.assert_array_equal(a.oindex[tuple(idx)], ref[np.ix_(*idx)])
            pts = tuple(np.array(i[:1] * 3) for i in idx)
            np.testing.assert_array_equal(a.vindex[pts], ref[pts])


def test_sync_api_inside_running_event_loop_and_threads(tmp_path):
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    data = np.arange(100, dtype="f4").reshape(10, 10)

    async def inside_loop():  # as in a Jupyter cell: a loop is already running
        a = z3.create_array(
            tmp_path / "e.zarr", "x", shape=(10, 10), dtype="f4", chunks=(3, 3), shards=(6, 6)
        )
        a[...] = data
        return z3.open_array(tmp_path / "e.zarr", "x")[2:9, 1:4]

    np.testing.assert_array_equal(asyncio.run(inside_loop()), data[2:9, 1:4])
    a = z3.open_array(tmp_path / "e.zarr", "x", mode="r+")
    with ThreadPoolExecutor(4) as pool:  # concurrent readers and writers on disjoint shards
        list(pool.map(lambda i: a.__setitem__((slice(6, 10), slice(i * 6, i * 6 + 4)), i), range(2)))
        results = list(pool.map(lambda i: a[i], range(10)))
    expected = data.copy()
    expected[6:10, 0:4] = 0
    expected[6:10, 6:10] = 1
    np.testing.assert_array_equal(np.stack(results), expected)


@pytest.mark.parametrize("shards", [None, (10, 8)])
def test_negative_steps_read_and_write(store, shards):
    data = sample("int32", (13, 11))
    a = z3.create_array(store, "x", shape=data.shape, dtype="int32", chunks=(5, 4), shards=shards)
    a[...] = data
    np.testing.assert_array_equal(a[::-2, 9:1:-3], data[::-2, 9:1:-3])
    a[12:2:-4, ::-1] = -data[12:2:-4, ::-1]
    data[12:2:-4, ::-1] = -data[12:2:-4, ::-1]
    np.testing.assert_array_equal(z3.open_array(store, "x")[...], data)


def test_text_and_bytes_arrays_default_codecs(store):
    s = z3.create_array(store, "s", shape=(3,), dtype=str, chunks=(2,))
    s[...] = np.array(["a", "héllo", ""], dtype=object)
    b = z3.create_array(store, "b", shape=(3,), dtype="variable_length_bytes", chunks=(2,))
    b[...] = np.array([b"x", b"", b"\x00yz"], dtype=object)
    assert z3.open_array(store, "s").codecs[0]["name"] == "vlen-utf8"
    assert z3.open_array(store, "b").codecs[0]["name"] == "vlen-bytes"
    assert list(z3.open_array(store, "s")[...]) == ["a", "héllo", ""]
    assert list(z3.open_array(store, "b")[...]) == [b"x", b"", b"\x00yz"]


def test_reserved_node_names_refused_and_dot_names_listed(store):
    from zarr3_backend.errors import InvalidKeyError

    for bad in ["...", "__res", "g/__x"]:
        with pytest.raises(InvalidKeyError, match="reserved"):
            z3.create_array(store, bad, shape=(1,), dtype="i1")
    assert list(store.list()) == []
    z3.create_array(store, ".hidden", shape=(1,), dtype="i1")
    assert list(z3.open_group(store, mode="r")) == [".hidden"]


def test_fancy_selection_routing_matches_numpy(store):
    data = np.arange(30).reshape(5, 6)
    a = z3.create_array(store, "x", shape=(5, 6), dtype="i8", chunks=(2, 4))
    a[...] = data
    np.testing.assert_array_equal(a[[1, 2], [3, 4]], data[[1, 2], [3, 4]])  # points, not outer
    np.testing.assert_array_equal(a[[4, 0], 1:5], data[[4, 0], 1:5])
    idx = np.array([[0, 1], [4, 3]])
    np.testing.assert_array_equal(a[idx], data[idx])
    a[[1, 2], [3, 4]] = -1
    data[[1, 2], [3, 4]] = -1
    np.testing.assert_array_equal(a[...], data)
    assert (a[...] == -1).sum() == 2
    a[idx, 1:3] = np.array([[7, 8]])
    data[idx, 1:3] = np.array([[7, 8]])
    np.testing.assert_array_equal(a[...], data)


def test_append_validates_before_resizing(store):
    a = z3.create_array(store, "x", shape=(6, 3), dtype="f4", chunks=(2, 3))
    for bad in [np.ones((2, 5)), np.ones(3)]:
        with pytest.raises(ShapeError):
            a.append(bad)
    assert z3.open_array(store, "x").shape == (6, 3)
    with pytest.raises(ShapeError):
        a.resize(5.5, 3)


def test_chunks_of_transposed_sharded_array_in_array_axis_order(store):
    chain = [
        {"name": "transpose", "configuration": {"order": [1, 0]}},
        {"name": "sharding_indexed", "configuration": {"chunk_shape": [3, 2], "codecs": [{"name": "bytes"}]}},
    ]
    a = z3.create_array(store, "x", shape=(8, 12), dtype="u1", chunks=(8, 12), codecs=chain)
    assert (a.chunks, a.shards) == ((2, 3), (8, 12))
    data = np.arange(96, dtype="u1").reshape(8, 12)
    a[...] = data
    np.testing.assert_array_equal(z3.open_array(store, "x")[1:7, 2:11], data[1:7, 2:11])


def test_append_writes_data_before_metadata():
    store = RecordingStore()
    a = z3.create_array(store, "x", shape=(4,), dtype="i4", chunks=(2,))
    a[:] = [1, 2, 3, 4]
    store.writes.clear()
    a.append(np.array([5, 6, 7]))
    # the new chunks are placed before the document with the new shape is written
    assert store.writes[-1] == "x/zarr.json"
    placed = [i for i, k in enumerate(store.writes) if k in ("x/c/2", "x/c/3")]
    assert len(placed) == 2 and max(placed) < len(store.writes) - 1
    assert not [k for k in store.list() if k.startswith(".z3-txn")]
    assert z3.open_array(store, "x")[...].tolist() == [1, 2, 3, 4, 5, 6, 7]


def test_writable_group_reads_live_metadata_not_the_consolidated_snapshot(store):
    g = z3.open_group(store, mode="w")
    g.create_array("v", shape=(20,), dtype="i4", chunks=(10,))
    z3.consolidate_metadata(store)
    z3.open_array(store, "v", mode="r+").resize((25,))
    z3.open_group(store, mode="r+")["v"].attrs["units"] = "K"  # must not write back shape 20
    a = z3.open_array(store, "v")
    assert a.shape == (25,) and a.attrs["units"] == "K"
    assert z3.open_group(store, mode="r")["v"].shape == (20,)  # read-only: the (stale) snapshot


def test_design_spelling_of_create_array_defaults(store):
    """DESIGN.md spells serializer/compressors/filters defaults as None."""
    a = z3.create_array(
        store,
        path="a",
        shape=(4,),
        dtype="i4",
        chunks=(2,),
        serializer=None,
        compressors=None,
        filters=None,
        codecs=None,
        fill_value=None,
        chunk_key_encoding=None,
        dimension_names=None,
        attributes=None,
    )
    a[:] = [1, 2, 3, 4]
    assert a.codecs == [{"name": "bytes", "configuration": {"endian": "little"}}]
    assert z3.open_array(store, "a")[...].tolist() == [1, 2, 3, 4]


def test_require_array_checks_shape_and_dtype(store):
    g = z3.open_group(store, mode="w")
    g.create_array("x", shape=(2,), dtype="i4")
    assert g.require_array("x", shape=(2,), dtype="int32").shape == (2,)
    with pytest.raises(NodeExistsError, match="shape"):
        g.require_array("x", shape=(3,), dtype="i4")
    with pytest.raises(NodeExistsError, match="dtype"):
        g.require_array("x", shape=(2,), dtype="f8")


@pytest.mark.interop
def test_zarr_v2_array_is_read_only_with_mode_r_and_written_as_v2_with_r_plus(tmp_path):
    import zarr

    from zarr3_backend.errors import ReadOnlyError

    zarr.create_array(tmp_path / "v2.zarr", shape=(3,), dtype="i4", zarr_format=2)[...] = [1, 2, 3]
    a = z3.open_array(tmp_path / "v2.zarr", mode="r")
    assert a.zarr_format == 2 and a.read_only and a[...].tolist() == [1, 2, 3]
    with pytest.raises(ReadOnlyError, match="read-only"):
        a[0] = 5
    a = z3.open_array(tmp_path / "v2.zarr", mode="r+")
    assert a.zarr_format == 2 and not a.read_only
    a[0] = 5
    assert zarr.open_array(tmp_path / "v2.zarr", zarr_format=2)[...].tolist() == [5, 2, 3]
