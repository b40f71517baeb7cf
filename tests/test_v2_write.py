"""Zarr v2 writing of arrays and groups: ``.zarray``/``.zattrs``/``.zgroup`` as zarr-python 3.1.6
writes them, values through the v2 codec chain under v2 chunk keys, read back by us and by
zarr-python value for value, in both directions; the metadata encoder is the inverse of the
reader's translation; what v2 cannot express is refused, naming the argument."""

from __future__ import annotations

import json
from pathlib import Path

import numcodecs
import numpy as np
import pytest
from zmetadata_oracle import fresh_zmetadata

import zarr3_backend as z3
from zarr3_backend.core.metadata_v2_write import (
    fill_value_json,
    metadata_from_documents,
    node_documents,
    v2_array_metadata,
    zarray_document,
)
from zarr3_backend.errors import ArgumentError, CodecError, ReadOnlyError, ZarrV2Error

zarr = pytest.importorskip("zarr")
pytestmark = pytest.mark.interop


def _values(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Distinct, non-fill values of ``dtype`` (every element differs from its neighbours)."""
    n = int(np.prod(shape))
    k = np.arange(1, n + 1)
    dt = np.dtype(dtype) if dtype != "str" else np.dtype(object)
    if dt.kind == "b":
        out = k % 3 == 0
    elif dt.kind in "iu":
        out = (k % 100 + 1).astype(dt)
    elif dt.kind == "f":
        out = (k * 0.5).astype(dt)
    elif dt.kind == "c":
        out = (k + 1j * k[::-1]).astype(dt)
    elif dt.kind == "M":
        out = (np.datetime64("2000-01-01", "s") + k.astype("m8[h]")).astype(dt)
    elif dt.kind == "m":
        out = k.astype(dt)
    elif dt.kind == "S":
        out = np.array([b"x" * (i % dt.itemsize + 1) for i in range(n)], dtype=dt)
    elif dt.kind == "U":
        out = np.array(["é" * (i % (dt.itemsize // 4) + 1) for i in range(n)], dtype=dt)
    else:
        out = np.array(["s" * (i % 5) + str(i) for i in range(n)], dtype=object)
    return out.reshape(shape)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype.kind in "mM":
        return a.shape == b.shape and bool(np.array_equal(a.view("i8"), b.view("i8")))
    if a.dtype.kind == "f" or a.dtype.kind == "c":
        return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))
    return a.shape == b.shape and bool(np.all(a == b))


# dtype, fill value, extra create_array arguments
CASES = [
    ("i1", 0, {}),
    ("<u2", 7, {"compressors": None}),
    ("<i4", None, {"compressors": "gzip"}),
    (">i8", -1, {"compressors": numcodecs.Zstd(level=3)}),
    ("<f4", np.nan, {"compressors": "blosc"}),
    ("<f8", np.inf, {"compressors": numcodecs.Blosc(cname="zstd", clevel=3, shuffle=2)}),
    (">f8", -np.inf, {"order": "F"}),
    ("bool", True, {"dimension_separator": "/"}),
    ("<c16", complex(1, np.nan), {"order": "F"}),
    ("<M8[s]", np.datetime64("NaT"), {}),
    ("<m8[ms]", 5, {"dimension_separator": "/"}),
    ("|S4", b"ab", {"compressors": "zstd"}),
    ("<U3", "zz", {"order": "F"}),
    ("str", "", {}),
    ("<i4", 0, {"filters": [numcodecs.Delta(dtype="<i4")]}),
    ("<f8", 0.0, {"filters": [numcodecs.FixedScaleOffset(offset=1, scale=10, dtype="<f8", astype="<i4")]}),
]
SHAPES = [((7,), (3,)), ((5, 6), (2, 4)), ((3, 4, 5), (2, 3, 2)), ((2, 3, 4, 5), (1, 2, 3, 2))]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_create_array_v2_round_trips_through_zarr_python(tmp_path, case):
    dtype, fill, kwargs = CASES[case]
    shape, chunks = SHAPES[case % len(SHAPES)]
    path = tmp_path / "a.zarr"
    a = z3.create_array(
        path, shape=shape, chunks=chunks, dtype=dtype if dtype != "str" else str, fill_value=fill,
        zarr_format=2, **kwargs,
    )  # fmt: skip
    values = _values(dtype, shape)
    if dtype == "<f8" and "filters" in kwargs:
        values = np.round(values, 1)  # FixedScaleOffset keeps one decimal
    a[...] = values
    zarray = json.loads((path / ".zarray").read_text())
    assert zarray["zarr_format"] == 2 and zarray["shape"] == list(shape) and zarray["chunks"] == list(chunks)
    assert zarray["order"] == kwargs.get("order", "C")
    assert zarray["dimension_separator"] == kwargs.get("dimension_separator", ".")
    assert not (path / "zarr.json").exists()
    b = zarr.open_array(path, mode="r", zarr_format=2)
    assert _same(np.asarray(b[...]), values) and _same(z3.open_array(path)[...], values)
    # a partial write, then growth: edge chunks and fill values, read by both
    a = z3.open_array(path, mode="r+")
    part = tuple(slice(1, n) for n in shape)
    a[part] = values[tuple(slice(0, n - 1) for n in shape)]
    expected = values.copy()
    expected[part] = values[tuple(slice(0, n - 1) for n in shape)]
    a.resize(tuple(n + 1 for n in shape))
    ours, theirs = z3.open_array(path)[...], np.asarray(zarr.open_array(path, mode="r", zarr_format=2)[...])
    inner = tuple(slice(0, n) for n in shape)
    assert _same(ours[inner], expected) and _same(theirs[inner], expected)
    assert _same(ours, theirs)  # the grown cells: the fill value (or v2's "none": zeros) in both


@pytest.mark.parametrize("case", [0, 2, 4, 8, 9, 11, 12, 13, 15])
def test_zarr_python_writes_v2_we_overwrite_and_append_zarr_python_reads(tmp_path, case):
    dtype, fill, kwargs = CASES[case]
    shape, chunks = SHAPES[case % len(SHAPES)]
    zkw = {}
    if "order" in kwargs:
        zkw["order"] = kwargs["order"]
    if "filters" in kwargs:
        zkw["filters"] = kwargs["filters"]
    if isinstance(kwargs.get("compressors"), str):
        zkw["compressors"] = {"blosc": numcodecs.Blosc(), "zstd": numcodecs.Zstd(), "gzip": numcodecs.GZip()}[
            kwargs["compressors"]
        ]
    path = tmp_path / "z.zarr"
    values = _values(dtype, shape)
    if "filters" in kwargs and dtype == "<f8":
        values = np.round(values, 1)
    zarr.create_array(
        path, shape=shape, chunks=chunks, dtype=dtype if dtype != "str" else str, fill_value=fill,
        zarr_format=2, **zkw,
    )[...] = values  # fmt: skip
    before = {p.name: p.read_bytes() for p in path.iterdir() if p.name.startswith(".z")}
    a = z3.open_array(path, mode="r+")
    a[(slice(0, 1),) * len(shape)] = values[(slice(-1, None),) * len(shape)]
    expected = values.copy()
    expected[(slice(0, 1),) * len(shape)] = values[(slice(-1, None),) * len(shape)]
    a.append(values[:1], axis=0)
    expected = np.concatenate([expected, values[:1]])
    assert _same(np.asarray(zarr.open_array(path, mode="r", zarr_format=2)[...]), expected)
    assert _same(z3.open_array(path)[...], expected)
    # only the shape changed in the .zarray; .zattrs untouched
    after = json.loads((path / ".zarray").read_bytes())
    old = json.loads(before[".zarray"])
    assert after == {**old, "shape": [shape[0] + 1, *shape[1:]]}
    assert (path / ".zattrs").read_bytes() == before[".zattrs"]


def test_metadata_encoding_is_the_inverse_of_the_reader(tmp_path):
    """parse(encode(x)) == x for new arrays of every case, and encode(parse(doc)) == doc for the
    .zarray documents zarr-python writes."""
    for dtype, fill, kwargs in CASES:
        kw = {k: v for k, v in kwargs.items() if k not in ("order", "dimension_separator")}
        meta = z3.core.api.v2_array_metadata(
            shape=(4, 6),
            chunks=(3, 2),
            dtype=dtype if dtype != "str" else str,
            fill_value=fill,
            order=kwargs.get("order", "C"),
            dimension_separator=kwargs.get("dimension_separator"),
            attributes={"a": [1, "x"]},
            **kw,
        )
        docs = node_documents("p", meta)
        assert list(docs) == ["p/.zattrs", "p/.zarray"]
        assert metadata_from_documents("p", docs) == meta
        zarray = json.loads(docs["p/.zarray"])
        assert v2_array_metadata(zarray, {"a": [1, "x"]}, "p") == meta
        # the encoder from the v3 description alone agrees with the kept .zarray
        stripped = meta.evolve(extra_fields={})
        again = zarray_document(stripped, order=zarray["order"], fill_value=zarray["fill_value"])
        assert v2_array_metadata(again, {"a": [1, "x"]}, "p").codec_chain().to_json() == (
            meta.codec_chain().to_json()
        )
    for i, (dtype, fill, kwargs) in enumerate(CASES):
        zkw = {k: v for k, v in kwargs.items() if k in ("order", "filters")}
        target = tmp_path / f"z{i}.zarr"
        zarr.create_array(
            target, shape=(4, 6), chunks=(3, 2), dtype=dtype if dtype != "str" else str, fill_value=fill,
            zarr_format=2, **zkw,
        )  # fmt: skip
        stored = json.loads((target / ".zarray").read_text())
        assert zarray_document(z3.open_array(target).metadata) == stored


def test_fill_values_use_the_v2_spellings():
    assert fill_value_json(np.nan, np.dtype("f4")) == "NaN"
    assert fill_value_json(-np.inf, np.dtype("f8")) == "-Infinity"
    assert fill_value_json(complex(np.inf, 2), np.dtype("c8")) == ["Infinity", 2.0]
    assert fill_value_json(b"ab", np.dtype("S3")) == "YWI="
    assert fill_value_json(np.datetime64("NaT"), np.dtype("M8[s]")) == np.iinfo("i8").min
    assert fill_value_json(None, np.dtype("i4")) is None


def test_groups_attributes_and_consolidated_metadata_stay_fresh(tmp_path):
    path = tmp_path / "g.zarr"
    g = z3.create_group(path, zarr_format=2, attributes={"title": "t"})
    sub = g.create_group("sub")
    a = sub.create_array("a", shape=(4,), chunks=(2,), dtype="i2", fill_value=0)
    a[...] = [1, 2, 3, 4]
    z3.consolidate_metadata(path)

    def fresh() -> dict:
        return fresh_zmetadata(path, tmp_path)

    assert json.loads((path / ".zmetadata").read_text()) == fresh()
    for change in (
        lambda: a.append([5, 6]),
        lambda: a.resize((3,)),
        lambda: a.attrs.update({"units": "m"}),
        lambda: sub.attrs.update({"k": [1, 2]}),
        lambda: g.create_array("b", shape=(2, 2), dtype="f4", fill_value=np.nan),
        lambda: z3.open_group(path, mode="a").attrs.update({"title": "u"}),
    ):
        change()
        assert json.loads((path / ".zmetadata").read_text()) == fresh()
    assert sorted(p.name for p in path.rglob("zarr.json")) == []
    zg = zarr.open_group(path, mode="r", zarr_format=2, use_consolidated=True)
    assert zg.attrs["title"] == "u" and zg["sub"].attrs["k"] == [1, 2]
    assert zg["sub/a"][...].tolist() == [1, 2, 3] and zg["sub/a"].attrs["units"] == "m"
    assert np.isnan(zg["b"].fill_value)


def test_what_v2_cannot_express_is_refused_naming_the_argument(tmp_path):
    path = tmp_path / "bad.zarr"
    cases = [
        (CodecError, "shards", {"shards": (4,), "chunks": (2,)}),
        (CodecError, "compressors: codec 'crc32c'", {"compressors": ["crc32c"]}),
        (
            CodecError,
            "codecs: codec 'sharding_indexed'",
            {
                "codecs": [
                    {
                        "name": "sharding_indexed",
                        "configuration": {
                            "chunk_shape": [2],
                            "codecs": [{"name": "bytes"}],
                            "index_codecs": [{"name": "bytes"}],
                        },
                    }
                ],
            },
        ),
        (
            CodecError,
            "filters: codec 'transpose'",
            {"filters": [{"name": "transpose", "configuration": {"order": [0]}}]},
        ),
        (ArgumentError, "order", {"order": "K"}),
        (ArgumentError, "dimension_separator", {"dimension_separator": "-"}),
        (ArgumentError, "chunk_key_encoding", {"chunk_key_encoding": {"name": "default"}}),
        (ArgumentError, "zarr_format", {"zarr_format": 4}),
    ]
    for error, text, kwargs in cases:
        kwargs = {"zarr_format": 2, **kwargs}
        with pytest.raises(error, match=text):
            z3.create_array(path, shape=(8,), dtype="i4", **kwargs)
    with pytest.raises(ArgumentError, match="order is a Zarr v2 setting"):
        z3.create_array(path, shape=(8,), dtype="i4", order="F")
    assert not path.exists()
    # v2 and v3 nodes do not nest
    z3.create_group(tmp_path / "v3.zarr")
    with pytest.raises(ZarrV2Error, match="ancestor '/' is a Zarr v3 node"):
        z3.create_array(tmp_path / "v3.zarr", path="x", shape=(2,), dtype="i1", zarr_format=2)
    assert not (tmp_path / "v3.zarr" / "x").exists()
    z3.create_group(tmp_path / "v2.zarr", zarr_format=2)
    with pytest.raises(ZarrV2Error, match="create it with zarr_format=2"):
        z3.create_array(tmp_path / "v2.zarr", path="x", shape=(2,), dtype="i1")
    with pytest.raises(ReadOnlyError):
        z3.open_array(_v2_array(tmp_path / "ro.zarr"), mode="r")[0] = 1


def _v2_array(path: Path) -> Path:
    z3.create_array(path, shape=(2,), dtype="i1", fill_value=0, zarr_format=2)
    return path


def test_null_fill_value_stores_every_chunk_as_zarr_python_does(tmp_path):
    """With v2's "no fill value" no chunk equals the fill: zero chunks are stored too, so
    zarr-python (which reads missing chunks of a null fill as its own default) agrees."""
    path = tmp_path / "n.zarr"
    a = z3.create_array(path, shape=(6,), chunks=(2,), dtype="<i4", zarr_format=2)
    assert json.loads((path / ".zarray").read_text())["fill_value"] is None
    a[...] = [0, 0, 1, 2, 0, 0]
    assert sorted(p.name for p in path.iterdir() if not p.name.startswith(".")) == ["0", "1", "2"]
    assert zarr.open_array(path, mode="r", zarr_format=2)[...].tolist() == [0, 0, 1, 2, 0, 0]


def test_open_group_creates_v2_and_refuses_the_other_format(tmp_path):
    path = tmp_path / "o.zarr"
    g = z3.open_group(path, mode="w", zarr_format=2, attributes={"a": 1})
    assert g.zarr_format == 2 and json.loads((path / ".zattrs").read_text()) == {"a": 1}
    assert json.loads((path / ".zgroup").read_text()) == {"zarr_format": 2}
    assert z3.open_group(path, mode="a", zarr_format=2).zarr_format == 2
    with pytest.raises(ZarrV2Error, match="zarr_format=3 was given"):
        z3.open_group(path, mode="a", zarr_format=3)
    arr = z3.open_array(path, "x", mode="w", shape=(3,), dtype="u1", fill_value=1, zarr_format=2)
    arr[1] = 5
    assert zarr.open_array(path / "x", mode="r", zarr_format=2)[...].tolist() == [1, 5, 1]
    assert z3.open_group(path, "sub", mode="a", zarr_format=2).zarr_format == 2
    assert sorted(zarr.open_group(path, mode="r", zarr_format=2).keys()) == ["sub", "x"]


def test_zarr_python_slash_separated_v2_array_is_appended_under_its_keys(tmp_path):
    path = tmp_path / "s.zarr"
    values = np.arange(24, dtype="<i2").reshape(4, 6)
    zarr.create_array(
        path, shape=(4, 6), chunks=(3, 4), dtype="<i2", fill_value=-1, zarr_format=2,
        chunk_key_encoding={"name": "v2", "separator": "/"},
    )[...] = values  # fmt: skip
    a = z3.open_array(path, mode="r+")
    a.append(values[:2] + 100)
    assert (path / "1" / "1").is_file() and not (path / "1.1").exists()
    expected = np.concatenate([values, values[:2] + 100])
    assert zarr.open_array(path, mode="r", zarr_format=2)[...].tolist() == expected.tolist()


def test_structured_v2_array_round_trips(tmp_path):
    dt = np.dtype([("a", "<i4"), ("x", "<f8"), ("y", "|u1")])  # zarr-python reads flat ones
    fill = np.array((1, 2.5, 3), dtype=dt)[()]
    path = tmp_path / "st.zarr"
    a = z3.create_array(path, shape=(5,), chunks=(2,), dtype=dt, fill_value=fill, zarr_format=2)
    values = np.array([(i, i / 2, i) for i in range(5)], dtype=dt)
    a[...] = values
    zarray = json.loads((path / ".zarray").read_text())
    assert zarray["dtype"] == [["a", "<i4"], ["x", "<f8"], ["y", "|u1"]]
    a.resize((7,))
    theirs = zarr.open_array(path, mode="r", zarr_format=2)
    assert theirs[...].tolist() == [*values.tolist(), fill.tolist(), fill.tolist()]
    assert z3.open_array(path)[...].tolist() == theirs[...].tolist()


def test_a_dataset_read_from_v2_with_numcodecs_codecs_pickles(tmp_path):
    """dask and xarray pickle what they read; numcodecs codec classes must be found by name."""
    import pickle

    import numcodecs

    path = str(tmp_path / "p.zarr")
    a = z3.create_array(
        path,
        shape=(6,),
        chunks=(3,),
        dtype="i4",
        zarr_format=2,
        filters=[numcodecs.Delta(dtype="i4")],
        compressors=[numcodecs.Blosc()],
    )
    a[...] = np.arange(6)
    back = pickle.loads(pickle.dumps(z3.open_array(path, mode="r")))
    np.testing.assert_array_equal(back[...], np.arange(6))


def test_rewriting_a_v2_array_whose_fill_value_is_a_bare_infinity_token(tmp_path):
    """zarr-python 2 writes non-finite fill values as bare JSON tokens; a rewrite of such an
    array (attributes, resize) writes strictly valid JSON with v2's string spelling."""
    import json

    root = tmp_path / "inf.zarr"
    (root / "a").mkdir(parents=True)
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    (root / "a" / ".zarray").write_text(
        '{"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<f8", "compressor": null, '
        '"fill_value": Infinity, "order": "C", "filters": null}'
    )
    a = z3.open_array(str(root), path="a", mode="r+")
    assert a.fill_value == np.inf
    a.attrs["units"] = "K"
    a.resize(6)
    doc = json.loads((root / "a" / ".zarray").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert doc["fill_value"] == "Infinity" and doc["shape"] == [6]
    np.testing.assert_array_equal(z3.open_array(str(root), path="a")[...], np.full(6, np.inf))
