"""Reading Zarr v2: metadata translated to v3 (pure), arrays and groups written by zarr-python in
v2 read back bit-exact, and v2 nodes kept read-only."""

from __future__ import annotations

import base64
import json
import os

import numcodecs
import numpy as np
import pytest
from sample_data import files_under

import zarr3_backend as z3
from zarr3_backend.core.metadata import parse_node_json
from zarr3_backend.core.metadata_v2 import (
    V2_MARKER,
    array_document,
    consolidated_documents,
    group_document,
    v2_fill_value_is_null,
)
from zarr3_backend.errors import (
    ArrayNotFoundError,
    CorruptionError,
    DataTypeError,
    MetadataError,
    NodeNotFoundError,
    ReadOnlyError,
    UnknownCodecError,
    ZarrV2Error,
)


def _zarray(**fields) -> dict:
    base = {
        "zarr_format": 2,
        "shape": [10, 6],
        "chunks": [4, 4],
        "dtype": "<f4",
        "compressor": None,
        "fill_value": "NaN",
        "order": "C",
        "filters": None,
    }
    base.update(fields)
    return base


#: A structure with fields of both byte orders: zarr-python writes it, the v3 bytes codec has one.
_MIXED_ENDIAN = np.dtype([("a", "<i4"), ("b", ">i4")])


# ---- translation (pure) ------------------------------------------------------------------------
def test_array_document_maps_every_v2_field_to_its_v3_place():
    doc = array_document(
        _zarray(
            dtype=">i4",
            order="F",
            fill_value=7,
            dimension_separator="/",
            filters=[{"id": "delta", "dtype": ">i4"}, {"id": "shuffle", "elementsize": 4}],
            compressor={"id": "zlib", "level": 3},
        ),
        {"_ARRAY_DIMENSIONS": ["y", "x"], "units": "K"},
        "g/a",
    )
    assert doc["data_type"] == "int32" and doc["fill_value"] == 7
    assert doc["chunk_grid"] == {"name": "regular", "configuration": {"chunk_shape": [4, 4]}}
    assert doc["chunk_key_encoding"] == {"name": "v2", "configuration": {"separator": "/"}}
    assert doc["codecs"] == [
        {"name": "transpose", "configuration": {"order": [1, 0]}},  # F order
        {"name": "numcodecs.delta", "configuration": {"dtype": "<i4"}},  # works on native values
        {"name": "bytes", "configuration": {"endian": "big"}},  # the stored bytes' order
        {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},  # a bytes filter
        {"name": "numcodecs.zlib", "configuration": {"level": 3}},
    ]
    assert doc["dimension_names"] == ["y", "x"]
    assert doc["attributes"] == {"_ARRAY_DIMENSIONS": ["y", "x"], "units": "K"}  # kept as stored
    meta = parse_node_json(doc, "g/a")  # a valid v3 document: every codec known, chain in order
    assert meta.extra_fields[V2_MARKER]["fill_value"] == 7 and not v2_fill_value_is_null(meta)


def test_array_document_types_and_fill_values():
    text = array_document(_zarray(dtype="|O", filters=[{"id": "vlen-utf8"}], fill_value=""))
    assert text["data_type"] == "string" and text["codecs"] == [{"name": "vlen-utf8"}]
    fixed = array_document(_zarray(dtype="<U3", fill_value="abc"))
    assert fixed["data_type"] == {"name": "fixed_length_utf32", "configuration": {"length_bytes": 12}}
    assert fixed["codecs"] == [{"name": "bytes", "configuration": {"endian": "little"}}]
    raw = array_document(_zarray(dtype="|V2", fill_value=base64.b64encode(b"\x01\x02").decode()))
    assert raw["fill_value"] == [1, 2]  # v2 writes raw bytes in base64, v3 as a list
    one_byte = array_document(_zarray(dtype="|u1", fill_value=None))
    assert one_byte["codecs"] == [{"name": "bytes"}] and one_byte["fill_value"] == 0
    assert one_byte[V2_MARKER]["fill_value"] is None  # null is remembered: nothing is masked
    assert array_document(_zarray(dimension_separator=None))["chunk_key_encoding"]["configuration"] == {
        "separator": "."
    }
    assert "dimension_names" not in array_document(_zarray(), {"_ARRAY_DIMENSIONS": ["only-one"]})


