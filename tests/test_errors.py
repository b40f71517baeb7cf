"""Each typed error: the right class (always a Zarr3Error), a message naming the culprit, and
nothing written to the store by the call that failed."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

import zarr3_backend as z3
from zarr3_backend import errors
from zarr3_backend.byte_range import ByteRange
from zarr3_backend.codecs import BloscCodec, ChunkSpec
from zarr3_backend.stores import StoreArgumentError

BLOSC = [{"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle"}}]
ZSTD_CRC = [{"name": "zstd", "configuration": {"level": 1, "checksum": False}}, {"name": "crc32c"}]


@contextmanager
def zraises(exc: type[Exception], match: str) -> Iterator[pytest.ExceptionInfo]:
    """``pytest.raises`` that also checks the error belongs to the package's hierarchy."""
    with pytest.raises(exc, match=match) as info:
        yield info
    assert isinstance(info.value, errors.Zarr3Error), type(info.value).__mro__


def snapshot(store) -> dict:
    """Every key and value of a store; for a LocalStore every file and directory on disk too
    (a failed call must not leave an empty directory or a temporary file behind)."""
    if isinstance(store, z3.LocalStore):
        found: dict = {}
        for dirpath, dirnames, filenames in os.walk(store.root):
            rel = os.path.relpath(dirpath, store.root)
            for d in dirnames:
                found[os.path.join(rel, d) + "/"] = None
            for f in filenames:
                with open(os.path.join(dirpath, f), "rb") as fh:
                    found[os.path.join(rel, f)] = fh.read()
        return found
    return {k: store.get(k) for k in store.list()}


@pytest.fixture(params=["memory", "local"])
def store(request, tmp_path):
    """A store holding float32 array ``x`` (4 elements, chunks of 2, zstd + crc32c) = 0..3."""
    s = z3.MemoryStore() if request.param == "memory" else z3.LocalStore(tmp_path / "root")
    a = z3.create_array(s, "x", shape=(4,), dtype="f4", chunks=(2,), compressors=ZSTD_CRC)
    a[:] = np.arange(4)
    return s


def test_root_of_hierarchy():
    for name in [
        "MetadataError",
        "UnknownFieldError",
        "DataTypeError",
        "CodecError",
        "UnknownCodecError",
        "CorruptionError",
        "ChecksumError",
        "NodeNotFoundError",
        "ArrayNotFoundError",
        "GroupNotFoundError",
        "NodeExistsError",
        "ReadOnlyError",
        "SelectionError",
        "ShapeError",
        "ChunkAlignmentError",
        "StoreError",
        "InvalidKeyError",
    ]:
        assert issubclass(getattr(errors, name), errors.Zarr3Error), name
    assert issubclass(StoreArgumentError, errors.Zarr3Error)


# ---- metadata ----------------------------------------------------------------------------------
def test_invalid_json_names_the_key(store):
    store.set("x/zarr.json", b"{not json")
    with zraises(errors.MetadataError, match="x/zarr.json"):
        z3.open_array(store, "x")
    with zraises(errors.MetadataError, match="x/zarr.json"):
        z3.open_group(store, mode="r")["x"]


def test_missing_required_field_names_field_and_array(store):
    doc = json.loads(store.get("x/zarr.json"))
    del doc["shape"]
    store.set("x/zarr.json", json.dumps(doc).encode())
    with zraises(errors.MetadataError, match=r"'x'.*'shape'"):
        z3.open_array(store, "x")


def test_unknown_field_vs_must_understand_false(store):
    doc = json.loads(store.get("x/zarr.json"))
    doc["surprise"] = {"must_understand": True}
    store.set("x/zarr.json", json.dumps(doc).encode())
    with zraises(errors.UnknownFieldError, match="surprise"):
        z3.open_array(store, "x")
    doc["surprise"] = {"must_understand": False, "value": 1}
    store.set("x/zarr.json", json.dumps(doc).encode())
    assert z3.open_array(store, "x")[...].tolist() == [0, 1, 2, 3]


def test_unknown_codec_on_open(store):
    doc = json.loads(store.get("x/zarr.json"))
    doc["codecs"].append({"name": "mystery"})
    store.set("x/zarr.json", json.dumps(doc).encode())
    with zraises(errors.UnknownCodecError, match="mystery"):
        z3.open_array(store, "x")


