"""Hypothesis fuzzing of Zarr v2 metadata: ``.zarray``/``.zattrs``/``.zgroup``/``.zmetadata``.

Generated documents mix valid and invalid values in every field the v2 reader looks at
(structured dtypes, nested too; filters and compressor configurations; fill values of every
dtype, NaN spellings, base64). Each one is translated (``metadata_v2``), written back
(``metadata_v2_write``), stored beside chunk bytes, opened, read, written and listed. The only
allowed outcomes are success or a ``Zarr3Error``. The address space is capped as in
``test_corruption`` (a document-driven giant allocation fails as ``MemoryError``).
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zarr3_backend as z3
from tests.test_corruption import _memory_cap  # noqa: F401  (autouse: caps the address space)
from tests.test_fuzz_layout import (
    _SETTINGS,
    _typed,
    _warm_pools,  # noqa: F401  (autouse: threads started before the cap)
    budget,
)
from tests.test_fuzz_metadata import _FILLS, _SCALARS, _SIZES
from zarr3_backend.core.consolidate import consolidated_root_document
from zarr3_backend.core.metadata import parse_node_json
from zarr3_backend.core.metadata_v2 import array_document, consolidated_documents, group_document
from zarr3_backend.core.metadata_v2_write import node_documents, zarray_document
from zarr3_backend.errors import CodecError, DataTypeError, MetadataError, Zarr3Error
from zarr3_backend.numeric_json import non_finite_spelled

# --- strategies --------------------------------------------------------------------------------
_SIMPLE_DTYPES = [
    "<i4", ">i8", "|i1", "<u2", ">u8", "|u1", "|b1", "<f2", ">f4", "<f8", "<c8", ">c16",
    "|S0", "|S4", "<U0", "<U3", ">U2", "|O", "<M8[s]", ">m8[ns]", "<M8", "|V2", "|V0", "<f16",
]  # fmt: skip
_BAD_DTYPES: list[Any] = [
    "",
    "x",
    "<i3",
    "int32",
    "float64",
    "|V-1",
    "<U99999999999",
    "S2**40",
    5,
    None,
    {},
    [],
]
_names = st.sampled_from(["a", "b", "c", "", "a.b", "\u00e9", "0"])


def _structured(depth: int) -> st.SearchStrategy:
    leaf = st.sampled_from(_SIMPLE_DTYPES + ["<i4", "<f8", "|u1"] * 3)
    ftype = leaf if depth == 0 else st.one_of(leaf, _structured(depth - 1))
    bad = st.one_of(
        st.tuples(_names, ftype, st.lists(st.integers(0, 3), max_size=2)).map(list),  # sub-array
        st.sampled_from([[], ["a"], [1, "<i4"], "a", None, ["a", 5]]),
    )
    field = st.integers(0, 9).flatmap(lambda i: bad if i == 7 else st.tuples(_names, ftype).map(list))
    return st.lists(field, min_size=1, max_size=4)


dtypes = st.one_of(
    st.sampled_from(_SIMPLE_DTYPES),
    st.sampled_from(_BAD_DTYPES),
    _structured(2),
    st.text(max_size=6),
)

_CODEC_POOL: list[Any] = [
    {"id": "zlib", "level": 1},
    {"id": "zlib", "level": 2**40},
    {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0},
    {"id": "blosc", "cname": "nope", "clevel": 5, "shuffle": 7},
    {"id": "blosc", "blocksize": 2**62},
    {"id": "zstd", "level": 0},
    {"id": "zstd", "level": "x"},
    {"id": "gzip", "level": 1},
    {"id": "bz2", "level": 1},
    {"id": "lzma"},
    {"id": "crc32"},
    {"id": "adler32"},
    {"id": "shuffle", "elementsize": 4},
    {"id": "shuffle", "elementsize": 0},
    {"id": "delta", "dtype": "<i4"},
    {"id": "delta", "dtype": ">i8", "astype": "<i2"},
    {"id": "delta", "dtype": "nope"},
    {"id": "delta", "dtype": 5},
    {"id": "fixedscaleoffset", "offset": 1, "scale": 10, "dtype": "<f8", "astype": "<i4"},
    {"id": "fixedscaleoffset", "offset": "NaN", "scale": 0, "dtype": "<f8", "astype": "|u1"},
    {"id": "quantize", "digits": 2, "dtype": "<f8"},
    {"id": "astype", "encode_dtype": ">f4", "decode_dtype": "<f8"},
    {"id": "packbits"},
    {"id": "categorize", "labels": ["a", "b"], "dtype": "|O", "astype": "|u1"},
    {"id": "vlen-utf8"},
    {"id": "vlen-bytes"},
    {"id": "vlen-array", "dtype": "<i4"},
    {"id": "json2"},
    {"id": "pickle"},
    {"id": "nonexistent_codec"},
    {"id": 5},
    {"id": None},
    {},
    "zlib",
    None,
    [],
]
codecs = st.one_of(st.sampled_from(_CODEC_POOL), st.sampled_from(_SCALARS))
filters = st.one_of(st.none(), st.just([]), st.lists(codecs, max_size=3), st.sampled_from(_SCALARS))
fill_values = st.one_of(
    st.sampled_from(_FILLS),
    st.sampled_from(["NaN", "nan", "Infinity", "-Infinity", "inf", "-inf", "Inf", "NAN"]),
    st.sampled_from(["AAAA", "AAA=", "AA==", "////", "=", "A", "AAAAAAAAAAA=", "!!!!", "AAE="]),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.lists(st.one_of(st.floats(), st.integers(), st.text(max_size=2)), max_size=3),
    st.text(max_size=5),
    st.sampled_from(_SCALARS),
)
shapes = st.lists(st.integers(0, 7), min_size=0, max_size=3)


def _mostly(draw: st.DrawFn, good: st.SearchStrategy, bad: st.SearchStrategy) -> Any:
    """A value from ``good`` seven times in eight, else from ``bad`` (so most documents get deep)."""
    return draw(bad) if draw(st.integers(0, 7)) == 3 else draw(good)


def _fitting_fill(draw: st.DrawFn, dtype: Any) -> Any:
    """A fill value of the form the v2 spec gives for ``dtype`` (when it is one)."""
    try:
        npdt = np.dtype([tuple(f) for f in dtype] if isinstance(dtype, list) else dtype)
    except Exception:
        return draw(fill_values)
    kind = npdt.kind
    if kind in "SV":
        size = draw(st.sampled_from([npdt.itemsize] * 3 + [0, npdt.itemsize + 1]))
        return base64.b64encode(draw(st.binary(min_size=size, max_size=size))).decode()
    if kind == "f":
        return draw(st.one_of(st.floats(width=16), st.sampled_from(["NaN", "Infinity", "-Infinity"])))
    if kind == "c":
        return [draw(st.one_of(st.floats(width=32), st.just("NaN"))) for _ in range(2)]
    if kind in "iumM":
        return draw(st.integers(-(2**64), 2**64))
    if kind == "b":
        return draw(st.sampled_from([True, False, 0, 1]))
    return draw(st.one_of(st.text(max_size=4), st.integers(), st.floats()))


@st.composite
def zarrays(draw: st.DrawFn) -> dict[str, Any]:
    """A ``.zarray`` document, each field mostly valid and at times damaged."""
    shape = draw(shapes)
    chunks = [draw(st.integers(1, 4)) for _ in shape]
    dtype = _mostly(draw, st.one_of(st.sampled_from(_SIMPLE_DTYPES), _structured(2)), dtypes)
    obj = isinstance(dtype, str) and dtype == "|O"
    first = [draw(st.sampled_from([{"id": "vlen-utf8"}, {"id": "vlen-bytes"}]))] if obj else []
    doc: dict[str, Any] = {
        "zarr_format": _mostly(draw, st.just(2), st.sampled_from([3, "2", True, None])),
        "shape": shape,
        "chunks": chunks,
        "dtype": dtype,
        "compressor": _mostly(draw, st.one_of(st.none(), st.sampled_from(_CODEC_POOL[:10])), codecs),
        "fill_value": _mostly(
            draw, st.one_of(st.none(), st.just(None).map(lambda _: _fitting_fill(draw, dtype))), fill_values
        ),
        "order": _mostly(draw, st.sampled_from(["C", "F"]), st.sampled_from(["X", None, 1])),
        "filters": _mostly(
            draw,
            st.lists(st.sampled_from(_CODEC_POOL[:24]), max_size=2).map(lambda f: first + f or None),
            filters,
        ),
        "dimension_separator": _mostly(
            draw, st.sampled_from([".", "/"]), st.sampled_from([None, "", "\\", 0])
        ),
    }
    if draw(st.integers(0, 7)) == 5:  # damage one field more
        field = draw(st.sampled_from(sorted(doc)))
        choice = draw(st.integers(0, 3))
        if choice == 0:
            del doc[field]
        elif choice == 1:
            doc[field] = draw(st.sampled_from(_SCALARS))
        elif choice == 2 and shape:
            doc[draw(st.sampled_from(["shape", "chunks"]))][draw(st.integers(0, len(shape) - 1))] = draw(
                st.sampled_from(_SIZES)
            )
        else:
            doc["_NCZARR_ARRAY"] = draw(
                st.sampled_from([{"dimrefs": ["/a", "/b/c"]}, {"dimrefs": [1]}, [], "x"])
            )
    return doc


zattrs = st.one_of(
    st.just({}),
    st.fixed_dictionaries(
        {"_ARRAY_DIMENSIONS": st.one_of(st.lists(st.text(max_size=3), max_size=3), st.sampled_from(_SCALARS))}
    ),
    st.dictionaries(st.text(max_size=4), st.sampled_from(_SCALARS), max_size=3),
    st.sampled_from([[], "x", 1, None]),
)


# --- exercising --------------------------------------------------------------------------------
def _store(files: dict[str, bytes]) -> z3.MemoryStore:
    store = z3.MemoryStore()
    for key, value in files.items():
        store.set(key, value)
    return store


def _dump(doc: Any) -> bytes:
    return json.dumps(doc, allow_nan=True).encode()


def _exercise_array(store: z3.Store, path: str) -> None:
    """Open, read, write, list: everything a user does with an array of unknown health."""
    group = _typed(z3.open_group, store, mode="r")
    if group is not None:
        _typed(group.members, max_depth=None)
        _typed(group.tree)
    a = _typed(z3.open_array, store, path=path, mode="r+")
    if a is None:
        return
    repr(a), a.fill_value, a.chunks, dict(a.attrs)
    _typed(lambda: a.info)
    if a.nbytes <= 2**20:
        got = _typed(lambda: a[...])
        if got is not None and a.size:
            first = tuple(0 for _ in a.shape)  # a 0-d array reads as a scalar (np.bytes_: no [()])
            _typed(a.__setitem__, first, np.asarray(got)[first])
    _typed(a.attrs.__setitem__, "fuzz", 1)
    _typed(a.resize, tuple(s + 1 for s in a.shape))


@settings(max_examples=budget(500), **_SETTINGS)
@given(zarray=zarrays(), attrs=zattrs)
def test_zarray_translation_round_trip(zarray, attrs):
    """``.zarray`` -> v3 document -> metadata -> ``.zarray`` again: success or a typed error, and
    a document that translates is written back to one that translates to the same metadata."""
    zarray, attrs = json.loads(_dump(zarray)), json.loads(_dump(attrs))  # as a store holds them
    doc = _typed(array_document, zarray, attrs, "a")
    if doc is None:
        return
    meta = _typed(parse_node_json, doc, "a")
    if meta is None:
        return
    docs = node_documents("a", meta)
    again = parse_node_json(array_document(json.loads(docs["a/.zarray"]), json.loads(docs["a/.zattrs"]), "a"))
    assert again.evolve(attributes={}, extra_fields={}) == meta.evolve(attributes={}, extra_fields={})
    for name in ("attributes", "extra_fields"):  # a bare NaN is written back as "NaN"
        assert non_finite_spelled(getattr(again, name)) == non_finite_spelled(getattr(meta, name))
    fresh = _typed(zarray_document, meta.evolve(extra_fields={}))  # encoded field by field
    if fresh is not None:
        _typed(lambda: parse_node_json(array_document(fresh, attrs, "a"), "a"))


@settings(max_examples=budget(300), **_SETTINGS)
@given(
    zarray=zarrays(),
    attrs=zattrs,
    chunk=st.one_of(st.binary(max_size=64), st.just(b"")),
    sep_local=st.booleans(),
)
def test_zarray_stores_open_read_write(zarray, attrs, chunk, sep_local):
    """A store holding the generated ``.zarray`` and one chunk of arbitrary bytes."""
    store = z3.MemoryStore()
    store.set(".zgroup", b'{"zarr_format": 2}')
    store.set("a/.zarray", _dump(zarray))
    store.set("a/.zattrs", _dump(attrs))
    sep = zarray.get("dimension_separator") if zarray.get("dimension_separator") in (".", "/") else "."
    ndim = len(zarray["shape"]) if isinstance(zarray.get("shape"), list) else 1
    store.set("a/" + sep.join(["0"] * max(ndim, 1)), chunk)
    _exercise_array(store, "a")


# --- .zmetadata whose members contradict their own documents -----------------------------------
@st.composite
def consolidated_stores(draw: st.DrawFn) -> dict[str, bytes]:
    """The files of a v2 root group holding ``x``, whose ``.zmetadata`` entries are generated
    independently of (and so contradict) the stored documents."""
    store: dict[str, bytes] = {}
    stored = {"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<i4", "compressor": None,
              "fill_value": 0, "order": "C", "filters": None}  # fmt: skip
    store[".zgroup"] = b'{"zarr_format": 2}'
    store["x/.zarray"] = _dump(stored)
    store["x/0"] = store["x/1"] = np.arange(2, dtype="<i4").tobytes()
    entries: dict[str, Any] = {
        ".zgroup": draw(st.sampled_from([{"zarr_format": 2}, {}, [], None, {"zarr_format": 3}]))
    }
    for _ in range(draw(st.integers(0, 4))):
        key = draw(
            st.sampled_from(
                ["x/.zarray", "x/.zattrs", "x/.zgroup", "y/.zarray", "x/y/.zarray", "/x/.zarray", "x//.zarray",
                 "../x/.zarray", "./x/.zarray", "x/../.zarray", ".zattrs", "x/.zmetadata", "", "/", "z/.zgroup"]
            )
        )  # fmt: skip
        entries[key] = draw(
            st.one_of(zarrays(), zattrs, st.sampled_from(_SCALARS), st.just({"zarr_format": 2}))
        )
    zmeta: Any = {
        "zarr_consolidated_format": draw(st.sampled_from([1, 1, 1, 2, "1", None])),
        "metadata": entries,
    }
    if draw(st.integers(0, 9)) == 0:
        zmeta = draw(st.sampled_from([[], {"metadata": []}, {"metadata": None}, "x", {}]))
    store[".zmetadata"] = _dump(zmeta)
    return store


@settings(max_examples=budget(300), **_SETTINGS)
@given(files=consolidated_stores(), use=st.sampled_from([None, True, False]))
def test_zmetadata_contradicting_members(files, use):
    """Open through the ``.zmetadata``: every member read, written and listed."""
    store = _store(files)
    group = _typed(z3.open_group, store, mode="r", use_consolidated=use)
    if group is not None:
        _typed(group.members, max_depth=None)
        _typed(group.tree)
        for name in ("x", "y", "z", "x/y"):
            node = _typed(group.__getitem__, name)
            if isinstance(node, z3.Array) and node.nbytes <= 2**20:
                _typed(lambda node=node: node[...])
        _typed(consolidated_documents, json.loads(store.get(".zmetadata")))
    _exercise_array(store, "x")
    _typed(z3.consolidate_metadata, store)
    g = _typed(z3.open_group, store, mode="r+")
    if g is not None:
        _typed(g.attrs.__setitem__, "fuzz", 1)  # patches or rebuilds the .zmetadata
        _typed(g.create_array, "new", shape=(2,), dtype="i4")


def test_group_document_rejects_every_non_v2_header():
    """``.zgroup`` documents that are not ``{"zarr_format": 2}``: a typed error naming the key."""
    for bad in [[], "x", None, 1, {}, {"zarr_format": 3}, {"zarr_format": True}, {"zarr_format": "2"}]:
        with pytest.raises(Zarr3Error, match=r"g/\.zgroup"):
            group_document(bad, None, "g")


# --- regressions: inputs the fuzzers found --------------------------------------------------------
def _v2_root_with_x(zmetadata: bytes) -> z3.MemoryStore:
    store = _store(
        {
            ".zgroup": b'{"zarr_format": 2}',
            "x/.zarray": _dump({"zarr_format": 2, "shape": [2], "chunks": [2], "dtype": "<i4",
                                "compressor": None, "fill_value": 0, "order": "C", "filters": None}),
            ".zmetadata": zmetadata,
        }
    )  # fmt: skip
    return store


def test_attribute_write_keeps_a_zmetadata_with_bare_nan_valid():
    """A ``.zmetadata`` holding a bare ``NaN`` (zarr-python 2 writes attributes so) is patched
    by an attribute write (was: ``ValueError: Out of range float values``), and the NaN it held
    stays a number (it would otherwise turn into the string ``"NaN"``)."""
    store = _v2_root_with_x(
        b'{"zarr_consolidated_format": 1, "metadata": {".zgroup": {"zarr_format": 2}, '
        b'".zattrs": {"missing": NaN}, "x/.zgroup": NaN}}'
    )
    a = z3.open_array(store, path="x", mode="r+")
    a.attrs["units"] = "K"
    doc = json.loads(store.get(".zmetadata"))
    assert math.isnan(doc["metadata"][".zattrs"]["missing"])
    assert doc["metadata"]["x/.zattrs"] == {"units": "K"}


def test_attribute_write_refuses_a_deeply_nested_zmetadata():
    """A ``.zmetadata`` nested 100,000 levels deep is refused naming it when a member's write
    patches it (was: ``RecursionError`` from ``json.loads``)."""
    store = _v2_root_with_x(b'{"metadata": {"deep": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}")
    a = z3.open_array(store, path="x", mode="r+")
    with pytest.raises(MetadataError, match=r"\.zmetadata: JSON nested deeper"):
        a.attrs["units"] = "K"


def test_v2_writer_refuses_variable_length_strings_through_the_bytes_codec():
    """A ``string`` array (what a ``<U0`` ``.zarray`` was once read as; that is now refused)
    whose filter hands integers to ``bytes``: encoding it as a new ``.zarray`` is a
    ``CodecError`` naming the serializer (was: numpy's ``TypeError: Cannot use DescrNewByteOrder``)."""
    doc = {"zarr_format": 3, "node_type": "array", "shape": [], "data_type": "string",
           "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": []}},
           "chunk_key_encoding": {"name": "v2", "configuration": {"separator": "."}}, "fill_value": "",
           "codecs": [{"name": "numcodecs.fixedscaleoffset",
                       "configuration": {"offset": 1, "scale": 10, "dtype": "<f8", "astype": "<i4"}},
                      {"name": "bytes", "configuration": {"endian": "little"}}]}  # fmt: skip
    meta = parse_node_json(doc, "a")
    with pytest.raises(CodecError, match=r"serializer.*'string'"):
        zarray_document(meta)


