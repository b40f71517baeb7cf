"""zarr.json metadata, chunk grid and chunk key encodings: spec rules, errors, zarr-python interop."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from zarr3_backend.codecs import ChunkSpec, CodecChain
from zarr3_backend.core.chunk_grid import RegularChunkGrid, parse_chunk_grid
from zarr3_backend.core.chunk_key_encoding import (
    DefaultChunkKeyEncoding,
    V2ChunkKeyEncoding,
    parse_chunk_key_encoding,
)
from zarr3_backend.core.dtypes import parse_data_type
from zarr3_backend.core.metadata import ArrayMetadata, GroupMetadata, parse_node, parse_node_json, to_bytes
from zarr3_backend.errors import (
    CodecError,
    DataTypeError,
    InvalidKeyError,
    MetadataError,
    SelectionError,
    ShapeError,
    UnknownCodecError,
    UnknownFieldError,
)


def array_doc(**changes: Any) -> dict[str, Any]:
    """A valid array document (the spec's example, smaller) with ``changes`` applied."""
    doc: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [10, 7],
        "data_type": "float64",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 3]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "NaN",
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": {"foo": 42, "bar": "apples", "baz": [1, 2, 3]},
        "dimension_names": ["rows", None],
    }
    doc.update(changes)
    return doc


def strict_loads(data: bytes) -> Any:
    """json.loads that fails on the non-standard NaN/Infinity tokens."""

    def refuse(token: str) -> Any:
        raise AssertionError(f"bare {token} in written JSON")

    return json.loads(data, parse_constant=refuse)


# --- chunk grid ---------------------------------------------------------------------------------
def test_chunk_grid_json_round_trip() -> None:
    obj = {"name": "regular", "configuration": {"chunk_shape": [2, 5]}}
    grid = RegularChunkGrid.from_json(obj)
    assert grid.chunk_shape == (2, 5)
    assert grid.to_json() == obj
    assert parse_chunk_grid(obj) == grid
    assert parse_chunk_grid(grid) is grid


@pytest.mark.parametrize(
    ("obj", "culprit"),
    [
        ({"name": "regular", "configuration": {"chunk_shape": [2, 0]}}, "chunk_shape"),
        ({"name": "regular", "configuration": {"chunk_shape": [-1]}}, "chunk_shape"),
        ({"name": "regular", "configuration": {"chunk_shape": [2.0]}}, "chunk_shape"),
        ({"name": "regular", "configuration": {"chunk_shape": [True]}}, "chunk_shape"),
        ({"name": "regular", "configuration": {"chunk_shape": 4}}, "chunk_shape"),
        ({"name": "regular", "configuration": {}}, "chunk_shape"),
        ("regular", "chunk_shape"),
        ({"name": "regular", "configuration": {"chunk_shape": [1], "x": 1}}, "'x'"),
        ({"name": "rectilinear", "configuration": {"chunk_shapes": [[1]]}}, "'rectilinear'"),
        ({"configuration": {"chunk_shape": [1]}}, "chunk_grid"),
    ],
)
def test_chunk_grid_errors(obj: Any, culprit: str) -> None:
    with pytest.raises(MetadataError) as err:
        parse_chunk_grid(obj)
    assert culprit in str(err.value)


@pytest.mark.parametrize(
    ("shape", "chunks", "grid"),
    [
        ((10, 200, 3000), (5, 20, 400), (2, 10, 8)),  # the spec's example
        ((8, 6), (2, 3), (4, 2)),
        ((0, 5), (3, 2), (0, 3)),
        ((0,), (7,), (0,)),
        ((1,), (100,), (1,)),
        ((), (), ()),
    ],
)
def test_grid_shape(shape: tuple, chunks: tuple, grid: tuple) -> None:
    assert RegularChunkGrid(chunks).grid_shape(shape) == grid


def test_grid_shape_dimension_mismatch() -> None:
    with pytest.raises(ShapeError):
        RegularChunkGrid((2, 2)).grid_shape((4,))