def test_unknown_codec_on_create_writes_nothing(store):
    before = snapshot(store)
    with zraises(errors.UnknownCodecError, match="nope"):
        z3.create_array(store, "g/y", shape=(2,), dtype="i4", compressors=[{"name": "nope"}])
    assert snapshot(store) == before


def test_bad_codec_configuration_writes_nothing(store):
    before = snapshot(store)
    with zraises(errors.CodecError, match=r"gzip.*level.*12"):
        z3.create_array(
            store,
            "g/y",
            shape=(2,),
            dtype="i4",
            compressors=[{"name": "gzip", "configuration": {"level": 12}}],
        )
    with zraises(errors.CodecError, match=r"gzip.*level.*12"):
        z3.create_array(
            store,
            "g/y",
            shape=(2,),
            dtype="i4",
            codecs=[{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 12}}],
        )
    assert snapshot(store) == before


def test_codec_chain_of_wrong_form_writes_nothing(store):
    before = snapshot(store)
    with zraises(errors.CodecError, match="gzip"):
        z3.create_array(store, "y", shape=(2,), dtype="i4", codecs=[{"name": "gzip"}, {"name": "bytes"}])
    assert snapshot(store) == before


def test_codecs_chain_with_compressors_writes_nothing(store):
    before = snapshot(store)
    with zraises(errors.CodecError, match="compressors"):
        z3.create_array(
            store,
            "y",
            shape=(2,),
            dtype="i4",
            codecs=[{"name": "bytes", "configuration": {"endian": "little"}}],
            compressors=[{"name": "gzip"}],
        )
    assert snapshot(store) == before


def test_bad_dimension_names_write_nothing(store):
    before = snapshot(store)
    with zraises(errors.MetadataError, match=r"dimension_names.*2"):
        z3.create_array(store, "g/y", shape=(4,), dtype="i4", dimension_names=("a", "b"))
    with zraises(errors.MetadataError, match="dimension_names"):
        z3.create_array(store, "g/y", shape=(4,), dtype="i4", dimension_names=(1,))
    assert snapshot(store) == before


# ---- data types and fill values ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dtype": "float33"}, "float33"),
        ({"dtype": "float128"}, r"float128|f16"),
        ({"dtype": "uint8", "fill_value": 300}, "300"),
        ({"dtype": "int8", "fill_value": "NaN"}, r"NaN.*int8"),
    ],
)
def test_bad_dtype_and_fill_write_nothing(store, kwargs, match):
    before = snapshot(store)
    with zraises(errors.DataTypeError, match=match):
        z3.create_array(store, "g/y", shape=(2,), **kwargs)
    assert snapshot(store) == before


def test_bad_dtype_at_new_path_creates_no_directory(tmp_path):
    with zraises(errors.DataTypeError, match="float33"):
        z3.create_array(tmp_path / "new.zarr", "g/y", shape=(2,), dtype="float33")
    assert not (tmp_path / "new.zarr").exists()


# ---- shapes ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"shape": (20,), "chunks": (3,), "shards": (10,)}, r"\(10,\).*\(3,\)"),
        ({"shape": (4,), "chunks": (2.5,)}, r"chunks.*2\.5"),
        ({"shape": (4.0,)}, r"shape.*4\.0"),
        ({"shape": "abc"}, r"shape.*abc"),
        ({"shape": (-4,)}, r"shape.*-4"),
        ({"shape": (4, -1), "chunks": (2, 2)}, r"shape.*-1"),
        ({"shape": (4,), "chunks": (-1,)}, r"chunks.*-1"),
        ({"shape": (4,), "chunks": (0,)}, r"chunk.*\(0,\)"),
        ({"shape": (4, 4), "chunks": (2,)}, r"chunks.*\(2,\)"),
    ],
)
def test_bad_shapes_write_nothing(store, kwargs, match):
    before = snapshot(store)
    with zraises(errors.ShapeError, match=match):
        z3.create_array(store, "g/y", dtype="i4", **kwargs)
    assert snapshot(store) == before