@pytest.mark.parametrize(
    ("fields", "error", "match"),
    [
        ({"zarr_format": 3}, MetadataError, r"\.zarray: field 'zarr_format' must be 2"),
        ({"shape": [10, -1]}, MetadataError, r"field 'shape'"),
        ({"chunks": [4]}, MetadataError, r"field 'chunks'.*1 dimensions"),
        ({"chunks": [4, 0]}, MetadataError, r"field 'chunks' must be positive"),
        ({"order": "K"}, MetadataError, r"field 'order'"),
        ({"dimension_separator": "-"}, MetadataError, r"field 'dimension_separator'"),
        ({"dtype": "<f16"}, DataTypeError, r"field 'dtype'"),  # long double: no v3 data type
        ({"dtype": [["a", "<i4"], ["b", ">i4"]]}, DataTypeError, r"field 'dtype'.*field 'b' is big-endian"),
        (
            {"dtype": [["a", "<i4"], ["n", [["x", "<f4"], ["y", ">u2"]]]]},
            DataTypeError,
            r"structured field 'n\.y' is big-endian",
        ),
        ({"dtype": [["a", "<i4"], ["b", "<f8", [2]]]}, DataTypeError, r"field 'b' is a sub-array"),
        ({"dtype": [["a"]]}, DataTypeError, r"field 'dtype': a structured field must be"),
        ({"dtype": {"a": "<i4"}}, DataTypeError, r"field 'dtype' must be a string or a list"),
        ({"dtype": "nope"}, DataTypeError, r"field 'dtype': 'nope' is not a data type"),
        ({"dtype": "|O", "filters": [{"id": "pickle"}]}, DataTypeError, r"'vlen-utf8' or 'vlen-bytes'"),
        (
            {"filters": [{"level": 1}]},
            MetadataError,
            r"field 'filters': a codec must be an object with an 'id'",
        ),
        (
            {"filters": [{"id": "shuffle"}, {"id": "delta"}]},
            MetadataError,
            r"array filter 'delta' after a bytes",
        ),
        ({"compressor": "zlib"}, MetadataError, r"field 'compressor'"),
    ],
)
def test_array_document_refuses_bad_v2_metadata_naming_the_field(fields, error, match):
    with pytest.raises(error, match=match) as info:
        array_document(_zarray(**fields), None, "grp/arr")
    assert str(info.value).count("grp/arr/.zarray") == 1  # named once, not once per layer


def test_bad_v2_fill_value_is_refused_by_its_data_type(tmp_path):
    root = _write_v2(tmp_path / "a.zarr", _zarray(fill_value="***"))
    with pytest.raises(DataTypeError, match=r"fill"):
        z3.open_array(root, mode="r")


def _write_v2(root, zarray: dict, zattrs: dict | None = None, chunks: dict[str, bytes] | None = None):
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, ".zarray"), "w") as f:
        json.dump(zarray, f)
    if zattrs is not None:
        with open(os.path.join(root, ".zattrs"), "w") as f:
            json.dump(zattrs, f)
    for key, data in (chunks or {}).items():
        os.makedirs(os.path.dirname(os.path.join(root, key)) or root, exist_ok=True)
        with open(os.path.join(root, key), "wb") as f:
            f.write(data)
    return root


def test_group_and_consolidated_documents():
    g = group_document({"zarr_format": 2}, {"title": "t"}, "")
    assert g["node_type"] == "group" and g["attributes"] == {"title": "t"} and V2_MARKER in g
    with pytest.raises(MetadataError, match=r"sub/\.zgroup: field 'zarr_format' must be 2"):
        group_document({"zarr_format": 3}, None, "sub")
    tree = consolidated_documents(
        {
            "zarr_consolidated_format": 1,
            "metadata": {
                ".zgroup": {"zarr_format": 2},
                ".zattrs": {"a": 1},
                "sub/.zgroup": {"zarr_format": 2},
                "sub/v/.zarray": _zarray(),
                "sub/v/.zattrs": {"units": "m"},
            },
        }
    )
    assert set(tree) == {"", "sub", "sub/v"}
    assert tree["sub"]["node_type"] == "group" and tree["sub/v"]["node_type"] == "array"
    # kept untranslated until opened: one node this package cannot read does not stop the rest
    assert tree["sub/v"]["documents"] == {".zarray": _zarray(), ".zattrs": {"units": "m"}}
    assert tree[""]["documents"][".zattrs"] == {"a": 1}
    with pytest.raises(MetadataError, match=r"\.zmetadata"):
        consolidated_documents({"zarr_consolidated_format": 2, "metadata": {}})
    with pytest.raises(MetadataError, match=r"\.zmetadata"):
        consolidated_documents([])


# ---- arrays written by zarr-python in v2, read back ----------------------------------------------
def _source(dtype, shape=(11, 7)) -> np.ndarray:
    n = int(np.prod(shape))
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return (np.arange(n) % 3 == 0).reshape(shape)
    if dtype.kind == "U":
        return np.array([f"s{i % 97}" for i in range(n)], dtype=dtype).reshape(shape)
    if dtype.kind == "S":
        return np.array([f"b{i % 97}".encode() for i in range(n)], dtype=dtype).reshape(shape)
    if dtype.kind == "O":
        return np.array([f"text-{i}" * (i % 4) for i in range(n)], dtype=object).reshape(shape)
    if dtype.kind == "c":
        return (np.arange(n) + 1j * np.arange(n)[::-1]).astype(dtype).reshape(shape)
    return (np.arange(n) % 120).astype(dtype).reshape(shape)