def test_chunk_region_clipped_at_edge() -> None:
    grid = RegularChunkGrid((4, 3))
    assert grid.chunk_region((0, 0), (10, 7)) == (slice(0, 4), slice(0, 3))
    assert grid.chunk_region((2, 2), (10, 7)) == (slice(8, 10), slice(6, 7))
    assert RegularChunkGrid(()).chunk_region((), ()) == ()
    for bad in [(3, 0), (0, -1), (0,)]:
        with pytest.raises(SelectionError, match=str(bad).replace("(", r"\(").replace(")", r"\)")):
            grid.chunk_region(bad, (10, 7))


def test_iter_chunk_coords_c_order_and_cover() -> None:
    grid = RegularChunkGrid((4, 3))
    coords = list(grid.iter_chunk_coords((10, 7)))
    assert coords == [(i, j) for i in range(3) for j in range(3)]
    # the regions tile the array exactly once
    seen = np.zeros((10, 7), dtype=int)
    for c in coords:
        seen[grid.chunk_region(c, (10, 7))] += 1
    assert (seen == 1).all()
    assert list(grid.iter_chunk_coords((0, 7))) == []
    assert list(RegularChunkGrid(()).iter_chunk_coords(())) == [()]


# --- chunk key encodings ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("encoding", "coords", "key"),
    [
        (DefaultChunkKeyEncoding(), (1, 23, 45), "c/1/23/45"),
        (DefaultChunkKeyEncoding("."), (1, 23, 45), "c.1.23.45"),
        (DefaultChunkKeyEncoding(), (), "c"),
        (DefaultChunkKeyEncoding("."), (), "c"),
        (DefaultChunkKeyEncoding(), (0,), "c/0"),
        (V2ChunkKeyEncoding(), (1, 23, 45), "1.23.45"),
        (V2ChunkKeyEncoding("/"), (1, 23, 45), "1/23/45"),
        (V2ChunkKeyEncoding(), (7,), "7"),
    ],
)
def test_chunk_keys(encoding: Any, coords: tuple, key: str) -> None:
    assert encoding.encode_chunk_key(coords) == key
    assert encoding.decode_chunk_key(key) == coords
    assert encoding.decode_chunk_key(key, ndim=len(coords)) == coords


def test_v2_zero_dimensional_key() -> None:
    enc = V2ChunkKeyEncoding()
    assert enc.encode_chunk_key(()) == "0"
    assert enc.decode_chunk_key("0", ndim=0) == ()
    assert enc.decode_chunk_key("0") == (0,)


def test_chunk_keys_accept_numpy_coords() -> None:
    assert DefaultChunkKeyEncoding().encode_chunk_key((np.int64(3), np.intp(4))) == "c/3/4"


@pytest.mark.parametrize(
    ("encoding", "key"),
    [
        (DefaultChunkKeyEncoding(), "d/1"),
        (DefaultChunkKeyEncoding(), "c/1/x"),
        (DefaultChunkKeyEncoding(), "c/01"),
        (DefaultChunkKeyEncoding(), "c/-1"),
        (DefaultChunkKeyEncoding(), "c/"),
        (DefaultChunkKeyEncoding(), "c.1"),
        (DefaultChunkKeyEncoding(), "zarr.json"),
        (V2ChunkKeyEncoding(), "1..2"),
        (V2ChunkKeyEncoding(), "1/2"),
        (V2ChunkKeyEncoding(), ".zarray"),
    ],
)
def test_decode_refuses_non_chunk_keys(encoding: Any, key: str) -> None:
    with pytest.raises(InvalidKeyError) as err:
        encoding.decode_chunk_key(key)
    assert repr(key) in str(err.value)


def test_decode_checks_ndim() -> None:
    with pytest.raises(InvalidKeyError, match="3 dimensions"):
        DefaultChunkKeyEncoding().decode_chunk_key("c/1/2", ndim=3)


def test_encode_refuses_negative_coords() -> None:
    with pytest.raises(InvalidKeyError):
        DefaultChunkKeyEncoding().encode_chunk_key((1, -1))


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ("default", DefaultChunkKeyEncoding("/")),
        ("v2", V2ChunkKeyEncoding(".")),
        ({"name": "default"}, DefaultChunkKeyEncoding("/")),
        ({"name": "default", "configuration": {"separator": "."}}, DefaultChunkKeyEncoding(".")),
        ({"name": "v2", "configuration": {"separator": "/"}}, V2ChunkKeyEncoding("/")),
        ({"name": "v2", "configuration": {}}, V2ChunkKeyEncoding(".")),
    ],
)
def test_parse_chunk_key_encoding(obj: Any, expected: Any) -> None:
    enc = parse_chunk_key_encoding(obj)
    assert enc == expected
    assert parse_chunk_key_encoding(enc.to_json()) == enc
    assert enc.to_json() == {"name": enc.name, "configuration": {"separator": enc.separator}}