def test_value_of_wrong_shape_writes_nothing(store):
    a = z3.open_array(store, "x", mode="r+")
    before = snapshot(store)
    with zraises(errors.ShapeError, match=r"'x'.*\(3,\).*\(4,\)"):
        a[:] = np.arange(3)
    with zraises(errors.ShapeError, match=r"'x'.*str"):
        a[:] = "hello"
    with zraises(errors.ShapeError, match=r"'x'.*\(4, 4\)"):
        a.resize((4, 4))
    assert snapshot(store) == before


# ---- store and mode arguments ------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["x", "rw", "W"])
def test_bad_mode_writes_nothing(tmp_path, store, bad):
    before = snapshot(store)
    with zraises(StoreArgumentError, match=re.escape(repr(bad))) as info:
        z3.open_group(store, mode=bad)
    assert isinstance(info.value, ValueError)
    with zraises(StoreArgumentError, match=re.escape(repr(bad))):
        z3.open_array(store, "x", mode=bad)
    with zraises(StoreArgumentError, match=re.escape(repr(bad))):
        z3.open_group(tmp_path / "new.zarr", mode=bad)
    assert snapshot(store) == before
    assert not (tmp_path / "new.zarr").exists()


# ---- corruption --------------------------------------------------------------------------------
def test_truncated_chunk(store):
    store.set("x/c/1", store.get("x/c/1")[:3])
    with zraises(errors.CorruptionError, match="x/c/1"):
        z3.open_array(store, "x")[...]


def test_checksum_mismatch(store):
    data = bytearray(store.get("x/c/0"))
    data[-1] ^= 0xFF
    store.set("x/c/0", bytes(data))
    with zraises(errors.ChecksumError, match="x/c/0"):
        z3.open_array(store, "x")[:2]
    assert z3.open_array(store, "x")[2:].tolist() == [2, 3]  # the other chunk still reads


# Blosc header: 0 version, 4-7 uncompressed size, 8-11 block size, 12-15 compressed size.
@pytest.mark.parametrize("offset", [0, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15])
def test_corrupted_blosc_header_raises_corruption_error(offset):
    s = z3.MemoryStore()
    a = z3.create_array(s, "b", shape=(8,), dtype="f8", chunks=(4,), compressors=BLOSC)
    a[:] = np.arange(8.0)
    frame = bytearray(s.get("b/c/1"))
    frame[offset] ^= 0xFF
    s.set("b/c/1", bytes(frame))
    with zraises(errors.CorruptionError, match="b/c/1"):
        a[...]
    with zraises(errors.CorruptionError, match="blosc"):  # the codec alone, without the array
        BloscCodec(cname="lz4", shuffle="shuffle", typesize=8).decode(
            bytes(frame), ChunkSpec((4,), np.dtype("f8"), 0.0)
        )
    np.testing.assert_array_equal(a[:4], np.arange(4.0))  # the intact chunk still reads


def test_corrupted_blosc_frames_only_raise_package_errors():
    """Random byte damage and truncation either decode or raise a CorruptionError (never a
    SystemError, MemoryError or a crash inside the C library)."""
    rng = np.random.default_rng(7)
    spec = ChunkSpec((256,), np.dtype("f8"), 0.0)
    codec = BloscCodec(cname="zstd", shuffle="bitshuffle", typesize=8)
    frame = codec.encode(rng.standard_normal(256).tobytes(), spec)
    for _ in range(300):
        damaged = bytearray(frame)
        for _ in range(int(rng.integers(1, 4))):
            damaged[int(rng.integers(0, 16))] = int(rng.integers(0, 256))
        if rng.random() < 0.3:
            damaged = damaged[: int(rng.integers(0, len(damaged)))]
        try:
            codec.decode(bytes(damaged), spec)
        except errors.CorruptionError:
            pass


# ---- hierarchy ---------------------------------------------------------------------------------
def test_node_not_found(store):
    with zraises(errors.ArrayNotFoundError, match="nothere"):
        z3.open_array(store, "nothere")
    with zraises(errors.GroupNotFoundError, match="nothere"):
        z3.open_group(store, "nothere", mode="r")
    z3.create_group(store, "g")
    with zraises(errors.ArrayNotFoundError, match=r"'g'.*group"):
        z3.open_array(store, "g")