COMPRESSORS = {
    "none": None,
    "blosc": numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
    "zlib": numcodecs.Zlib(level=1),
    "gzip": numcodecs.GZip(level=1),
    "zstd": numcodecs.Zstd(level=1),
    "lz4": numcodecs.LZ4(),
    "bz2": numcodecs.BZ2(level=1),
}


@pytest.mark.interop
@pytest.mark.parametrize("compressor", sorted(COMPRESSORS))
@pytest.mark.parametrize("dtype", ["|b1", "|i1", "<u2", ">i4", "<f4", ">f8", "<c8", "<U5", "|S4", "|O"])
def test_zarr_python_v2_arrays_read_back(tmp_path, dtype, compressor):
    import zarr

    data = _source(dtype)
    kwargs = {"filters": [numcodecs.VLenUTF8()]} if dtype == "|O" else {}
    a = zarr.create_array(
        tmp_path / "a.zarr",
        shape=data.shape,
        chunks=(4, 3),  # edge chunks on both axes
        dtype=np.dtype(dtype) if dtype != "|O" else str,
        compressors=COMPRESSORS[compressor],
        zarr_format=2,
        **kwargs,
    )
    a[...] = data
    b = z3.open_array(tmp_path / "a.zarr", mode="r")
    assert b.zarr_format == 2 and b.shape == data.shape and b.chunks == (4, 3)
    got = b[...]
    expected = a[...]
    assert got.shape == expected.shape
    assert np.array_equal(got.astype(object) if dtype == "|O" else got, expected)
    assert np.array_equal(b[2:9:3, 5], expected[2:9:3, 5])  # partial chunks
    assert np.array_equal(b.oindex[[0, 10], [1, 6]], expected[np.ix_([0, 10], [1, 6])])


@pytest.mark.interop
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("separator", [".", "/"])
def test_zarr_python_v2_layouts_filters_and_missing_chunks(tmp_path, order, separator):
    import zarr

    data = np.arange(9 * 5 * 4, dtype="<i4").reshape(9, 5, 4) * 3
    a = zarr.create_array(
        tmp_path / "a.zarr",
        shape=data.shape,
        chunks=(4, 2, 3),
        dtype="<i4",
        filters=[numcodecs.Delta(dtype="<i4")],
        compressors=numcodecs.Zstd(level=3),
        fill_value=-5,
        order=order,
        chunk_key_encoding={"name": "v2", "separator": separator},
        zarr_format=2,
    )
    a[:4] = data[:4]  # the chunks of rows 4..8 are never written: they read as the fill value
    doc = json.loads((tmp_path / "a.zarr" / ".zarray").read_text())
    assert doc["order"] == order and doc.get("dimension_separator", ".") == separator
    b = z3.open_array(tmp_path / "a.zarr", mode="r")
    expected = np.where(np.arange(9)[:, None, None] < 4, data, -5)
    assert np.array_equal(b[...], expected) and np.array_equal(a[...], expected)
    assert b.fill_value == -5


@pytest.mark.interop
def test_null_fill_value_reads_missing_chunks_as_zero_and_masks_nothing(tmp_path):
    import xarray as xr
    import zarr

    a = zarr.create_array(
        tmp_path / "a.zarr", shape=(6,), chunks=(2,), dtype="<f8", fill_value=None, zarr_format=2
    )
    a[:2] = [1.5, 2.5]
    a.attrs["_ARRAY_DIMENSIONS"] = ["t"]
    b = z3.open_array(tmp_path / "a.zarr", mode="r")
    assert v2_fill_value_is_null(b.metadata)
    assert b[...].tolist() == [1.5, 2.5, 0, 0, 0, 0]
    assert b.dimension_names == ("t",)
    # xarray: v2 fill values mask by default, but null is no fill value, so zeros stay zeros
    root = zarr.open_group(tmp_path / "g.zarr", mode="w", zarr_format=2)
    for name, fill in (("nofill", None), ("zerofill", 0.0)):
        v = root.create_array(name, shape=(4,), chunks=(2,), dtype="<f8", fill_value=fill)
        v[:2] = [0.0, 1.0]
        v.attrs["_ARRAY_DIMENSIONS"] = ["t"]
    ds = xr.open_dataset(tmp_path / "g.zarr", engine="zarr3", consolidated=False)
    assert ds["nofill"].values.tolist() == [0.0, 1.0, 0.0, 0.0]
    assert np.isnan(ds["zerofill"].values).tolist() == [True, False, True, True]
    ref = xr.open_dataset(tmp_path / "g.zarr", engine="zarr", consolidated=False)
    xr.testing.assert_identical(ds.load(), ref.load())
    with pytest.raises(ArrayNotFoundError):
        z3.open_array(tmp_path / "missing.zarr", mode="r")


