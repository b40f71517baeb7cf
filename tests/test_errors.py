"""Each typed error: the right class, a message naming the culprit, nothing written by the call."""

from __future__ import annotations

import json

import numpy as np
import pytest

import zarr3_backend as z3
from zarr3_backend import errors


def snapshot(store) -> dict:
    return {k: store.get(k) for k in store.list()}


@pytest.fixture
def store():
    s = z3.MemoryStore()
    a = z3.create_array(
        s,
        "x",
        shape=(4,),
        dtype="f4",
        chunks=(2,),
        compressors=[{"name": "zstd", "configuration": {"level": 1, "checksum": False}}, {"name": "crc32c"}],
    )
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
        "NodeExistsError",
        "ReadOnlyError",
        "SelectionError",
        "ShapeError",
        "StoreError",
        "InvalidKeyError",
    ]:
        assert issubclass(getattr(errors, name), errors.Zarr3Error)


def test_invalid_json(store):
    store.set("x/zarr.json", b"{not json")
    with pytest.raises(errors.MetadataError, match="x"):
        z3.open_array(store, "x")


def test_unknown_field_vs_must_understand_false(store):
    doc = json.loads(store.get("x/zarr.json"))
    doc["surprise"] = {"must_understand": True}
    store.set("x/zarr.json", json.dumps(doc).encode())
    with pytest.raises(errors.UnknownFieldError, match="surprise"):
        z3.open_array(store, "x")
    doc["surprise"] = {"must_understand": False, "value": 1}
    store.set("x/zarr.json", json.dumps(doc).encode())
    assert z3.open_array(store, "x")[...].tolist() == [0, 1, 2, 3]


def test_unknown_codec_on_open(store):
    doc = json.loads(store.get("x/zarr.json"))
    doc["codecs"].append({"name": "mystery"})
    store.set("x/zarr.json", json.dumps(doc).encode())
    with pytest.raises(errors.UnknownCodecError, match="mystery"):
        z3.open_array(store, "x")


def test_unknown_codec_on_create_writes_nothing(store):
    before = snapshot(store)
    with pytest.raises(errors.UnknownCodecError, match="nope"):
        z3.create_array(store, "y", shape=(2,), dtype="i4", compressors=[{"name": "nope"}])
    assert snapshot(store) == before


def test_bad_dtype_and_fill_write_nothing(store):
    before = snapshot(store)
    with pytest.raises(errors.DataTypeError, match=r"float128|f16"):
        z3.create_array(store, "y", shape=(2,), dtype="float128")
    with pytest.raises(errors.DataTypeError, match="300"):
        z3.create_array(store, "y", shape=(2,), dtype="uint8", fill_value=300)
    assert snapshot(store) == before


def test_shards_not_multiple_of_chunks_writes_nothing(store):
    before = snapshot(store)
    with pytest.raises(errors.ShapeError, match=r"\(10,\).*\(3,\)"):
        z3.create_array(store, "y", shape=(20,), dtype="i4", chunks=(3,), shards=(10,))
    assert snapshot(store) == before


def test_truncated_chunk(store):
    store.set("x/c/1", store.get("x/c/1")[:3])
    with pytest.raises(errors.CorruptionError, match="x/c/1"):
        z3.open_array(store, "x")[...]


def test_checksum_mismatch(store):
    data = bytearray(store.get("x/c/0"))
    data[-1] ^= 0xFF
    store.set("x/c/0", bytes(data))
    with pytest.raises(errors.ChecksumError, match="x/c/0"):
        z3.open_array(store, "x")[:2]


def test_node_not_found_and_exists(store):
    with pytest.raises(errors.ArrayNotFoundError, match="nothere"):
        z3.open_array(store, "nothere")
    with pytest.raises(errors.GroupNotFoundError, match="nothere"):
        z3.open_group(store, "nothere", mode="r")
    with pytest.raises(errors.NodeExistsError, match="'x'"):
        z3.create_group(store, "x")


def test_read_only_writes_nothing(store):
    before = snapshot(store)
    a = z3.open_array(store, "x", mode="r")
    with pytest.raises(errors.ReadOnlyError):
        a[:] = 5
    with pytest.raises(errors.ReadOnlyError):
        a.resize(8)
    assert snapshot(store) == before


def test_out_of_bounds_selection(store):
    a = z3.open_array(store, "x")
    with pytest.raises(errors.SelectionError):
        a[7]
    with pytest.raises(IndexError):  # also a plain IndexError for numpy-style callers
        a[-5]


@pytest.mark.parametrize("bad", ["../evil", "a/../../b", "/abs", "a\\b"])
def test_keys_cannot_escape(tmp_path, bad):
    s = z3.LocalStore(tmp_path / "root")
    with pytest.raises(errors.InvalidKeyError):
        s.set(bad, b"x")
    if not bad.startswith("/"):  # a node path may start with "/" (it names the root)
        with pytest.raises(errors.InvalidKeyError):
            z3.create_array(s, bad, shape=(1,), dtype="i1")
    assert not (tmp_path / "evil").exists()