def test_default_and_v2_with_same_separator_differ() -> None:
    assert DefaultChunkKeyEncoding(".") != V2ChunkKeyEncoding(".")


@pytest.mark.parametrize(
    ("obj", "culprit"),
    [
        ({"name": "default", "configuration": {"separator": "-"}}, "'-'"),
        ({"name": "v2", "configuration": {"separator": ""}}, "''"),
        ({"name": "v2", "configuration": {"separator": "/", "x": 1}}, "'x'"),
        ("v3", "'v3'"),
        ({"name": "default", "configuration": "/"}, "configuration"),
        (5, "chunk_key_encoding"),
    ],
)
def test_chunk_key_encoding_errors(obj: Any, culprit: str) -> None:
    with pytest.raises(MetadataError) as err:
        parse_chunk_key_encoding(obj)
    assert culprit in str(err.value)


# --- array metadata: happy paths ----------------------------------------------------------------
def test_parse_the_spec_example() -> None:
    meta = ArrayMetadata.from_json(array_doc(), "foo/bar")
    assert meta.shape == (10, 7)
    assert meta.data_type == parse_data_type("float64")
    assert meta.chunk_grid == RegularChunkGrid((4, 3))
    assert meta.chunk_key_encoding == DefaultChunkKeyEncoding("/")
    assert np.isnan(meta.fill_value) and meta.fill_value.dtype == np.float64
    assert [c.name for c in meta.codecs] == ["bytes"]
    assert meta.attributes == {"foo": 42, "bar": "apples", "baz": [1, 2, 3]}
    assert meta.dimension_names == ("rows", None)
    assert meta.storage_transformers == ()
    assert meta.extra_fields == {}


ROUND_TRIP_DOCS = {
    "spec-example": array_doc(),
    "nan-payload": array_doc(data_type="float32", fill_value="0x7fc00123"),
    "float16-hex": array_doc(data_type="float16", fill_value="0x7c01"),
    "complex": array_doc(data_type="complex64", fill_value=["-Infinity", "NaN"]),
    "raw": array_doc(data_type="r24", fill_value=[1, 2, 3], codecs=["bytes"]),
    "uint64-max": array_doc(data_type="uint64", fill_value=2**64 - 1),
    "bool": array_doc(data_type="bool", fill_value=True, codecs=[{"name": "bytes"}]),
    "zero-dim": array_doc(
        shape=[], chunk_grid={"name": "regular", "configuration": {"chunk_shape": []}}, dimension_names=[]
    ),
    "empty-axis": array_doc(shape=[0, 7]),
    "v2-keys": array_doc(chunk_key_encoding={"name": "v2", "configuration": {"separator": "."}}),
    "no-dims-no-attrs": {k: v for k, v in array_doc().items() if k not in ("dimension_names", "attributes")},
    "extra-field": array_doc(my_ext={"must_understand": False, "value": [1, 2]}),
    "ignorable-transformer": array_doc(storage_transformers=[{"name": "cache", "must_understand": False}]),
    "compressed": array_doc(
        codecs=[
            {"name": "transpose", "configuration": {"order": [1, 0]}},
            {"name": "bytes", "configuration": {"endian": "big"}},
            {"name": "gzip", "configuration": {"level": 3}},
            {"name": "crc32c"},
        ]
    ),
}


@pytest.mark.parametrize("name", ROUND_TRIP_DOCS)
def test_round_trip(name: str) -> None:
    meta = ArrayMetadata.from_json(copy.deepcopy(ROUND_TRIP_DOCS[name]), "a")
    again = ArrayMetadata.from_json(meta.to_json(), "a")
    assert again == meta
    assert hash(again) == hash(meta)
    assert np.array(again.fill_value).tobytes() == np.array(meta.fill_value).tobytes()
    via_bytes = parse_node(to_bytes(meta), "a")
    assert via_bytes == meta
    assert to_bytes(via_bytes) == to_bytes(meta)  # deterministic