def test_consolidating_refuses_a_deeply_nested_root_document():
    """``consolidate_metadata`` over a root ``zarr.json`` nested 100,000 levels deep: a
    ``MetadataError`` naming it (was: ``RecursionError`` from ``json.loads``)."""
    store = _store({"zarr.json": b"[" * 100_000 + b"]" * 100_000})
    with pytest.raises(MetadataError, match=r"zarr.json: JSON nested deeper"):
        consolidated_root_document(store, None)


# --- creating v2 arrays: the writing side ------------------------------------------------------------
_V2_CODEC_ARGS: list[Any] = [
    None,
    "auto",
    [],
    {"id": "zlib", "level": 1},
    {"name": "zstd", "configuration": {"level": 1}},
    {"name": "gzip", "configuration": {"level": 1}},
    {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 1, "shuffle": "bitshuffle"}},
    {"name": "crc32c"},
    {"name": "sharding_indexed", "configuration": {"chunk_shape": [1]}},
    {"name": "transpose", "configuration": {"order": [0]}},
    {"name": "numcodecs.delta", "configuration": {"dtype": "<i4"}},
    {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
    {"name": "vlen-utf8"},
    {"name": "bytes", "configuration": {"endian": "big"}},
    "zlib",
    5,
]
_V2_CREATE_DTYPES: list[Any] = [
    "int32", ">f8", "bool", "complex64", "uint64", "S3", "U2", "<M8[s]", "m8[ms]", str, "V4", object,
    [("x", "<i4"), ("y", ">f4")], [("x", "<i2"), ("y", [("z", "u1")])], "float16", "int128", None,
]  # fmt: skip


