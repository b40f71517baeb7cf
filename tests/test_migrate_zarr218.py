"""``zarr3 migrate`` on Zarr v2 stores written live by zarr-python 2.18 (tests/zarr218.py): across
data types, compressors, filters, C and F order, both key separators, big-endian types and
missing chunks, with and without ``.zmetadata``. Chunk bytes stay unchanged (sha256 of every
chunk key) and every array reads back as zarr-python 2.18 read the original store: by this
package, by the installed zarr-python 3, by zarr-python 3.4 (tests/zarr218.py, Python 3.12) and
by tensorstore (where it implements the data type and codecs). What v3 cannot express is
refused before anything is written."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import numpy as np
import pytest
import zarr218 as oracle
from click.testing import CliRunner
from test_cli_migrate import chunk_hashes  # sha256 of every chunk key (non-metadata file)

import zarr3_backend as z3
from zarr3_backend.cli import main

zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")

pytestmark = [pytest.mark.slow, pytest.mark.interop, pytest.mark.filterwarnings("ignore::UserWarning")]

SHAPE, CHUNKS = (7, 11), (3, 4)


def file_hashes(root: str) -> dict[str, str]:
    """sha256 of every file below ``root``, by path relative to it."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def values(dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    """Deterministic values of ``dtype`` (a numpy type string or ``"str"``/``"bytes"`` for
    object arrays), with each type's edge values: extremes, NaN, infinities, NaT, empty text."""
    n = int(np.prod(shape))
    i = np.arange(n)
    if dtype == "str":
        return np.array([("é" if k % 5 == 0 else "s") * (k % 4) + str(k) for k in i], dtype=object).reshape(
            shape
        )
    if dtype == "bytes":
        return np.array([bytes([k % 256]) * (k % 3) for k in i], dtype=object).reshape(shape)
    dt = np.dtype(dtype)
    if dt.fields is not None:
        out = np.zeros(n, dtype=dt)
        for j, name in enumerate(dt.names):
            out[name] = values(dt.fields[name][0].str, (n,)) if dt.fields[name][0].fields is None else 0
            out[name] = np.roll(out[name], j)
        return out.reshape(shape)
    if dt.kind == "b":
        return (i % 3 == 0).reshape(shape)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        out = (i * 37 % 200).astype(dt)
        if dt.kind == "i":
            out[1::5] = -out[1::5]
        out[:2] = [info.min, info.max]
        return out.reshape(shape)
    if dt.kind == "f":
        out = ((i - n / 2) * 0.37).astype(dt)
        out[:4] = [np.nan, np.inf, -np.inf, -0.0]
        return out.reshape(shape)
    if dt.kind == "c":
        out = ((i - n / 2) * 0.5 + 1j * (i % 7)).astype(dt)
        out[0] = complex(np.nan, 1)
        return out.reshape(shape)
    if dt.kind in "mM":
        unit = np.datetime_data(dt)[0]
        out = (
            (i * 86_401 - 1000).astype(dt.newbyteorder("=")).astype(dt)
            if unit != "D"
            else (i * 13 - 40).astype(dt)
        )
        out[3] = np.array("NaT", dtype=dt)
        return out.reshape(shape)
    if dt.kind == "S":
        return np.array([b"b%d" % k if k % 4 else b"" for k in i], dtype=dt).reshape(shape)
    if dt.kind == "U":
        return np.array(["αβ"[: k % 3] + str(k) for k in i], dtype=dt).reshape(shape)
    raise AssertionError(f"no test values for {dtype!r}")


def blosc(cname: str, shuffle: int, clevel: int = 5, blocksize: int = 0) -> dict[str, Any]:
    return {"id": "blosc", "cname": cname, "clevel": clevel, "shuffle": shuffle, "blocksize": blocksize}


GZIP, ZLIB, ZSTD, LZ4, BZ2, LZMA = (
    {"id": "gzip", "level": 5},
    {"id": "zlib", "level": 3},
    {"id": "zstd", "level": 4},
    {"id": "lz4", "acceleration": 1},
    {"id": "bz2", "level": 9},
    {"id": "lzma", "format": 1, "check": -1, "preset": None, "filters": None},
)