def test_nan_payload_written_in_hex() -> None:
    meta = ArrayMetadata.from_json(array_doc(data_type="float32", fill_value="0x7fc00123"))
    assert strict_loads(to_bytes(meta))["fill_value"] == "0x7fc00123"
    assert meta != ArrayMetadata.from_json(array_doc(data_type="float32", fill_value="NaN"))


def test_field_order_and_format() -> None:
    meta = ArrayMetadata.from_json(
        array_doc(
            my_ext={"must_understand": False}, storage_transformers=[{"name": "t", "must_understand": False}]
        )
    )
    data = to_bytes(meta)
    doc = strict_loads(data)
    assert list(doc) == [
        "zarr_format",
        "node_type",
        "shape",
        "data_type",
        "chunk_grid",
        "chunk_key_encoding",
        "fill_value",
        "codecs",
        "attributes",
        "storage_transformers",
        "dimension_names",
        "my_ext",
    ]
    assert data.startswith(b'{\n  "zarr_format": 3,\n  "node_type": "array",')


def test_written_json_has_no_bare_nan_or_infinity() -> None:
    attrs = {
        "nan": float("nan"),
        "list": [np.inf, -np.inf, 1.5],
        "nested": {"x": np.float32("nan"), "ok": np.int64(3), "arr": np.array([1.0, np.nan])},
        "flag": np.bool_(True),
    }
    meta = ArrayMetadata.from_json(
        array_doc(data_type="complex128", fill_value=["NaN", "Infinity"], attributes=attrs)
    )
    doc = strict_loads(to_bytes(meta))
    assert doc["fill_value"] == ["NaN", "Infinity"]
    assert doc["attributes"] == {
        "nan": "NaN",
        "list": ["Infinity", "-Infinity", 1.5],
        "nested": {"x": "NaN", "ok": 3, "arr": [1.0, "NaN"]},
        "flag": True,
    }


def test_unwritable_attribute_is_named() -> None:
    meta = ArrayMetadata.from_json(array_doc(attributes={"good": 1, "deep": {"bad": object()}}))
    with pytest.raises(MetadataError, match=r"attributes\.deep\.bad"):
        to_bytes(meta)
    meta = ArrayMetadata.from_json(array_doc(attributes={"deep": {1: "x"}}))
    with pytest.raises(MetadataError, match=r"attributes\.deep"):
        to_bytes(meta)


def test_reads_bare_nan_in_attributes() -> None:
    # zarr-python writes NaN tokens in attributes; reading them must work
    data = json.dumps(array_doc(attributes={"missing_value": float("nan")})).encode()
    assert "NaN" in data.decode()
    meta = parse_node(data, "a")
    assert np.isnan(meta.attributes["missing_value"])


def test_extension_short_hand_and_object_forms_mean_the_same() -> None:
    short = ArrayMetadata.from_json(
        array_doc(data_type="uint8", fill_value=0, chunk_key_encoding="default", codecs=["bytes"])
    )
    long = ArrayMetadata.from_json(
        array_doc(
            data_type={"name": "uint8"},
            fill_value=0,
            chunk_key_encoding={"name": "default", "configuration": {"separator": "/"}},
            codecs=[{"name": "bytes", "configuration": {}}],
        )
    )
    assert short == long
    assert to_bytes(short) == to_bytes(long)


def test_must_understand_keys_inside_extensions_are_allowed() -> None:
    meta = ArrayMetadata.from_json(
        array_doc(
            data_type={"name": "float64", "must_understand": True},
            chunk_grid={"name": "regular", "configuration": {"chunk_shape": [4, 3]}, "must_understand": True},
            chunk_key_encoding={"name": "v2", "must_understand": True},
            codecs=[{"name": "bytes", "configuration": {"endian": "little"}, "must_understand": True}],
        )
    )
    assert meta.chunk_key_encoding == V2ChunkKeyEncoding()


def test_unknown_extension_with_must_understand_false_still_fails_where_spec_forbids_it() -> None:
    # the spec does not allow must_understand=false for data types, chunk grids and key encodings
    with pytest.raises(DataTypeError, match="'mystery'"):
        ArrayMetadata.from_json(array_doc(data_type={"name": "mystery", "must_understand": False}))
    with pytest.raises(MetadataError, match="'mystery'"):
        ArrayMetadata.from_json(array_doc(chunk_key_encoding={"name": "mystery", "must_understand": False}))