@pytest.mark.interop
@pytest.mark.parametrize("consolidated", [True, False])
def test_zarr_python_v2_hierarchy_opens_read_only_with_mode_r_and_writes_as_v2_otherwise(
    tmp_path, consolidated
):
    import zarr

    root = zarr.open_group(tmp_path / "h.zarr", mode="w", zarr_format=2)
    root.attrs["title"] = "v2"
    sub = root.create_group("sub")
    deep = sub.create_group("deep")
    x = root.create_array("x", shape=(5,), chunks=(2,), dtype="<i2", fill_value=0)
    x[...] = np.arange(5)
    y = deep.create_array("y", shape=(2, 2), chunks=(1, 2), dtype="<f4", fill_value=0)
    y[...] = [[1, 2], [3, 4]]
    if consolidated:
        zarr.consolidate_metadata(tmp_path / "h.zarr", zarr_format=2)
    before = files_under(tmp_path / "h.zarr")

    g = z3.open_group(tmp_path / "h.zarr", mode="r")
    assert g.zarr_format == 2 and g.read_only and g.attrs["title"] == "v2"
    assert sorted(g.members(max_depth=None)) == ["sub", "sub/deep", "sub/deep/y", "x"]
    assert g["x"][...].tolist() == [0, 1, 2, 3, 4]
    assert g["sub"]["deep/y"][...].tolist() == [[1, 2], [3, 4]]
    assert z3.open_array(tmp_path / "h.zarr", path="sub/deep/y")[1, 0] == 3
    assert z3.open_group(tmp_path / "h.zarr", path="sub", use_consolidated=False).zarr_format == 2
    assert "x" in g.tree() and "y" in g.tree()

    # mode="r" refuses every write, and nothing changes on disk
    for write in (
        lambda: g.create_group("new"),
        lambda: g.create_array("new", shape=(1,), dtype="i1"),
        lambda: g.attrs.update({"k": 1}),
        lambda: g["x"].__setitem__(0, 9),
        lambda: g["x"].resize((9,)),
        lambda: z3.open_array(tmp_path / "h.zarr", path="x", mode="r").__setitem__(0, 9),
    ):
        with pytest.raises(ReadOnlyError, match="read-only"):
            write()
    assert files_under(tmp_path / "h.zarr") == before

    # a writable open writes Zarr v2 that zarr-python reads (nothing becomes zarr.json)
    g = z3.open_group(tmp_path / "h.zarr", mode="a")
    g.create_group("new")
    g.create_array("arr", shape=(1,), dtype="i1", fill_value=0)[...] = 7
    g.attrs.update({"k": 1})
    g["x"][0] = 9
    g["x"].resize((7,))
    assert not any(p.name == "zarr.json" for p in (tmp_path / "h.zarr").rglob("*"))
    zg = zarr.open_group(tmp_path / "h.zarr", mode="r", zarr_format=2, use_consolidated=consolidated)
    assert zg.attrs["k"] == 1 and zg["arr"][0] == 7 and "new" in zg
    assert zg["x"][...].tolist() == [9, 1, 2, 3, 4, 0, 0]


def test_corrupt_v2_documents_raise_typed_errors_naming_the_key(tmp_path):
    root = tmp_path / "bad.zarr"
    os.makedirs(root / "arr")
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    (root / "arr" / ".zarray").write_text("{not json")
    g = z3.open_group(root, mode="r")  # children are read when opened or listed
    with pytest.raises(MetadataError, match=r"arr/\.zarray: invalid JSON"):
        g["arr"]
    with pytest.raises(MetadataError, match=r"arr/\.zarray: invalid JSON"):
        g.members()
    (root / "arr" / ".zarray").write_text(json.dumps(_zarray(compressor={"id": "no-such-codec"})))
    with pytest.raises(UnknownCodecError, match=r"arr/\.zarray: .*no-such-codec"):
        z3.open_group(root, mode="r")["arr"]
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    (root / ".zmetadata").write_text('{"zarr_consolidated_format": 1, "metadata": []}')
    with pytest.raises(MetadataError, match=r"\.zmetadata"):
        z3.open_group(root, mode="r")


def test_truncated_v2_chunk_is_a_typed_error(tmp_path):
    zarray = _zarray(shape=[4], chunks=[4], dtype="<i4", fill_value=0, compressor={"id": "zlib", "level": 1})
    good = numcodecs.Zlib(1).encode(np.arange(4, dtype="<i4").tobytes())
    root = _write_v2(tmp_path / "a.zarr", zarray, chunks={"0": good})
    assert z3.open_array(root, mode="r")[...].tolist() == [0, 1, 2, 3]
    _write_v2(root, zarray, chunks={"0": good[:-3]})
    with pytest.raises(CorruptionError, match="zlib"):
        z3.open_array(root, mode="r")[...]