def array(
    dtype: Any,
    compressor: dict | None = None,
    filters: list[dict] | None = None,
    order: str = "C",
    sep: str = ".",
    fill: Any = 0,
    shape: tuple[int, ...] = SHAPE,
    chunks: tuple[int, ...] = CHUNKS,
    data: np.ndarray | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A ``zarr218.write`` array spec with values of its type (``dtype`` as ``values`` takes it)."""
    v2_dtype = "object" if dtype in ("str", "bytes") else dtype
    if isinstance(v2_dtype, str) and np.dtype(v2_dtype).fields is not None:
        v2_dtype = [list(f) for f in np.dtype(v2_dtype).descr]
    return {
        "dtype": v2_dtype,
        "shape": list(shape),
        "chunks": list(chunks),
        "compressor": compressor,
        "filters": filters,
        "order": order,
        "dimension_separator": sep,
        "fill": fill,
        "attrs": {"_ARRAY_DIMENSIONS": [f"d{k}" for k in range(len(shape))], "units": "m"},
        "data": values(dtype, shape) if data is None else data,
        **extra,
    }


def _with_fill_chunk(dtype: str, fill: Any) -> np.ndarray:
    """Values whose first chunk equals ``fill`` (so zarr 2.18 does not write it)."""
    data = values(dtype, SHAPE)
    data[: CHUNKS[0], : CHUNKS[1]] = fill
    return data


#: name -> array spec: every data type, compressor, filter, order and separator combination
CASES: dict[str, dict[str, Any]] = {
    # integers, both byte orders, every compressor
    "i1_blosc_lz4_shuffle": array("|i1", blosc("lz4", 1)),
    "i2_blosc_zstd_bitshuffle_F_slash": array("<i2", blosc("zstd", 2, clevel=3), order="F", sep="/"),
    "i4_blosc_blosclz_noshuffle": array("<i4", blosc("blosclz", 0)),
    "i8_blosc_lz4hc_autoshuffle_slash": array("<i8", blosc("lz4hc", -1), sep="/"),
    "u1_blosc_zlib_bitshuffle_blocksize": array("|u1", blosc("zlib", 2, blocksize=256)),
    "u2_zstd_F": array("<u2", ZSTD, order="F"),
    "u4_gzip_slash": array("<u4", GZIP, sep="/"),
    "u8_zlib": array("<u8", ZLIB),
    ">i2_lz4": array(">i2", LZ4),
    ">u4_bz2_F_slash": array(">u4", BZ2, order="F", sep="/"),
    ">i8_lzma": array(">i8", LZMA),
    # floating point, complex, bool
    "f2_none": array("<f2", None),
    "f4_blosc_lz4_shuffle_F": array("<f4", blosc("lz4", 1), order="F"),
    "f8_gzip_slash": array("<f8", GZIP, sep="/"),
    ">f4_zstd": array(">f4", ZSTD),
    ">f8_blosc_zstd_bitshuffle_F": array(">f8", blosc("zstd", 2), order="F"),
    "c8_lz4": array("<c8", LZ4),
    "c16_zlib_F_slash": array("<c16", ZLIB, order="F", sep="/"),
    ">c16_none": array(">c16", None),
    "bool_gzip": array("|b1", GZIP, fill=False),
    "bool_none_F": array("|b1", None, order="F", fill=True),
    # date and time
    "M8ns_blosc_lz4": array("<M8[ns]", blosc("lz4", 1)),
    "M8_10s_zstd": array("<M8[10s]", ZSTD),
    "M8D_gzip_F_slash": array("<M8[D]", GZIP, order="F", sep="/"),
    ">M8ns_zstd": array(">M8[ns]", ZSTD),
    "m8s_zlib": array("<m8[s]", ZLIB),
    # fixed-length text and bytes
    "S6_zlib": array("|S6", ZLIB, fill=b""),
    "S4_none_F_slash": array("|S4", None, order="F", sep="/", fill=b""),
    "U5_gzip": array("<U5", GZIP, fill=""),
    ">U3_zstd_F": array(">U3", ZSTD, order="F", fill=""),
    # variable-length text and bytes (object arrays)
    "str_vlen_utf8_zstd": array("str", ZSTD, [{"id": "vlen-utf8"}], fill=None),
    "str_vlen_utf8_none_F_slash": array("str", None, [{"id": "vlen-utf8"}], order="F", sep="/", fill=None),
    "bytes_vlen_bytes_gzip": array("bytes", GZIP, [{"id": "vlen-bytes"}], fill=None),
    "str_vlen_utf8_blosc_autoshuffle": array("str", blosc("zstd", -1), [{"id": "vlen-utf8"}], fill=None),
    "bytes_vlen_bytes_blosc_F": array("bytes", blosc("lz4", 1), [{"id": "vlen-bytes"}], order="F", fill=None),
    # structured records (one byte order)
    # filters
    "delta_i4_zlib": array("<i4", ZLIB, [{"id": "delta", "dtype": "<i4"}]),
    "delta_i4_F_slash": array("<i4", GZIP, [{"id": "delta", "dtype": "<i4"}], order="F", sep="/"),
    "delta_i8_astype_i4": array(
        "<i8",
        ZLIB,
        [{"id": "delta", "dtype": "<i8", "astype": "<i4"}],
        data=values("<i2", SHAPE).astype("<i8"),
    ),
    "fixedscaleoffset_f8_u2": array(
        "<f8",
        ZSTD,
        [{"id": "fixedscaleoffset", "offset": 1000, "scale": 10, "dtype": "<f8", "astype": "<u2"}],
        data=np.linspace(1000, 1100, 77).reshape(SHAPE),
    ),
    "fixedscaleoffset_F": array(
        "<f4",
        None,
        [{"id": "fixedscaleoffset", "offset": 0, "scale": 100, "dtype": "<f4", "astype": "<i4"}],
        order="F",
        data=np.linspace(-3, 3, 77, dtype="<f4").reshape(SHAPE),
    ),
    "quantize_f8": array(
        "<f8",
        GZIP,
        [{"id": "quantize", "digits": 3, "dtype": "<f8"}],
        data=np.linspace(0, 1, 77).reshape(SHAPE),
    ),
    "astype_f8_f4": array(
        "<f8", ZLIB, [{"id": "astype", "encode_dtype": "<f4", "decode_dtype": "<f8"}], sep="/"
    ),
    "bitround_f4": array("<f4", ZSTD, [{"id": "bitround", "keepbits": 6}]),
    "packbits_bool": array("|b1", ZLIB, [{"id": "packbits"}], fill=False),
    "packbits_bool_F": array("|b1", None, [{"id": "packbits"}], order="F", fill=False),
    "delta_astype_F": array(
        "<i8",
        ZLIB,
        [{"id": "delta", "dtype": "<i8", "astype": "<i2"}],
        order="F",
        data=values("<i1", SHAPE).astype("<i8"),
    ),
    "zstd_checksum": array("<i4", {"id": "zstd", "level": 3, "checksum": True}),
    "shuffle_f8": array("<f8", ZLIB, [{"id": "shuffle", "elementsize": 8}]),
    "delta_then_crc32": array("<i2", None, [{"id": "delta", "dtype": "<i2"}, {"id": "crc32"}]),
    "adler32_F": array("<u4", LZ4, [{"id": "adler32"}], order="F"),
    "fletcher32": array("<f4", None, [{"id": "fletcher32"}]),
    "jenkins_lookup3_slash": array("<i8", GZIP, [{"id": "jenkins_lookup3"}], sep="/"),
    # fill values and missing chunks (zarr 2.18 writes no chunk equal to the fill value)
    "fill_42_missing_chunk": array(
        "<i4", GZIP, fill=42, data=_with_fill_chunk("<i4", 42), write_empty_chunks=False
    ),
    "fill_nan_missing_chunk_F": array(
        "<f8", ZLIB, order="F", fill=np.nan, data=_with_fill_chunk("<f8", np.nan), write_empty_chunks=False
    ),
    "fill_neg_big_endian_missing": array(
        ">i8", None, fill=-7, data=_with_fill_chunk(">i8", -7), write_empty_chunks=False
    ),
    "fill_complex_missing": array(
        "<c16", None, fill=1 + 2j, data=_with_fill_chunk("<c16", 1 + 2j), write_empty_chunks=False
    ),
    "fill_M8_missing": array(
        "<M8[s]", GZIP, fill=0, data=_with_fill_chunk("<M8[s]", 0), write_empty_chunks=False
    ),
    "fill_none_i2": array("<i2", ZLIB, fill=None),
    "fill_text_missing": array(
        "<U3", GZIP, fill="zz", data=_with_fill_chunk("<U3", "zz"), write_empty_chunks=False
    ),
    "fill_big_text_missing_F": array(
        ">U2", ZSTD, order="F", fill="q", data=_with_fill_chunk(">U2", "q"), write_empty_chunks=False
    ),
    "fill_bytes_missing": array(
        "|S3", GZIP, fill=b"ab", data=_with_fill_chunk("|S3", b"ab"), write_empty_chunks=False
    ),
    "fill_NaT_missing_slash": array(
        "<M8[s]",
        GZIP,
        sep="/",
        fill="NaT",
        data=_with_fill_chunk("<M8[s]", np.datetime64("NaT")),
        write_empty_chunks=False,
    ),
    "fill_true_missing": array(
        "|b1", GZIP, fill=True, data=_with_fill_chunk("|b1", True), write_empty_chunks=False
    ),
    "fill_str_missing": array(
        "str",
        GZIP,
        [{"id": "vlen-utf8"}],
        fill="x",
        data=_with_fill_chunk("str", "x"),
        write_empty_chunks=False,
    ),
    "fill_f2_neginf_missing": array(
        "<f2", None, fill=-np.inf, data=_with_fill_chunk("<f2", -np.inf), write_empty_chunks=False
    ),
    "fill_m8_missing": array(
        "<m8[ms]",
        ZLIB,
        fill=5,
        data=_with_fill_chunk("<m8[ms]", np.timedelta64(5, "ms")),
        write_empty_chunks=False,
    ),
    # zarr.create's default fill value (0) on types where 2.18 writes it in its own form
    "default_fill_U": array("<U5", GZIP),
    "default_fill_S": array("|S4", GZIP),
    "default_fill_M8": array("<M8[ns]", GZIP),
    "default_fill_str": array("str", GZIP, [{"id": "vlen-utf8"}]),
    # shapes
    "scalar_0d": array("<f8", GZIP, shape=(), chunks=(), data=np.array(3.25)),
    "empty_0": array("<i4", None, shape=(0,), chunks=(5,), data=np.zeros(0, "<i4")),
    "chunk_larger_than_shape": array("<u2", ZSTD, shape=(5, 3), chunks=(8, 8)),
    "3d_F_slash": array("<i4", blosc("lz4", 1), order="F", sep="/", shape=(4, 5, 6), chunks=(3, 2, 4)),
}

#: Cases zarr-python 3.1 cannot read after migration (each a gap of zarr-python's, not of the
#: migrated document); kept out of CASES so that their consolidated metadata, which zarr-python
#: parses whole, does not stop it reading the rest. name -> (spec, whether the pinned zarr 3.4
#: reads it, why not).
ZARR_PYTHON_GAPS: dict[str, tuple[dict[str, Any], bool, str]] = {
    "struct": (
        array("<i4,<f8,|u1", GZIP, fill=None),
        True,
        "3.1 knows the v3 'struct' type as 'structured' (3.4 reads 'struct')",
    ),
    "struct_big_endian_F": (array(">i2,>f4", ZLIB, order="F", fill=None), True, "as above"),
    "struct_missing_chunk": (
        array("<i2,<f4", GZIP, data=_with_fill_chunk("<i2,<f4", 0), write_empty_chunks=False),
        True,
        "as above",
    ),
    "raw_V3": (
        array("|V3", GZIP, fill=None, data=np.frombuffer(bytes(range(231)), dtype="V3").reshape(SHAPE)),
        False,
        "has the core spec's optional raw-bits type 'r24' only as its own 'raw_bytes' extension",
    ),
    "quantize_f4_astype_f2": (
        array(
            "<f4",
            BZ2,
            [{"id": "quantize", "digits": 2, "dtype": "<f4", "astype": "<f2"}],
            data=np.linspace(0, 1, 77, dtype="<f4").reshape(SHAPE),
        ),
        False,
        "its numcodecs.quantize ignores 'astype' when sizing the decoded chunk (as numcodecs#663 for delta)",
    ),
}


def paths_of(cases: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Where each case lives in the hierarchy: every third one in a nested group."""
    return {name: (f"grp/inner/{name}" if k % 3 == 2 else name) for k, name in enumerate(cases)}


PATHS = paths_of(CASES)
#: The root group's title attribute in every store these tests write.
TITLE = "written for zarr3 migrate"


def hierarchy(cases: dict[str, dict[str, Any]], consolidate: bool) -> dict[str, Any]:
    """A ``zarr218.write`` group spec holding ``cases`` at the root and in ``grp/inner``."""
    paths = paths_of(cases)
    root: dict[str, Any] = {"attrs": {"title": TITLE}, "members": {}, "consolidate": consolidate}
    inner: dict[str, Any] = {"attrs": {"level": 2}, "members": {}}
    root["members"]["grp"] = {"attrs": {"level": 1}, "members": {"inner": inner}}
    for name, spec in cases.items():
        (inner if paths[name].startswith("grp/") else root)["members"][name] = spec
    return root


def run_cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


class Migrated:
    """One store written by ``writer`` (zarr 2.18 or 3.4, tests/zarr218.py) and migrated: what
    ``reader`` (either of them) read before, hashes before and after, the CLI's result, and what
    zarr 3.4 reads after (array or error text, by path)."""

    def __init__(
        self,
        writer: Any,
        reader: Any,
        zarr34: Any,
        root: str,
        cases: dict[str, dict[str, Any]],
        consolidated: bool,
    ) -> None:
        writer.write(root, hierarchy(cases, consolidated))
        self.root = root
        self.cases = cases
        self.paths = paths_of(cases)
        self.consolidated = consolidated
        self.expected = reader.read(root, consolidated=consolidated)
        self.chunks_before = chunk_hashes(root)
        self.result = run_cli("migrate", root)
        self.chunks_after = chunk_hashes(root)
        self.zarr34 = zarr34.read(root, sorted(self.expected)) if self.result.exit_code == 0 else {}


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "zmetadata"])
def migrated(request, zarr218, zarr34, tmp_path_factory) -> Migrated:
    root = str(tmp_path_factory.mktemp("v2") / "store.zarr")
    return Migrated(zarr218, zarr218, zarr34, root, CASES, request.param)