@settings(max_examples=budget(200), **_SETTINGS)
@given(
    dtype=st.sampled_from(_V2_CREATE_DTYPES),
    fill=st.one_of(st.none(), fill_values),
    compressors=st.one_of(
        st.sampled_from(_V2_CODEC_ARGS), st.lists(st.sampled_from(_V2_CODEC_ARGS), max_size=2)
    ),
    filters=st.one_of(st.none(), st.lists(st.sampled_from(_V2_CODEC_ARGS), max_size=2)),
    serializer=st.sampled_from(["auto", *_V2_CODEC_ARGS]),
    order=st.sampled_from(["C", "F", "K"]),
    separator=st.sampled_from([None, ".", "/", "-"]),
)
def test_creating_v2_arrays(dtype, fill, compressors, filters, serializer, order, separator):
    """``create_array(..., zarr_format=2)`` with generated arguments: a typed error before
    anything is written, or an array whose documents read back and round-trip its values."""
    store = z3.MemoryStore()
    a = _typed(
        z3.create_array,
        store,
        path="a",
        shape=(3, 2),
        chunks=(2, 2),
        dtype=dtype,
        fill_value=fill,
        compressors=compressors,
        filters=filters,
        serializer=serializer,
        order=order,
        dimension_separator=separator,
        zarr_format=2,
    )
    if a is None:
        assert not [k for k in store.list() if k.startswith("a/")], "a refused create wrote documents"
        return
    assert a.zarr_format == 2
    again = z3.open_array(store, path="a")
    assert again.metadata == a.metadata
    values = _typed(lambda: a[...])
    if values is not None:
        _typed(a.__setitem__, ..., values)
        got = again[...]
        assert got.shape == values.shape
    _exercise_array(store, "a")


def test_a_structured_fill_value_out_of_a_fields_range_is_a_data_type_error():
    """``fill_value=[2**31, 0.0]`` for ``[("x", "<i4"), ("y", ">f4")]``, given to
    ``create_array(zarr_format=2)`` or stored as a list in a ``zarr.json``: a ``DataTypeError``
    naming the field (was: numpy's ``OverflowError``)."""
    dtype = [("x", "<i4"), ("y", ">f4")]
    store = z3.MemoryStore()
    with pytest.raises(DataTypeError, match=r"field 'x'.*out of range"):
        z3.create_array(store, path="a", shape=(2,), dtype=dtype, fill_value=[2**31, 0.0], zarr_format=2)
    assert list(store.list()) == []
    a = z3.create_array(store, path="b", shape=(2,), dtype=dtype, fill_value=[7, "NaN"])
    assert a.fill_value["x"] == 7 and np.isnan(a.fill_value["y"])
    doc = json.loads(store.get("b/zarr.json"))
    doc["fill_value"] = [2**31, 0.0]
    store.set("b/zarr.json", json.dumps(doc).encode())
    with pytest.raises(DataTypeError, match="field 'x'"):
        z3.open_array(store, path="b")