@pytest.mark.interop
def test_to_zarr_adds_to_a_v2_group_as_v2_and_mode_w_replaces_it(tmp_path):
    import xarray as xr

    from zarr3_backend.errors import ArgumentError

    path = tmp_path / "v2.zarr"
    ds = xr.Dataset({"v": (("t",), np.arange(4.0))})
    ds.to_zarr(path, zarr_format=2, consolidated=True)
    before = files_under(path)
    more = xr.Dataset({"w": (("t",), np.ones(4))})
    with pytest.raises(ArgumentError, match=r"zarr_format=3 was given, but group '/' .* is Zarr v2"):
        z3.to_zarr(more, path, mode="a", zarr_format=3)
    with pytest.raises(ArgumentError, match="mode='r\\+'"):
        z3.to_zarr(more, path, mode="r+")  # a new variable, as for v3
    assert files_under(path) == before  # nothing written
    z3.to_zarr(more, path, mode="a")  # the store's format: v2
    assert (path / "w" / ".zarray").exists() and not (path / "zarr.json").exists()
    both = xr.merge([ds, more])
    xr.testing.assert_identical(xr.open_dataset(path, engine="zarr", consolidated=True).load(), both)
    z3.to_zarr(more, path, mode="w")  # replaced: a new store's format, v3 (as xarray's engine)
    assert not (path / ".zgroup").exists() and (path / "zarr.json").exists()
    xr.testing.assert_identical(xr.open_dataset(path, engine="zarr3").load(), more)


@pytest.mark.interop
def test_v2_hierarchy_without_zmetadata_is_walked_on_an_fsspec_store(tmp_path):
    import fsspec
    import zarr

    root = zarr.open_group(tmp_path / "h.zarr", mode="w", zarr_format=2)
    a = root.create_group("g").create_array("a", shape=(3, 2), chunks=(2, 2), dtype="<i8", fill_value=0)
    a[...] = [[1, 2], [3, 4], [5, 6]]
    root.create_array("b", shape=(2,), chunks=(2,), dtype="|u1", fill_value=9)  # no chunk written
    fs = fsspec.filesystem("memory")
    for d, _, files in os.walk(tmp_path / "h.zarr"):
        for f in files:
            rel = os.path.relpath(os.path.join(d, f), tmp_path / "h.zarr")
            with open(os.path.join(d, f), "rb") as fh:
                fs.pipe(f"/v2walk/{rel}", fh.read())
    g = z3.open_group("memory://v2walk", mode="r")
    assert g.zarr_format == 2 and sorted(g.members(max_depth=None)) == ["b", "g", "g/a"]
    assert g["g/a"][...].tolist() == [[1, 2], [3, 4], [5, 6]]
    assert g["b"][...].tolist() == [9, 9]
    fs.rm("/v2walk", recursive=True)


@pytest.mark.interop
@pytest.mark.parametrize(
    ("dtype", "filters"),
    [
        (">i4", [numcodecs.Delta(dtype=">i4")]),
        (">f8", [numcodecs.FixedScaleOffset(offset=1, scale=4, dtype=">f8", astype="<i4")]),
        ("<i4", [numcodecs.Delta(dtype="<i4", astype=">i2")]),
        (">i4", [numcodecs.Delta(dtype=">i4"), numcodecs.Shuffle(4)]),
        (">f4", [numcodecs.Quantize(digits=2, dtype=">f4")]),
        (">i2", [numcodecs.AsType(encode_dtype=">i4", decode_dtype=">i2")]),
        ("|u1", [numcodecs.AsType(encode_dtype=">u2", decode_dtype="|u1")]),
        ("<f8", [numcodecs.Quantize(digits=3, dtype="<f8", astype="<f4")]),
        (">f8", [numcodecs.Quantize(digits=3, dtype=">f8", astype=">f4")]),
    ],
)
def test_filters_with_a_byte_order_read_back(tmp_path, dtype, filters):
    """The filters see native values; the stored bytes have the byte order of what the last
    filter produces, which need not be the array's."""
    import zarr

    a = zarr.create_array(
        tmp_path / "a", shape=(6,), chunks=(4,), dtype=dtype, filters=filters, zarr_format=2
    )
    a[...] = [4, 2, 1, 0, 1, 25]
    assert z3.open_array(tmp_path / "a", mode="r")[...].tolist() == a[...].tolist()


def test_fill_values_zarr_python_2_wrote_are_read(tmp_path):
    obj = _write_v2(
        tmp_path / "o",
        _zarray(shape=[2], chunks=[1], dtype="|O", filters=[{"id": "vlen-utf8"}], fill_value=0),
    )
    assert z3.open_array(obj)[...].tolist() == ["0", "0"]  # what zarr-python reads too
    flag = _write_v2(tmp_path / "b", _zarray(shape=[2], chunks=[1], dtype="|b1", fill_value=0))
    assert z3.open_array(flag)[...].tolist() == [False, False]
    ints = _write_v2(tmp_path / "i", _zarray(shape=[2], chunks=[1], dtype="<i4", fill_value=3.0))
    assert z3.open_array(ints)[...].tolist() == [3, 3]
    with pytest.raises(DataTypeError, match="fill"):
        z3.open_array(_write_v2(tmp_path / "f", _zarray(dtype="<i4", fill_value=3.5)))