def test_node_exists_writes_nothing(store):
    z3.create_group(store, "g", attributes={"keep": 1})
    before = snapshot(store)
    with zraises(errors.NodeExistsError, match="'x'"):
        z3.create_group(store, "x")
    with zraises(errors.NodeExistsError, match="'x'"):
        z3.create_array(store, "x", shape=(1,), dtype="i1")
    with zraises(errors.NodeExistsError, match="'g'"):
        z3.create_array(store, "g", shape=(1,), dtype="i1")
    with zraises(errors.NodeExistsError, match="'x'"):
        z3.open_group(store, "x", mode="w-")
    with zraises(errors.NodeExistsError, match=r"'x/c'.*'x'.*array"):
        z3.create_group(store, "x/c")  # an array cannot have children
    with zraises(errors.NodeExistsError, match=r"'x/sub/y'.*'x'.*array"):
        z3.create_array(store, "x/sub/y", shape=(1,), dtype="i1")
    assert snapshot(store) == before
    assert z3.open_array(store, "x")[...].tolist() == [0, 1, 2, 3]


# ---- read-only ---------------------------------------------------------------------------------
def test_read_only_array_names_it_and_writes_nothing(store):
    before = snapshot(store)
    a = z3.open_array(store, "x", mode="r")
    with zraises(errors.ReadOnlyError, match="array 'x'"):
        a[:] = 5
    with zraises(errors.ReadOnlyError, match="array 'x'"):
        a.oindex[[0, 2]] = 5
    with zraises(errors.ReadOnlyError, match="array 'x'"):
        a.vindex[[1]] = 5
    with zraises(errors.ReadOnlyError, match="array 'x'"):
        a.resize(8)
    with zraises(errors.ReadOnlyError, match="array 'x'"):
        a.attrs["new"] = 1
    assert snapshot(store) == before


def test_read_only_group_and_store_write_nothing(store):
    before = snapshot(store)
    g = z3.open_group(store, mode="r")
    with zraises(errors.ReadOnlyError, match="group '/'"):
        g.create_array("y", shape=(1,), dtype="i1")
    with zraises(errors.ReadOnlyError, match="group '/'"):
        g.create_group("h")
    ro = store.with_read_only()
    with zraises(errors.ReadOnlyError, match="'x/c/0'"):
        ro.set("x/c/0", b"junk")
    with zraises(errors.ReadOnlyError, match="'x/c/0'"):
        ro.erase("x/c/0")
    with zraises(errors.ReadOnlyError, match="'r\\+'"):
        z3.open_array(ro, "x", mode="r+")
    with zraises(errors.ReadOnlyError, match="read-only"):
        z3.create_array(ro, "y", shape=(1,), dtype="i1")
    assert snapshot(store) == before


# ---- selections --------------------------------------------------------------------------------
def test_out_of_bounds_names_index_axis_and_size(store):
    a = z3.open_array(store, "x", mode="r+")
    before = snapshot(store)
    with zraises(errors.SelectionError, match=r"index 7 .*axis 0 .*size 4"):
        a[7]
    with zraises(errors.SelectionError, match=r"index -5 .*axis 0 .*size 4") as info:
        a[-5]
    assert isinstance(info.value, IndexError)  # also a plain IndexError for numpy-style callers
    with zraises(errors.SelectionError, match=r"index 9 .*axis 0 .*size 4"):
        a.oindex[[0, 9]]
    with zraises(errors.SelectionError, match=r"index -9 .*axis 0 .*size 4"):
        a.vindex[[0, -9]]
    with zraises(errors.SelectionError, match=r"index 9 .*axis 0 .*size 4"):
        a[9] = 1.0
    with zraises(errors.SelectionError, match=r"index 4 .*axis 0 .*size 4"):
        a.oindex[[1, 4]] = 1.0  # index 1 is valid: nothing may be written before the check
    assert snapshot(store) == before


def test_out_of_bounds_on_second_axis_names_it(store):
    a = z3.create_array(store, "m", shape=(3, 5), dtype="i2", chunks=(2, 2))
    with zraises(errors.SelectionError, match=r"index 5 .*axis 1 .*size 5"):
        a[0, 5]
    with zraises(errors.SelectionError, match=r"index -6 .*axis 1 .*size 5"):
        a.oindex[:, [0, -6]]
    with zraises(errors.SelectionError, match=r"1\.5.*axis 0|axis 0.*1\.5"):
        a[1.5]