def test_chunk_spec_and_codec_chain() -> None:
    meta = ArrayMetadata.from_json(array_doc(data_type="int16", fill_value=-1))
    assert meta.chunk_spec == ChunkSpec((4, 3), np.dtype("int16"), np.int16(-1))
    chain = meta.codec_chain()
    assert isinstance(chain, CodecChain)
    assert chain is meta.codec_chain()
    assert chain.spec.shape == (4, 3)
    chunk = np.arange(12, dtype="int16").reshape(4, 3)
    assert (chain.decode(chain.encode(chunk)) == chunk).all()


def test_evolve_revalidates() -> None:
    meta = ArrayMetadata.from_json(array_doc(data_type="float32", fill_value="0x7fc00123"))
    bigger = meta.evolve(shape=(20, 7))
    assert bigger.shape == (20, 7) and meta.shape == (10, 7)
    assert np.array(bigger.fill_value).tobytes() == np.array(meta.fill_value).tobytes()
    assert bigger.codec_chain().spec.shape == (4, 3)
    with pytest.raises(MetadataError, match="shape"):
        meta.evolve(shape=(20,))
    with pytest.raises(MetadataError, match="dimension_names"):
        meta.evolve(dimension_names=("a", "b", "c"))


def test_constructor_takes_objects_and_loose_forms() -> None:
    meta = ArrayMetadata(
        shape=[6],
        data_type="float32",
        chunk_grid={"name": "regular", "configuration": {"chunk_shape": [3]}},
        chunk_key_encoding="default",
        fill_value=np.nan,
        codecs=[{"name": "bytes", "configuration": {"endian": "little"}}],
    )
    assert meta.shape == (6,) and meta.attributes == {} and meta.dimension_names is None
    assert isinstance(meta.fill_value, np.float32) and np.isnan(meta.fill_value)
    assert ArrayMetadata.from_json(meta.to_json()) == meta


# --- array metadata: unhappy paths --------------------------------------------------------------
REQUIRED = [
    "zarr_format",
    "node_type",
    "shape",
    "data_type",
    "chunk_grid",
    "chunk_key_encoding",
    "fill_value",
    "codecs",
]


@pytest.mark.parametrize("field", REQUIRED)
def test_missing_required_field_is_named(field: str) -> None:
    doc = array_doc()
    del doc[field]
    with pytest.raises(MetadataError) as err:
        ArrayMetadata.from_json(doc, "group/arr")
    assert repr(field) in str(err.value)
    assert "'group/arr'" in str(err.value)


def test_unknown_field_is_an_error_naming_it() -> None:
    for value in [1, "x", {"a": 1}, {"must_understand": True}, {"must_understand": "false"}]:
        with pytest.raises(UnknownFieldError) as err:
            ArrayMetadata.from_json(array_doc(mystery=value), "arr")
        assert "'mystery'" in str(err.value) and "'arr'" in str(err.value)


def test_unknown_field_marked_must_understand_false_is_kept() -> None:
    ext = {"must_understand": False, "payload": {"k": [1, 2]}}
    meta = ArrayMetadata.from_json(array_doc(mystery=ext))
    assert meta.extra_fields == {"mystery": ext}
    assert strict_loads(to_bytes(meta))["mystery"] == ext