def _hierarchy_with_an_unreadable_array(root, consolidated: bool):
    os.makedirs(root / "other" / "bad")
    os.makedirs(root / "good")
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    (root / "other" / ".zgroup").write_text('{"zarr_format": 2}')
    (root / "good" / ".zarray").write_text(json.dumps(_zarray(shape=[2], chunks=[2], fill_value=1.5)))
    (root / "good" / ".zattrs").write_text('{"_ARRAY_DIMENSIONS": ["t"]}')
    (root / "other" / "bad" / ".zarray").write_text(json.dumps(_zarray(dtype="<f16")))
    if consolidated:
        docs = {}
        for d, _, files in os.walk(root):
            for f in files:
                rel = os.path.relpath(os.path.join(d, f), root)
                docs[rel] = json.loads(open(os.path.join(d, f)).read())
        (root / ".zmetadata").write_text(json.dumps({"zarr_consolidated_format": 1, "metadata": docs}))


@pytest.mark.parametrize("consolidated", [True, False])
def test_an_unreadable_v2_array_fails_only_when_it_is_opened(tmp_path, consolidated):
    import xarray as xr

    root = tmp_path / "h.zarr"
    _hierarchy_with_an_unreadable_array(root, consolidated)
    g = z3.open_group(root, mode="r")
    assert g["good"][...].tolist() == [1.5, 1.5]
    assert sorted(g.members(max_depth=1)) == ["good", "other"]
    with pytest.raises(DataTypeError, match=r"other/bad/\.zarray: field 'dtype'"):
        g["other/bad"]
    with pytest.raises(DataTypeError, match=r"other/bad/\.zarray"):
        g.members(max_depth=None)
    assert sorted(g["other"].members(skip_arrays=["bad"])) == []
    assert list(xr.open_dataset(root, engine="zarr3").data_vars) == ["good"]
    bad_here = tmp_path / "flat.zarr"  # the unreadable array in the opened group: drop it
    _hierarchy_with_an_unreadable_array(bad_here, consolidated)
    os.rename(bad_here / "other" / "bad", bad_here / "bad")
    if consolidated:
        (bad_here / ".zmetadata").write_text(
            (bad_here / ".zmetadata").read_text().replace('"other/bad/.zarray"', '"bad/.zarray"')
        )
    with pytest.raises(DataTypeError, match=r"bad/\.zarray"):
        xr.open_dataset(bad_here, engine="zarr3")
    assert list(xr.open_dataset(bad_here, engine="zarr3", drop_variables=["bad"]).data_vars) == ["good"]


def test_nothing_is_created_inside_a_v2_hierarchy(tmp_path):
    import xarray as xr

    path = tmp_path / "v2.zarr"
    xr.Dataset({"v": (("t",), np.arange(3.0))}).to_zarr(path, zarr_format=2, consolidated=True)
    before = files_under(path)
    new = xr.Dataset({"w": (("t",), np.ones(3))})
    for create in (
        lambda: z3.to_zarr(new, path, group="sub", zarr_format=3),
        lambda: z3.create_group(path, "sub"),
        lambda: z3.open_group(path, "sub", mode="a"),
        lambda: z3.create_array(path, path="sub/new", shape=(2,), dtype="i1"),
        lambda: z3.open_array(path, "new", mode="a", shape=(2,), dtype="i1"),
        lambda: z3.open_group(path, "v", mode="w"),
    ):
        with pytest.raises(ZarrV2Error, match=r"inside the Zarr v2 node .* create it with zarr_format=2"):
            create()
    assert files_under(path) == before
    # v2 nodes are created there: the group of a store's format, and consolidated as xarray does
    z3.to_zarr(new, path, group="sub")
    assert (path / "sub" / ".zgroup").exists() and (path / "sub" / "w" / ".zarray").exists()
    assert not list(path.rglob("zarr.json"))
    xr.testing.assert_identical(xr.open_dataset(path, engine="zarr", group="sub").load(), new)


class CountingStore(z3.MemoryStore):
    """Counts listings and fetched keys, also through its read-only twins."""

    def __init__(self, data=None, *, read_only=False, listed=None, fetched=None):
        super().__init__(data, read_only=read_only)
        self.listed: list[str] = [] if listed is None else listed
        self.fetched: list[int] = [0] if fetched is None else fetched

    def with_read_only(self, read_only=True):
        return CountingStore(self._data, read_only=read_only, listed=self.listed, fetched=self.fetched)

    def list_dir(self, prefix):
        self.listed.append(prefix)
        return super().list_dir(prefix)

    def get_many(self, keys):
        self.fetched[0] += len(keys)
        return super().get_many(keys)

    def exists_many(self, keys):
        self.fetched[0] += len(keys)
        return super().exists_many(keys)


def _copy_into(store, root, prefix=""):
    for d, _, files in os.walk(root):
        for f in files:
            rel = os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
            with open(os.path.join(d, f), "rb") as fh:
                store.set(prefix + rel, fh.read())