def _doc(root: str, path: str) -> dict[str, Any]:
    with open(os.path.join(root, path, "zarr.json")) as f:
        return json.load(f)


def assert_migrated_keeping_every_chunk_byte(migrated: Migrated) -> None:
    """Migration succeeded, every chunk file is byte-for-byte what it was (missing chunks stay
    missing), every v2 document became one ``zarr.json`` and ``.zmetadata`` consolidated v3
    metadata."""
    assert migrated.result.exit_code == 0, migrated.result.output + migrated.result.stderr
    assert set(migrated.expected) == set(migrated.paths.values())  # zarr 2.18 read every case
    assert migrated.chunks_after == migrated.chunks_before  # no chunk rewritten, added or lost
    # the writer left out the chunks equal to the fill value: they stay missing
    missing = migrated.paths["fill_42_missing_chunk"]
    assert f"{missing}/0.0" not in migrated.chunks_before
    assert f"{missing}/0.1" in migrated.chunks_before
    meta = set(file_hashes(migrated.root)) - set(migrated.chunks_after)
    nodes = {"", "grp", "grp/inner", *migrated.paths.values()}
    assert meta == {os.path.join(n, "zarr.json") for n in nodes}  # every v2 document gone
    root_doc = _doc(migrated.root, "")
    assert root_doc["attributes"] == {"title": TITLE}
    assert _doc(migrated.root, "grp/inner")["attributes"] == {"level": 2}
    assert ("consolidated_metadata" in root_doc) == migrated.consolidated
    if migrated.consolidated:
        assert set(root_doc["consolidated_metadata"]["metadata"]) == nodes - {""}