# ---- keys --------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["../evil", "a/../../evil", "/abs", "a\\b", "a//b", ""])
def test_store_keys_cannot_escape(tmp_path, bad):
    s = z3.LocalStore(tmp_path / "root")
    with zraises(errors.InvalidKeyError, match=re.escape(repr(bad))):
        s.set(bad, b"x")
    with zraises(errors.InvalidKeyError, match=re.escape(repr(bad))):
        s.set_many({"ok": b"1", bad: b"x"})
    assert snapshot(s) == {}
    assert not (tmp_path / "evil").exists()


@pytest.mark.parametrize("bad", ["../evil", "a/../../evil", "a\\b", "a//b", "x/./y"])
def test_node_paths_cannot_escape(tmp_path, bad):
    s = z3.LocalStore(tmp_path / "root")
    z3.create_group(s)
    before = snapshot(s)
    with zraises(errors.InvalidKeyError, match=re.escape(repr(bad))):
        z3.create_array(s, bad, shape=(1,), dtype="i1")
    with zraises(errors.InvalidKeyError, match=re.escape(repr(bad))):
        z3.create_group(s, bad)
    assert snapshot(s) == before
    assert sorted(os.listdir(tmp_path)) == ["root"]


@pytest.mark.parametrize("bad", ["...", "__res", "g/__x"])
def test_reserved_node_names_write_nothing(store, bad):
    before = snapshot(store)
    with zraises(errors.InvalidKeyError, match=re.escape(repr(bad.rsplit("/", 1)[-1]))):
        z3.create_group(store, bad)
    assert snapshot(store) == before


def test_partial_write_over_a_corrupt_chunk_writes_nothing(tmp_path):
    s = z3.LocalStore(tmp_path / "c.zarr")
    a = z3.create_array(s, "x", shape=(8,), dtype="i4", chunks=(2,), compressors=[{"name": "crc32c"}])
    a[:] = np.arange(8)
    bad = bytearray(s.get("x/c/3"))
    bad[0] ^= 0xFF
    s.set("x/c/3", bytes(bad))
    before = {k: s.get(k) for k in s.list()}
    with pytest.raises(errors.ChecksumError, match="x/c/3"):
        a[1:7] = -1  # partial writes of chunks 0 and 3 need their old values; chunk 3 is corrupt
    assert {k: s.get(k) for k in s.list()} == before


# --- issue 13: bad input never escapes the hierarchy (each case once raised an untyped error) ---
def _array_doc(store, path: str = "x") -> dict:
    return json.loads(bytes(store.get(f"{path}/zarr.json")))


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [129, 5_000, 200_000])
def test_deeply_nested_zarr_json_is_a_metadata_error(store, depth):
    text = json.dumps({**_array_doc(store), "attributes": {"a": "DEEP"}}).replace('"DEEP"', _deep(depth))
    store.set("x/zarr.json", text.encode())
    with zraises(errors.MetadataError, match=r"x/zarr.json: JSON nested deeper than 128"):
        z3.open_array(store, "x")


@pytest.mark.parametrize("key", [".zarray", ".zattrs", ".zmetadata", "zarr.json"])
def test_load_json_bounds_nesting_of_every_document(key):
    """The one parser for stored JSON (core/group.py's v2 reads are to use it too)."""
    from zarr3_backend.core.metadata import load_json

    with zraises(errors.MetadataError, match=re.escape(key) + ".*nested deeper"):
        load_json(_deep(200_000), key)
    with zraises(errors.MetadataError, match=re.escape(key) + ".*nested deeper"):
        load_json(_deep(129).encode(), key)
    assert load_json(_deep(128), key) is not None