@pytest.mark.parametrize(
    ("changes", "error", "culprit"),
    [
        ({"zarr_format": 2}, MetadataError, "zarr_format"),
        ({"zarr_format": "3"}, MetadataError, "zarr_format"),
        ({"zarr_format": True}, MetadataError, "zarr_format"),
        ({"node_type": "dataset"}, MetadataError, "node_type"),
        ({"shape": [-1, 7]}, MetadataError, "shape"),
        ({"shape": [1.5, 7]}, MetadataError, "shape"),
        ({"shape": [True, 7]}, MetadataError, "shape"),
        ({"shape": 10}, MetadataError, "shape"),
        ({"shape": [10]}, MetadataError, "chunk_grid"),
        ({"data_type": "float128"}, DataTypeError, "'float128'"),
        ({"data_type": "int8", "fill_value": 300}, DataTypeError, "300"),
        ({"fill_value": None}, DataTypeError, "float64"),
        ({"fill_value": "0x7ff8"}, DataTypeError, "0x7ff8"),
        (
            {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [0, 3]}}},
            MetadataError,
            "chunk_shape",
        ),
        (
            {"chunk_key_encoding": {"name": "default", "configuration": {"separator": ":"}}},
            MetadataError,
            "':'",
        ),
        ({"codecs": []}, MetadataError, "codecs"),
        ({"codecs": {"name": "bytes"}}, MetadataError, "codecs"),
        ({"codecs": [{"name": "no-such-codec"}]}, UnknownCodecError, "no-such-codec"),
        ({"codecs": [{"name": "gzip", "configuration": {"level": 1}}]}, CodecError, "gzip"),
        ({"attributes": [1, 2]}, MetadataError, "attributes"),
        ({"dimension_names": ["a"]}, MetadataError, "dimension_names"),
        ({"dimension_names": ["a", 1]}, MetadataError, "dimension_names"),
        ({"dimension_names": "ab"}, MetadataError, "dimension_names"),
        ({"storage_transformers": [{"name": "sharding"}]}, MetadataError, "'sharding'"),
        ({"storage_transformers": ["x"]}, MetadataError, "'x'"),
        ({"storage_transformers": {"name": "x"}}, MetadataError, "storage_transformers"),
    ],
)
def test_invalid_documents(changes: dict, error: type[Exception], culprit: str) -> None:
    with pytest.raises(error) as err:
        parse_node(json.dumps(array_doc(**changes)).encode(), "g/arr")
    message = str(err.value)
    assert culprit in message
    assert "g/arr" in message


def test_array_from_json_refuses_a_group_document() -> None:
    with pytest.raises(MetadataError, match="node_type") as err:
        ArrayMetadata.from_json(array_doc(node_type="group"), "g/arr")
    assert "'g/arr'" in str(err.value)


def test_codec_errors_keep_their_type_and_name_the_path() -> None:
    with pytest.raises(UnknownCodecError) as err:
        ArrayMetadata.from_json(array_doc(codecs=["bytes", "snappy-ish"]), "x/y")
    assert "'x/y'" in str(err.value) and "snappy-ish" in str(err.value)
    assert isinstance(err.value.__cause__, UnknownCodecError)