@pytest.mark.interop
def test_opening_one_group_of_a_large_v2_hierarchy_lists_only_what_it_opens(tmp_path):
    import xarray as xr
    import zarr

    root = zarr.open_group(tmp_path / "h.zarr", mode="w", zarr_format=2)
    for i in range(12):
        g = root.create_group(f"g{i}")
        for j in range(4):
            v = g.create_group(f"h{j}").create_array("v", shape=(4,), chunks=(1,), dtype="<f4", fill_value=0)
            v[...] = np.arange(4) + i
            v.attrs["_ARRAY_DIMENSIONS"] = ["t"]
    store = CountingStore()
    _copy_into(store, tmp_path / "h.zarr")
    ds = xr.open_dataset(store, engine="zarr3", group="g7/h2")
    assert ds["v"].values.tolist() == [7, 8, 9, 10]
    assert store.fetched[0] > 0  # (counted through the read-only twin xarray opens)
    assert len(store.listed) <= 2 and store.fetched[0] <= 20, (store.listed, store.fetched)
    store.listed.clear()
    tree = z3.open_group(store, mode="r").members(max_depth=None)
    assert len(tree) == 12 + 48 + 48 and len(store.listed) == 1 + 12 + 48  # groups only, never arrays


@pytest.mark.interop
def test_v2_nodes_inside_a_v3_group_are_left_out_of_listings_as_zarr_python_does(tmp_path):
    import xarray as xr
    import zarr

    store = CountingStore()
    g = z3.open_group(store, mode="w")
    g.create_array("a3", shape=(3,), dtype="i2", dimension_names=("t",))[...] = [1, 2, 3]
    v2 = zarr.create_array(
        tmp_path / "a2",
        shape=(400,),
        chunks=(1,),
        dtype=_MIXED_ENDIAN,  # one this package cannot read: it must not break the v3 group
        zarr_format=2,
        chunk_key_encoding={"name": "v2", "separator": "/"},
    )
    v2[:2] = np.array([(1, 2), (3, 4)], dtype=_MIXED_ENDIAN)
    _copy_into(store, tmp_path / "a2", "a2/")
    store.listed.clear()
    g = z3.open_group(store, mode="r")
    assert sorted(g.members()) == ["a3"]
    assert store.listed == [""]  # the v2 array's 400 chunk folders are never listed
    assert len(g) == 1 and "a3" in g.tree() and "a2" not in g.tree()
    with pytest.raises(DataTypeError, match=r"a2/\.zarray: field 'dtype'"):
        g["a2"]  # reachable by name, so its error says what it is
    assert list(xr.open_dataset(store, engine="zarr3").data_vars) == ["a3"]
    with pytest.raises(ZarrV2Error, match="does not delete them"):
        del z3.open_group(store, mode="a")["a2"]


@pytest.mark.interop
def test_writing_beside_a_v2_node_in_a_v3_store_keeps_it_readable_by_zarr_python(tmp_path):
    import xarray as xr
    import zarr

    root = tmp_path / "mixed.zarr"
    zarr.open_group(root, mode="w", zarr_format=3)
    old = zarr.open_group(root / "oldgrp", mode="w", zarr_format=2)
    old.create_array("x", shape=(2,), dtype="<i4", fill_value=0)[...] = [5, 6]
    z3.to_zarr(xr.Dataset({"v": ("t", [1, 2, 3])}), root, group="new")  # consolidates the root
    doc = json.loads((root / "zarr.json").read_text())
    assert set(doc["consolidated_metadata"]["metadata"]) == {"new", "new/v"}  # v2 nodes left out
    assert sorted(zarr.open_group(root, mode="r").group_keys()) == ["new"]
    xr.testing.assert_identical(
        xr.open_dataset(root, engine="zarr3", group="new").load(),
        xr.open_dataset(root, engine="zarr", group="new").load(),
    )
    assert z3.open_group(root, mode="r")["oldgrp/x"][...].tolist() == [5, 6]
    z3.consolidate_metadata(root, "oldgrp")  # the v2 group's own .zmetadata, as zarr-python writes it
    consolidated = zarr.open_group(root / "oldgrp", mode="r", zarr_format=2, use_consolidated=True)
    assert consolidated["x"][...].tolist() == [5, 6]
    assert not (root / "oldgrp" / "zarr.json").exists()


def test_zmetadata_keys_are_normalised_and_a_bad_one_ignored_when_not_used(tmp_path):
    root = tmp_path / "h.zarr"
    os.makedirs(root / "lead")
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    (root / "lead" / ".zgroup").write_text('{"zarr_format": 2}')
    meta = {
        ".zgroup": {"zarr_format": 2},
        "/lead/.zgroup": {"zarr_format": 2},
        "trail//.zgroup": {"zarr_format": 2},
    }
    (root / ".zmetadata").write_text(json.dumps({"zarr_consolidated_format": 1, "metadata": meta}))
    assert sorted(z3.open_group(root, mode="r").members()) == ["lead", "trail"]
    meta["../up/.zgroup"] = {"zarr_format": 2}
    (root / ".zmetadata").write_text(json.dumps({"zarr_consolidated_format": 1, "metadata": meta}))
    with pytest.raises(MetadataError, match=r"\.zmetadata: key '\.\./up/\.zgroup'"):
        z3.open_group(root, mode="r")
    (root / ".zmetadata").write_text("{not json")
    with pytest.raises(MetadataError, match=r"\.zmetadata: invalid JSON"):
        z3.open_group(root, mode="r")
    # the escape hatch: the hierarchy is listed instead, .zmetadata never read
    assert sorted(z3.open_group(root, mode="r", use_consolidated=False).members()) == ["lead"]
    assert z3.open_array(_write_v2(root / "arr", _zarray()), mode="r").shape == (10, 6)