def test_migrate_succeeds_keeping_every_chunk_byte(migrated):
    assert_migrated_keeping_every_chunk_byte(migrated)


#: v3 data types tensorstore's zarr3 driver implements
TS_TYPES = {
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
}  # fmt: skip


def tensorstore_reads(doc: dict[str, Any]) -> bool:
    """Whether tensorstore implements the data type and every codec of a v3 document."""
    names = {c["name"] for c in doc["codecs"]}
    standard = {"bytes", "transpose", "blosc", "gzip", "zstd", "crc32c"}
    return isinstance(doc["data_type"], str) and doc["data_type"] in TS_TYPES and names <= standard


def assert_same(got: Any, want: np.ndarray, who: str) -> None:
    """``got`` holds ``want``'s values and type (NaN equal to NaN, NaT to NaT, any byte order;
    text compared as Python strings, whatever array type holds it)."""
    got = np.asarray(got)
    assert got.shape == want.shape, f"{who}: shape {got.shape} != {want.shape}"
    if want.dtype == object or want.dtype.kind == "U" or got.dtype.kind in "OTU":
        assert got.ravel().tolist() == want.ravel().tolist(), who
        return
    if want.dtype.fields is not None:  # field by field: NaN equals NaN inside records too
        assert got.dtype.names == want.dtype.names, who
        for name in want.dtype.names:
            assert_same(got[name], want[name], f"{who}, field {name!r}")
        return
    assert got.dtype.newbyteorder("=") == want.dtype.newbyteorder("="), f"{who}: {got.dtype} != {want.dtype}"
    np.testing.assert_array_equal(got, want, err_msg=who)