@pytest.mark.parametrize("doc", [".zarray", ".zattrs", ".zmetadata"])
def test_deeply_nested_v2_documents_are_metadata_errors(doc):
    """Nesting that json parses (500 levels) but the package must not recurse into."""
    s = z3.MemoryStore()
    zarray = {
        "zarr_format": 2,
        "shape": [4],
        "chunks": [2],
        "dtype": "<i4",
        "compressor": None,
        "fill_value": 0,
        "order": "C",
        "filters": None,
    }
    docs = {".zgroup": {"zarr_format": 2}, "x/.zarray": zarray, "x/.zattrs": {"a": "DEEP"}}
    if doc == ".zmetadata":
        docs[".zmetadata"] = {
            "zarr_consolidated_format": 1,
            "metadata": {"x/.zarray": zarray, "x/.zattrs": "DEEP"},
        }
    elif doc == ".zarray":
        zarray["fill_value"] = "DEEP"
    for key, value in docs.items():
        s.set(key, json.dumps(value).replace('"DEEP"', _deep(500)).encode())
    if doc != ".zattrs":
        docs["x/.zattrs"] = {}
        s.set("x/.zattrs", b"{}")
    opener = z3.open_group if doc == ".zmetadata" else z3.open_array
    with zraises(errors.MetadataError, match=re.escape(doc) + ".*nested deeper"):
        node = opener(s, "" if doc == ".zmetadata" else "x", mode="r")
        if doc == ".zmetadata":
            node["x"]


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("shape", [2**63], r"field 'shape'.*2\*\*63-1"),
        ("shape", [2**62, 4], r"field 'shape'.*2\*\*63-1"),
        ("chunk_shape", [2**61], r"chunk_shape.*2\*\*63-1 bytes"),
    ],
)
def test_sizes_past_int64_are_refused(store, field, value, match):
    doc = _array_doc(store)
    if field == "shape":
        doc["shape"] = value
        doc["chunk_grid"]["configuration"]["chunk_shape"] = [2] * len(value)
    else:
        doc["chunk_grid"]["configuration"]["chunk_shape"] = value
    store.set("x/zarr.json", json.dumps(doc).encode())
    with zraises(errors.MetadataError, match=match):
        z3.open_array(store, "x")


@pytest.mark.parametrize(
    "codec, match",
    [
        (
            {
                "name": "blosc",
                "configuration": {"cname": "lz4", "clevel": 1, "shuffle": "shuffle", "typesize": 2**40},
            },
            "'typesize' must be an integer from 1 to",
        ),
        (
            {
                "name": "blosc",
                "configuration": {"cname": "lz4", "clevel": 1, "shuffle": "shuffle", "blocksize": 2**62},
            },
            "'blocksize' must be an integer from 0 to",
        ),
    ],
)
def test_blosc_sizes_are_bounded(store, codec, match):
    doc = _array_doc(store)
    doc["codecs"] = [doc["codecs"][0], codec]
    store.set("x/zarr.json", json.dumps(doc).encode())
    with zraises(errors.CodecError, match=match):
        z3.open_array(store, "x")


def test_shard_index_of_absurd_size_is_refused():
    s = z3.MemoryStore()
    with zraises(errors.CodecError, match=r"inner chunks, an index of more than"):
        z3.create_array(s, "x", shape=(2**40,), dtype="u1", chunks=(1,), shards=(2**40,))
    assert list(s.list()) == []


@pytest.mark.parametrize("compressor", ["blosc", "zstd"])
def test_huge_chunk_shape_with_a_tiny_stored_chunk_allocates_nothing(store, compressor):
    """The frame's declared size is compared with the chunk's before the chunk is allocated."""
    codecs = BLOSC if compressor == "blosc" else ZSTD_CRC[:1]
    a = z3.create_array(store, "y", shape=(4,), dtype="f8", chunks=(4,), compressors=codecs)
    a[:] = 1.0
    doc = _array_doc(store, "y")
    doc["chunk_grid"]["configuration"]["chunk_shape"] = [2**40]  # 8 TiB per chunk
    store.set("y/zarr.json", json.dumps(doc).encode())
    b = z3.open_array(store, "y")
    with zraises(
        errors.CorruptionError, match=r"chunk 'y/c/0'.*decompresses to 32 bytes, expected 8796093022208"
    ):
        b[:2]


def test_zstd_frame_declaring_more_than_it_can_hold():
    from zarr3_backend.codecs import ChunkSpec as Spec
    from zarr3_backend.codecs.zstd import ZstdCodec

    # magic, descriptor (single segment, 8-byte content size), content size 2**50, one raw block
    frame = b"\x28\xb5\x2f\xfd" + bytes([0xE0]) + (2**50).to_bytes(8, "little") + b"\x01\x00\x00"
    spec = Spec((4,), np.dtype("u1"), np.uint8(0))
    with zraises(errors.CorruptionError, match="declares 1125899906842624 bytes"):
        ZstdCodec().decode(frame, spec)