@pytest.mark.interop
def test_to_zarr_refuses_to_write_over_other_nodes_before_writing(tmp_path):
    import xarray as xr
    import zarr

    from zarr3_backend.errors import NodeExistsError

    root = tmp_path / "mixed.zarr"
    z3.open_group(root, mode="w").create_group("grp").create_array("keep", shape=(1,), dtype="i1")
    zarr.create_array(root / "extra", shape=(3,), dtype="<i4", zarr_format=2)[...] = [1, 2, 3]
    before = files_under(root)
    for name, error in (("extra", ZarrV2Error), ("grp", NodeExistsError)):  # a v2 node, a v3 group
        with pytest.raises(error, match=f"cannot write variable '{name}'"):
            z3.to_zarr(xr.Dataset({name: ("t", [7, 8, 9])}), root, mode="a")
    assert files_under(root) == before
    # a v3 group someone made inside a v2 hierarchy is not written into either
    v2 = tmp_path / "v2.zarr"
    zarr.open_group(v2, mode="w", zarr_format=2)
    z3.open_group(tmp_path / "scratch.zarr", mode="w")
    os.makedirs(v2 / "sub")
    (v2 / "sub" / "zarr.json").write_bytes((tmp_path / "scratch.zarr" / "zarr.json").read_bytes())
    before = files_under(v2)
    with pytest.raises(ZarrV2Error, match=r"inside the Zarr v2 node of '\.zgroup'"):
        z3.to_zarr(xr.Dataset({"v": ("t", [1])}), v2, group="sub", mode="a")
    assert files_under(v2) == before


@pytest.mark.interop
def test_v2_nodes_make_no_implicit_groups(tmp_path):
    import zarr

    root = tmp_path / "h.zarr"
    g = z3.open_group(root, mode="w")
    g.create_array("a", shape=(1,), dtype="i1")
    zarr.create_array(root / "d" / "x", shape=(2,), dtype="<i2", zarr_format=2)  # "d" has no metadata
    v2 = zarr.open_group(tmp_path / "v2.zarr", mode="w", zarr_format=2)
    v2.create_array("a", shape=(1,), dtype="i1")
    zarr.create_array(tmp_path / "v2.zarr" / "plain" / "x", shape=(1,), dtype="i1", zarr_format=2)
    assert sorted(z3.open_group(root, mode="r").members(max_depth=None)) == ["a"]
    assert sorted(z3.open_group(tmp_path / "v2.zarr", mode="r").members(max_depth=None)) == ["a"]
    with pytest.raises(NodeNotFoundError):
        del z3.open_group(root, mode="a")["d"]
    assert (root / "d" / "x" / ".zarray").exists()


def test_an_error_in_a_zmetadata_entry_says_it_comes_from_there(tmp_path):
    root = tmp_path / "h.zarr"
    _write_v2(root / "a", _zarray())
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    meta = {".zgroup": {"zarr_format": 2}, "a/.zarray": _zarray(dtype="<f16")}
    (root / ".zmetadata").write_text(json.dumps({"zarr_consolidated_format": 1, "metadata": meta}))
    with pytest.raises(DataTypeError, match=r"in a consolidated \.zmetadata: a/\.zarray: field 'dtype'"):
        z3.open_group(root, mode="r")["a"]
    assert z3.open_array(root, path="a", mode="r").shape == (10, 6)  # the file itself is fine


def test_nczarr_dimension_names_are_read_as_xarray_reads_them(tmp_path):
    import xarray as xr

    root = tmp_path / "nc.zarr"
    (tmp_path / "nc.zarr").mkdir()
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    (root / ".zattrs").write_text('{"_nczarr_group": {"dims": {"time": 3}}, "title": "nc"}')
    zarray = _zarray(shape=[3], chunks=[3], dtype="<f8", fill_value=None)
    zarray["_NCZARR_ARRAY"] = {"dimrefs": ["/time"], "storage": "chunked"}
    chunk = np.array([1.0, 2.0, 3.0], dtype="<f8").tobytes()
    _write_v2(root / "t", zarray, {"units": "K", "_nczarr_attr": {"types": {"units": "<U1"}}}, {"0": chunk})
    assert z3.open_array(root, path="t").dimension_names == ("time",)
    ds = xr.open_dataset(root, engine="zarr3", consolidated=False)
    xr.testing.assert_identical(ds.load(), xr.open_dataset(root, engine="zarr", consolidated=False).load())
    assert ds["t"].dims == ("time",) and ds["t"].attrs == {"units": "K"} and ds.attrs == {"title": "nc"}