def check_array(migrated: Migrated, path: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The migrated document of ``path`` is plain v3 with the v2 layout, and this package reads
    it as zarr 2.18 read the original; returns the document."""
    want = migrated.expected[path]
    doc = _doc(migrated.root, path)
    assert not any(k.startswith("zarr3_backend") for k in doc)  # no package-private marker
    assert doc["chunk_key_encoding"] == {
        "name": "v2",
        "configuration": {"separator": spec["dimension_separator"]},
    }
    assert doc["attributes"] == {"units": "m"}  # _ARRAY_DIMENSIONS became dimension_names
    if want.ndim:
        assert doc["dimension_names"] == [f"d{k}" for k in range(want.ndim)]
    assert ("transpose" in [c["name"] for c in doc["codecs"]]) == (spec["order"] == "F" and want.ndim > 1)
    ours = z3.open_group(migrated.root, mode="r")[path]
    assert ours.zarr_format == 3
    assert_same(ours[...], want, "zarr3_backend")
    return doc


def assert_values_read_back(migrated: Migrated, name: str) -> None:
    """Case ``name`` reads back as zarr 2.18 read it before migration, by this package, the
    installed zarr-python, zarr 3.4 and (where it implements the type and codecs) tensorstore."""
    assert migrated.result.exit_code == 0, migrated.result.stderr
    path = migrated.paths[name]
    doc = check_array(migrated, path, migrated.cases[name])
    want = migrated.expected[path]
    assert_same(zarr.open_group(migrated.root, mode="r")[path][...], want, f"zarr {zarr.__version__}")
    assert not isinstance(migrated.zarr34[path], str), migrated.zarr34[path]
    assert_same(migrated.zarr34[path], want, "zarr 3.4")
    if tensorstore_reads(doc):
        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": os.path.join(migrated.root, path)}}
        assert_same(ts.open(spec).result().read().result(), want, "tensorstore")


@pytest.mark.parametrize("name", list(CASES))
def test_values_read_back_as_zarr218_read_them(migrated, name):
    assert_values_read_back(migrated, name)


@pytest.fixture(scope="module")
def migrated_gaps(zarr218, zarr34, tmp_path_factory) -> Migrated:
    root = str(tmp_path_factory.mktemp("v2gaps") / "store.zarr")
    cases = {name: spec for name, (spec, _, _) in ZARR_PYTHON_GAPS.items()}
    return Migrated(zarr218, zarr218, zarr34, root, cases, consolidated=True)


def assert_gap_migrates_exactly(migrated_gaps: Migrated, name: str) -> None:
    """Structured records, raw bytes and a size-changing quantize: migrated byte-for-byte and
    read back exactly by this package; the installed zarr-python reads them identically or
    (3.1, see ZARR_PYTHON_GAPS) refuses with a ValueError, never with other values; the pinned
    zarr 3.4 reads the ones it implements identically and refuses the others."""
    assert migrated_gaps.result.exit_code == 0, migrated_gaps.result.stderr
    assert migrated_gaps.chunks_after == migrated_gaps.chunks_before
    spec, zarr34_reads, why = ZARR_PYTHON_GAPS[name]
    path = migrated_gaps.paths[name]
    check_array(migrated_gaps, path, spec)
    want = migrated_gaps.expected[path]
    if zarr34_reads:
        assert_same(migrated_gaps.zarr34[path], want, "zarr 3.4")
    else:
        assert migrated_gaps.zarr34[path].startswith("ValueError"), (why, migrated_gaps.zarr34[path])
    try:
        got = zarr.open_array(migrated_gaps.root, path=path, mode="r", use_consolidated=False)[...]
    except ValueError:
        return
    assert_same(got, want, f"zarr {zarr.__version__}")


@pytest.mark.parametrize("name", list(ZARR_PYTHON_GAPS))
def test_types_zarr_python_3_1_cannot_read_migrate_exactly(migrated_gaps, name):
    assert_gap_migrates_exactly(migrated_gaps, name)


def test_root_array_migrates(zarr218, zarr34, tmp_path):
    root = str(tmp_path / "a.zarr")
    spec = array("<f4", blosc("zstd", 1), [{"id": "delta", "dtype": "<f4"}], order="F", sep="/")
    zarr218.write(root, spec)
    want = zarr218.read(root)[""]
    before = chunk_hashes(root)
    result = run_cli("migrate", root)
    assert result.exit_code == 0, result.stderr
    assert chunk_hashes(root) == before
    assert {k for k in file_hashes(root) if k not in before} == {"zarr.json"}
    assert_same(z3.open_array(root, mode="r")[...], want, "zarr3_backend")
    assert_same(zarr.open_array(root, mode="r")[...], want, f"zarr {zarr.__version__}")
    assert_same(zarr34.read(root)[""], want, "zarr 3.4")


def assert_stale_zmetadata_is_rebuilt(writer: Any, zarr218: Any, zarr34: Any, root: str) -> None:
    """An array added by ``writer`` after ``consolidate_metadata`` (the .zmetadata does not list
    it) is migrated and listed in the new consolidated metadata."""
    writer.write(root, {"members": {"old": array("<i4", GZIP)}, "consolidate": True})
    writer.write(root, {"members": {"late": array("<u2", ZLIB, sep="/")}})
    assert set(zarr218.read(root, consolidated=True)) == {"old"}
    want = zarr218.read(root)
    result = run_cli("migrate", root)
    assert result.exit_code == 0, result.stderr
    assert set(_doc(root, "")["consolidated_metadata"]["metadata"]) == {"old", "late"}
    g = zarr.open_group(root, mode="r")
    by_zarr34 = zarr34.read(root)  # every array it finds in the hierarchy
    assert set(by_zarr34) == {"old", "late"}
    for name in ("old", "late"):
        assert_same(g[name][...], want[name], f"zarr {zarr.__version__}")
        assert_same(z3.open_group(root, mode="r")[name][...], want[name], "zarr3_backend")
        assert_same(by_zarr34[name], want[name], "zarr 3.4")


def test_stale_zmetadata_is_rebuilt_from_the_nodes(zarr218, zarr34, tmp_path):
    assert_stale_zmetadata_is_rebuilt(zarr218, zarr218, zarr34, str(tmp_path / "s.zarr"))


#: v2 nodes Zarr v3 cannot express: name -> (array spec or None for a group, text the CLI's
#: message must hold, the key it must name)
REFUSED: dict[str, tuple[dict[str, Any] | None, str, str]] = {
    "mixed_endian_struct": (array("<i4,>i4", GZIP, fill=None), "big-endian", "bad/.zarray"),
    "subarray_struct": (
        array(
            [["a", "<i4", [2]], ["b", "<f8"]],
            GZIP,
            fill=None,
            data=np.zeros(SHAPE, [("a", "<i4", (2,)), ("b", "<f8")]),
        ),
        "sub-array",
        "bad/.zarray",
    ),
    "big_endian_delta": (array(">i4", GZIP, [{"id": "delta", "dtype": ">i4"}]), "big-endian", "bad/.zarray"),
    "big_endian_fixedscaleoffset": (
        array(
            ">f8",
            GZIP,
            [{"id": "fixedscaleoffset", "offset": 0, "scale": 10, "dtype": ">f8", "astype": ">i4"}],
            data=np.linspace(0, 5, 77).reshape(SHAPE).astype(">f8"),
        ),
        "big-endian",
        "bad/.zarray",
    ),
    "big_endian_astype": (
        array(">f8", None, [{"id": "astype", "encode_dtype": ">f4", "decode_dtype": ">f8"}]),
        "big-endian",
        "bad/.zarray",
    ),
    "vlen_array": (
        array(
            "str",
            GZIP,
            [{"id": "vlen-array", "dtype": "<i4"}],
            fill=None,
            shape=(4,),
            chunks=(3,),
            data=np.array([np.arange(k, dtype="<i4") for k in range(4)], dtype=object),
        ),
        "'vlen-utf8' or 'vlen-bytes'",
        "bad/.zarray",
    ),
    "json_object_codec": (array("str", GZIP, [{"id": "json2"}], fill=None), "'json2'", "bad/.zarray"),
    "categorize_text": (
        array(
            "<U3",
            GZIP,
            [{"id": "categorize", "labels": ["a", "bb"], "dtype": "<U3", "astype": "|u1"}],
            fill=None,
            shape=(4,),
            chunks=(3,),
            data=np.array(["a", "bb", "a", "bb"], dtype="<U3"),
        ),
        "numcodecs.categorize",
        "bad/.zarray",
    ),
    "array_filter_after_bytes_filter": (
        array("<i4", None, [{"id": "shuffle", "elementsize": 4}, {"id": "delta", "dtype": "<i4"}]),
        "after a bytes filter",
        "bad/.zarray",
    ),
    "reserved_name": (array("<i4", None), "'__x'", "__x/.zarray"),
    "child_named_zarr_json": (array("<i4", None), "rename the child", "zarr.json"),
}
_REFUSED_NAMES = {"reserved_name": "__x", "child_named_zarr_json": "zarr.json"}


def assert_refused_before_writing(writer: Any, root: str, case: str) -> None:
    """The REFUSED ``case``, written by ``writer`` at ``root`` beside a good array: migrate exits
    2 with one ``error:`` line naming the key at fault, and changes no file."""
    spec, message, key = REFUSED[case]
    members = {"ok": array("<i4", GZIP), _REFUSED_NAMES.get(case, "bad"): spec}
    writer.write(root, {"members": {"grp": {"members": members}}, "consolidate": True})
    before = file_hashes(root)
    result = run_cli("migrate", root)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert message in result.stderr and f"grp/{key}" in result.stderr, result.stderr
    assert file_hashes(root) == before  # nothing written, nothing removed


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_v3_cannot_express_is_refused_before_writing(zarr218, tmp_path, case):
    assert_refused_before_writing(zarr218, str(tmp_path / "r.zarr"), case)


def test_oracle_environment_is_never_used_half_built(tmp_path, monkeypatch):
    """Folders left by a killed build (no ready marker, or a temporary one never renamed) are
    not used: a new build runs (clearing the temporary ones), and when its pip install fails
    the error carries pip's output and leaves no temporary folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    # pip offline, with nothing to install from: it fails at once, asking no registry
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    env = oracle.OracleEnv(("zarr==0.0.0",))
    half = oracle.env_dir(env)
    (half / "bin").mkdir(parents=True)
    killed = half.parent / f".{half.name}.building-killed"  # a build killed before its rename
    (killed / "lib").mkdir(parents=True)
    with pytest.raises(oracle.Zarr218Error) as err:
        oracle.ensure_env(env)
    assert "pip" in str(err.value) and "zarr==0.0.0" in str(err.value)
    assert sorted(p.name for p in half.parent.iterdir()) == sorted([half.name, f"{half.name}.lock"])
    assert not (half / oracle.READY_MARKER).exists()


def _strict_json(path: str) -> Any:
    """The JSON document at ``path``, refusing the non-standard NaN/Infinity tokens."""

    def refuse(token: str) -> Any:
        raise AssertionError(f"{path}: non-standard JSON token {token}")

    with open(path) as f:
        return json.load(f, parse_constant=refuse)


def assert_non_finite_attributes_become_strict_json(writer: Any, zarr218: Any, root: str) -> None:
    """NaN/Infinity attributes as ``writer`` writes them (zarr 2.18: bare JSON tokens): every
    migrated document is strict JSON (tensorstore refuses anything else), spelling them as v3
    spells fill values."""
    attrs = {"missing": float("nan"), "top": float("inf"), "range": [float("-inf"), 1.5]}
    spec = {**array("<f4", GZIP), "attrs": {**attrs, "_ARRAY_DIMENSIONS": ["y", "x"]}}
    writer.write(root, {"attrs": attrs, "members": {"a": spec}, "consolidate": True})
    assert "NaN" in open(os.path.join(root, "a", ".zattrs")).read()  # what the writer wrote
    want = zarr218.read(root)["a"]
    result = run_cli("migrate", root)
    assert result.exit_code == 0, result.stderr
    spelled = {"missing": "NaN", "top": "Infinity", "range": ["-Infinity", 1.5]}
    root_doc, array_doc = (
        _strict_json(os.path.join(root, "zarr.json")),
        _strict_json(os.path.join(root, "a", "zarr.json")),
    )
    assert root_doc["attributes"] == spelled and array_doc["attributes"] == spelled
    assert root_doc["consolidated_metadata"]["metadata"]["a"]["attributes"] == spelled
    assert dict(z3.open_group(root, mode="r")["a"].attrs) == spelled
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": os.path.join(root, "a")}}).result()
    assert_same(t.read().result(), want, "tensorstore")


def test_non_finite_attributes_are_written_as_strict_json(zarr218, tmp_path):
    assert_non_finite_attributes_become_strict_json(zarr218, zarr218, str(tmp_path / "n.zarr"))


def test_oracle_round_trips_values_and_describes_nodes(zarr218, tmp_path):
    """The fixture's own contract: arguments and results of every kind cross the two
    interpreters unchanged, and ``info`` reports what zarr 2.18 wrote."""
    args = {
        "text": "ünï",
        "n": [1, 2.5, None, True],
        "c": 1 - 2j,
        "b": b"\x00\xff",
        "f8": np.array([np.nan, -0.0, 1e300]),
        ">i2": np.arange(4, dtype=">i2").reshape(2, 2),
        "rec": np.array([(1, 2.5)], dtype=[("a", "<i4"), ("b", "<f8")]),
        "obj": np.array(["x", "", "αβ"], dtype=object),
        "M8": np.array(["2020-01-01", "NaT"], dtype="M8[D]"),
    }
    version, back = zarr218.run("import zarr\nresult = [zarr.__version__, args[0]]", args)
    assert version == oracle.ZARR_VERSION
    assert back.keys() == args.keys()
    for key, want in args.items():
        if isinstance(want, np.ndarray):
            assert back[key].dtype == want.dtype, key
            np.testing.assert_array_equal(back[key], want)
        else:
            assert back[key] == want, key
    with pytest.raises(oracle.Zarr218Error, match="ZeroDivisionError"):
        zarr218.run("result = 1 / 0")
    root = str(tmp_path / "i.zarr")
    zarr218.write(
        root, {"attrs": {"t": 1}, "members": {"a": array(">f8", blosc("lz4", 2), order="F", sep="/")}}
    )
    info = zarr218.info(root)
    assert info[""] == {"kind": "group", "attrs": {"t": 1}}
    a = info["a"]
    assert (a["kind"], a["shape"], a["chunks"], a["dtype"], a["order"]) == (
        "array",
        [7, 11],
        [3, 4],
        ">f8",
        "F",
    )
    assert (a["compressor"]["cname"], a["compressor"]["shuffle"], a["dimension_separator"]) == ("lz4", 2, "/")
    assert a["fill_value"] == 0 and a["filters"] == [] and a["attrs"]["units"] == "m"


def test_dry_run_shows_the_documents_migrate_writes(zarr218, tmp_path):
    root = str(tmp_path / "d.zarr")
    members = {"a": array("<f8", blosc("zstd", -1), [{"id": "delta", "dtype": "<f8"}], order="F")}
    zarr218.write(root, {"attrs": {"bad": float("nan")}, "members": members, "consolidate": True})
    before = file_hashes(root)
    dry = run_cli("migrate", root, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.stderr
    assert file_hashes(root) == before
    plan = json.loads(dry.stdout, parse_constant=lambda t: pytest.fail(f"non-standard JSON token {t}"))
    assert run_cli("migrate", root).exit_code == 0
    assert plan["nodes"]["a"] == _strict_json(os.path.join(root, "a", "zarr.json"))
    written_root = _strict_json(os.path.join(root, "zarr.json"))
    assert written_root.pop("consolidated_metadata")["metadata"]["a"] == plan["nodes"]["a"]
    assert plan["nodes"]["/"] == written_root