def test_fill_chunk_of_absurd_size_is_a_resource_limit(store):
    z3.create_array(store, "f", shape=(4,), dtype="f4", chunks=(4,), compressors=None)
    doc = _array_doc(store, "f")
    doc["chunk_grid"]["configuration"]["chunk_shape"] = [2**50]  # 4 PiB of float32 per chunk
    store.set("f/zarr.json", json.dumps(doc).encode())
    a = z3.open_array(store, "f", mode="r+")
    with zraises(errors.ResourceLimitError, match=r"chunk of shape \[1125899906842624\]"):
        a[0] = 1.0


@pytest.mark.parametrize("codec", ["vlen-utf8", "vlen-bytes"])
def test_vlen_item_count_is_checked_before_allocating(codec):
    s = z3.MemoryStore()
    dtype = "str" if codec == "vlen-utf8" else "bytes"
    a = z3.create_array(s, "v", shape=(2,), dtype=dtype, chunks=(2,), compressors=None)
    a[:] = np.array(["ab", "cd"] if dtype == "str" else [b"ab", b"cd"], dtype=object)
    data = bytearray(s.get("v/c/0"))
    data[:4] = (2**32 - 1).to_bytes(4, "little")  # numcodecs would allocate 32 GiB of items
    s.set("v/c/0", bytes(data))
    with zraises(errors.CorruptionError, match=r"'v/c/0'.*header says 4294967295 items.*holds 2"):
        a[:]
    data[:4] = (2).to_bytes(4, "little")
    data[4:8] = (2**31).to_bytes(4, "little")  # an item length past the bytes present
    s.set("v/c/0", bytes(data))
    with zraises(errors.CorruptionError, match="'v/c/0'"):
        a[:]


def _set_index_entry(store, key: str, layout, entry: int, offset: int, nbytes: int) -> None:
    """Rewrite one (offset, nbytes) entry of a shard's end index, with a valid crc32c."""
    from zarr3_backend.codecs.shard_index import decode_index, encode_index

    data = bytes(store.get(key))
    index = decode_index(data[-layout.index_size :], layout.index).copy()
    index.reshape(-1, 2)[entry] = (offset, nbytes)
    store.set(key, data[: -layout.index_size] + encode_index(index, layout.index))


@pytest.mark.parametrize("compressors", [None, ZSTD_CRC[:1]], ids=["raw", "zstd"])
@pytest.mark.parametrize("nbytes", [2**62, 2**63 + 3])
def test_shard_index_entry_past_any_shard_is_refused_before_reading(store, compressors, nbytes):
    a = z3.create_array(store, "s", shape=(8,), dtype="f4", chunks=(2,), shards=(8,), compressors=compressors)
    a[:] = np.arange(8)
    layout = a._pipeline.chain.array_bytes.layout(a._pipeline.chain.specs[-1])
    _set_index_entry(store, "s/c/0", layout, 1, 0, nbytes)
    b = z3.open_array(store, "s")
    with zraises(errors.CorruptionError, match=r"shard 's/c/0'.*inner chunk \(1,\).*past the end"):
        b[2:3]  # a partial read: the shard's size is not known
    with zraises(errors.CorruptionError, match=r"shard 's/c/0'.*inner chunk \(1,\)"):
        b[:]  # the whole shard


@pytest.mark.parametrize("cut", [1, 10, 40])
def test_truncated_shard_names_the_key(store, cut):
    a = z3.create_array(store, "s", shape=(8,), dtype="f4", chunks=(2,), shards=(8,), compressors=ZSTD_CRC)
    a[:] = np.arange(8)
    data = bytes(store.get("s/c/0"))
    store.set("s/c/0", data[: len(data) - cut])
    b = z3.open_array(store, "s")
    for selection in (slice(None), slice(2, 3)):
        with zraises(errors.CorruptionError, match=r"shard 's/c/0'"):
            b[selection]