@pytest.mark.parametrize(
    ("data", "culprit"),
    [
        (b"{", "invalid JSON"),
        (b"\xff\xfe", "invalid JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"node_type": "array"}', "zarr_format"),
        (b'{"zarr_format": 3}', "node_type"),
        (b'{"zarr_format": 3, "node_type": "dataset"}', "'dataset'"),
        (b'{"zarr_format": 2, "node_type": "group"}', "zarr_format"),
    ],
)
def test_parse_node_errors_name_the_document(data: bytes, culprit: str) -> None:
    with pytest.raises(MetadataError) as err:
        parse_node(data, "some/node")
    assert culprit in str(err.value)
    assert "some/node/zarr.json" in str(err.value)


def test_parse_node_dispatches() -> None:
    assert isinstance(parse_node(json.dumps(array_doc()), "a"), ArrayMetadata)
    group = parse_node(b'{"zarr_format": 3, "node_type": "group"}', "")
    assert group == GroupMetadata(attributes={})
    assert isinstance(
        parse_node_json({"zarr_format": 3, "node_type": "group", "attributes": {"a": 1}}), GroupMetadata
    )


# --- group metadata -----------------------------------------------------------------------------
def test_group_round_trip() -> None:
    doc = {"zarr_format": 3, "node_type": "group", "attributes": {"spam": "ham", "eggs": 42}}
    meta = GroupMetadata.from_json(doc, "g")
    assert meta.attributes == {"spam": "ham", "eggs": 42}
    assert meta.consolidated_metadata is None
    assert meta.to_json() == doc
    assert GroupMetadata.from_json(strict_loads(to_bytes(meta))) == meta
    assert list(strict_loads(to_bytes(meta))) == ["zarr_format", "node_type", "attributes"]


def test_group_consolidated_metadata_inline() -> None:
    child = array_doc()
    cm = {
        "kind": "inline",
        "must_understand": False,
        "metadata": {"a": child, "sub": {"zarr_format": 3, "node_type": "group"}},
    }
    meta = GroupMetadata.from_json({"zarr_format": 3, "node_type": "group", "consolidated_metadata": cm})
    assert meta.consolidated_metadata == cm
    written = strict_loads(to_bytes(meta))
    assert written["consolidated_metadata"]["metadata"]["a"]["fill_value"] == "NaN"
    assert GroupMetadata.from_json(written) == meta
    assert (
        GroupMetadata.from_json({"zarr_format": 3, "node_type": "group", "consolidated_metadata": None})
        == GroupMetadata()
    )


@pytest.mark.parametrize(
    "cm",
    [
        {"kind": "inline", "must_understand": False, "metadata": [1]},
        {"kind": "inline", "metadata": {"a": 1}},
        {"kind": "remote"},
        "inline",
    ],
)
def test_group_bad_consolidated_metadata(cm: Any) -> None:
    with pytest.raises(MetadataError) as err:
        GroupMetadata.from_json({"zarr_format": 3, "node_type": "group", "consolidated_metadata": cm}, "g")
    assert "consolidated_metadata" in str(err.value) and "'g'" in str(err.value)


def test_group_unknown_consolidated_kind_may_be_ignored() -> None:
    cm = {"kind": "remote", "must_understand": False, "url": "x"}
    meta = GroupMetadata.from_json({"zarr_format": 3, "node_type": "group", "consolidated_metadata": cm})
    assert meta.consolidated_metadata is None
    assert strict_loads(to_bytes(meta))["consolidated_metadata"] == cm


def test_group_unknown_fields() -> None:
    with pytest.raises(UnknownFieldError, match="'extra'") as err:
        GroupMetadata.from_json({"zarr_format": 3, "node_type": "group", "extra": 1}, "my/group")
    assert "'my/group'" in str(err.value)
    ext = {"must_understand": False, "v": 1}
    meta = GroupMetadata.from_json({"zarr_format": 3, "node_type": "group", "extra": ext})
    assert meta.extra_fields == {"extra": ext}
    assert strict_loads(to_bytes(meta))["extra"] == ext
    with pytest.raises(UnknownFieldError):
        GroupMetadata(attributes={}, extra_fields={"extra": {"v": 1}})
    with pytest.raises(MetadataError, match="attributes"):
        GroupMetadata.from_json({"zarr_format": 3, "node_type": "group", "attributes": "x"})


# --- documents written by zarr-python -----------------------------------------------------------
def _zarr_python_cases() -> dict[str, dict[str, Any]]:
    from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, TransposeCodec

    return {
        "float32-nan-blosc": dict(
            dtype="float32",
            fill_value=np.nan,
            compressors=BloscCodec(cname="lz4", clevel=3, shuffle="bitshuffle"),
        ),
        "float64-default": dict(dtype="float64"),
        "float16-neg-inf-big-endian": dict(
            dtype="float16", fill_value=-np.inf, serializer=BytesCodec(endian="big")
        ),
        "big-endian-numpy-float": dict(dtype=">f8", fill_value=0.1),
        "complex128-inf-nan": dict(dtype="complex128", fill_value=complex(np.inf, np.nan)),
        "complex64-default": dict(dtype="complex64"),
        "uint64-max-v2-keys": dict(
            dtype="uint64", fill_value=2**64 - 1, chunk_key_encoding={"name": "v2", "separator": "."}
        ),
        "int16-transpose-gzip-crc": dict(
            dtype="int16",
            fill_value=-3,
            filters=[TransposeCodec(order=(1, 0))],
            compressors=[GzipCodec(level=5), Crc32cCodec()],
        ),
        "bool-dot-keys": dict(
            dtype="bool",
            fill_value=True,
            compressors=None,
            chunk_key_encoding={"name": "default", "separator": "."},
        ),
        "int8-default": dict(dtype="int8"),
        "raw-bytes": dict(dtype="V3", fill_value=b"abc"),
        "sharded": dict(dtype="float64", fill_value=-1.5, shards=(4, 6)),
    }


@pytest.mark.interop
@pytest.mark.filterwarnings("ignore::UserWarning:zarr.*", "ignore::FutureWarning:zarr.*")
@pytest.mark.parametrize("case", list(_zarr_python_cases()))
def test_zarr_python_documents_parse_and_reserialise(case: str, tmp_path: Path) -> None:
    kwargs = _zarr_python_cases()[case]
    path = tmp_path / "a.zarr"
    original = zarr.create_array(
        zarr.storage.LocalStore(path),
        shape=(8, 6),
        chunks=(2, 3),
        dimension_names=["y", None],
        attributes={"units": "K", "list": [1, 2]},
        **kwargs,
    )
    written = (path / "zarr.json").read_bytes()
    baseline = zarr.open_array(zarr.storage.LocalStore(path)).metadata.to_dict()  # its own reading
    meta = parse_node(written, "a")
    assert isinstance(meta, ArrayMetadata)
    assert meta.shape == original.shape
    assert meta.data_type.numpy == original.dtype.newbyteorder("=")
    assert (
        meta.chunk_grid.chunk_shape == original.metadata.chunk_grid.chunk_shape
    )  # the shard shape if sharded
    assert meta.dimension_names == ("y", None)
    assert meta.attributes == {"units": "K", "list": [1, 2]}
    expected_fill = np.array(original.fill_value, dtype=meta.data_type.numpy)
    assert np.array(meta.fill_value).tobytes() == expected_fill.tobytes()

    ours = to_bytes(meta)
    strict_loads(ours)
    # zarr-python reads our document to exactly the metadata it reads from its own
    (path / "zarr.json").write_bytes(ours)
    reopened = zarr.open_array(zarr.storage.LocalStore(path))
    assert reopened.metadata.to_dict() == baseline
    # and our parser gives the same object from our own bytes
    assert parse_node(ours, "a") == meta


@pytest.mark.interop
def test_zarr_python_default_fill_values_match_ours(tmp_path: Path) -> None:
    from zarr3_backend.core.dtypes import default_fill_value, fill_value_to_json

    for name in ["bool", "int32", "uint8", "float16", "float32", "float64", "complex64", "complex128"]:
        path = tmp_path / f"{name}.zarr"
        zarr.create_array(zarr.storage.LocalStore(path), shape=(2,), dtype=name)
        theirs = json.loads((path / "zarr.json").read_bytes())["fill_value"]
        dt = parse_data_type(name)
        ours = fill_value_to_json(default_fill_value(dt), dt)
        assert ours == theirs and type(ours) is type(theirs), name


@pytest.mark.interop
@pytest.mark.filterwarnings("ignore::UserWarning:zarr.*", "ignore::FutureWarning:zarr.*")
def test_zarr_python_nan_attributes_and_consolidated_group(tmp_path: Path) -> None:
    store = zarr.storage.LocalStore(tmp_path / "g.zarr")
    root = zarr.create_group(store, attributes={"title": "t", "missing": float("nan")})
    root.create_array("sub/a", shape=(3,), dtype="i4", chunk_key_encoding={"name": "v2", "separator": "."})
    zarr.consolidate_metadata(store)
    raw = (tmp_path / "g.zarr" / "zarr.json").read_bytes()
    meta = parse_node(raw, "")
    assert isinstance(meta, GroupMetadata)
    assert meta.attributes["title"] == "t" and np.isnan(meta.attributes["missing"])
    docs = meta.consolidated_metadata["metadata"]
    assert set(docs) == {"sub", "sub/a"}
    child = parse_node_json(docs["sub/a"], "sub/a")
    assert isinstance(child, ArrayMetadata) and child.chunk_key_encoding == V2ChunkKeyEncoding(".")
    assert isinstance(parse_node_json(docs["sub"], "sub"), GroupMetadata)
    ours = to_bytes(meta)
    # a rewrite keeps the bare NaN zarr-python wrote (spelled as a string it would turn the
    # attribute into text); values set anew are spelled as strings (test_attribute_nan.py)
    assert np.isnan(json.loads(ours)["attributes"]["missing"])
    # zarr-python opens our group document with the same consolidated children
    (tmp_path / "g.zarr" / "zarr.json").write_bytes(ours)
    reopened = zarr.open_group(store, mode="r")
    assert reopened.attrs["title"] == "t" and np.isnan(reopened.attrs["missing"])
    assert sorted(reopened.metadata.consolidated_metadata.flattened_metadata) == ["sub", "sub/a"]