def test_v2_dtype_of_absurd_item_size_is_refused():
    """The default fill value alone would allocate one 2 GiB element."""
    s = z3.MemoryStore()
    s.set(".zgroup", b'{"zarr_format": 2}')
    zarray = {
        "zarr_format": 2,
        "shape": [4],
        "chunks": [2],
        "dtype": "|V2147483647",
        "compressor": None,
        "fill_value": None,
        "order": "C",
        "filters": None,
    }
    s.set("x/.zarray", json.dumps(zarray).encode())
    with zraises(errors.DataTypeError, match=r"x/.zarray: field 'dtype'.*2147483647-byte elements"):
        z3.open_array(s, "x")


@pytest.mark.parametrize("kind", ["oindex", "vindex"])
def test_ragged_index_list_is_a_selection_error(store, kind):
    a = z3.create_array(store, "r", shape=(6, 4), dtype="f4", chunks=(3, 2))
    with zraises(errors.SelectionError, match="not a rectangular array"):
        getattr(a, kind)[[[0, 1], [0]]]


def test_whole_shard_too_large_for_memory_is_a_resource_limit():
    """transpose before sharding: a read decodes whole shards (here 4 TiB, nearly all fill)."""
    from zarr3_backend.codecs.shard_index import EMPTY, encode_index

    s = z3.MemoryStore()
    n, inner = 2**20, 2**10
    shard = {"name": "sharding_indexed", "configuration": {"chunk_shape": [inner, inner]}}
    codecs = [{"name": "transpose", "configuration": {"order": [1, 0]}}, shard]
    a = z3.create_array(s, "t", shape=(n, n), dtype="f4", chunks=(n, n), codecs=codecs)
    layout = a._pipeline.chain.array_bytes.layout(a._pipeline.chain.specs[-1])
    s.set("t/c/0/0", encode_index(np.full((*layout.grid, 2), EMPTY, dtype=np.uint64), layout.index))
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)  # a 4 TiB allocation must fail, also
    resource.setrlimit(resource.RLIMIT_AS, (2**42 if hard == resource.RLIM_INFINITY else hard, hard))
    try:  # where memory is overcommitted without limit
        with zraises(errors.ResourceLimitError, match=r"chunk of shape \[1048576, 1048576\]"):
            a[0, 0]
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_v2_blosc_header_declaring_a_huge_chunk_allocates_nothing():
    import numcodecs

    s = z3.MemoryStore()
    s.set(".zgroup", b'{"zarr_format": 2}')
    compressor = {"id": "blosc", "cname": "lz4", "clevel": 1, "shuffle": 1}
    zarray = {
        "zarr_format": 2,
        "shape": [4],
        "chunks": [4],
        "dtype": "<f4",
        "compressor": compressor,
        "fill_value": 0,
        "order": "C",
        "filters": None,
    }
    s.set("x/.zarray", json.dumps(zarray).encode())
    frame = bytearray(numcodecs.Blosc("lz4").encode(np.arange(4, dtype="f4").tobytes()))
    frame[4:8] = (2**30).to_bytes(4, "little")  # numcodecs would allocate 1 GiB for the output
    s.set("x/0", bytes(frame))
    with zraises(errors.CorruptionError, match=r"chunk 'x/0'.*declares 1073741824 bytes, more than the 16"):
        z3.open_array(s, "x")[:]


@pytest.mark.parametrize(
    "make", [lambda: ByteRange(-1, 4), lambda: ByteRange(0, -4), lambda: ByteRange.suffix(0)]
)
def test_bad_byte_ranges_are_argument_errors(make):
    with zraises(errors.ArgumentError, match="byte range|suffix length"):
        make()


@pytest.mark.parametrize(
    "data_type",
    ["r99999999999992", {"name": "fixed_length_utf32", "configuration": {"length_bytes": 2**40}}],
)
def test_data_types_with_absurd_element_sizes_are_typed_errors(data_type):
    with pytest.raises(errors.DataTypeError):
        z3.create_array(z3.MemoryStore(), shape=(2,), dtype=data_type)


def test_ragged_index_list_in_plain_indexing_is_a_selection_error():
    a = z3.create_array(z3.MemoryStore(), shape=(4, 4), dtype="i4")
    with pytest.raises(errors.SelectionError):
        a[[[0, 1], [0]]]
