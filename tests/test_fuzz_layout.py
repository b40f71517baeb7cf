"""Hypothesis fuzzing of the chunk layout: rectilinear chunk grids in ``zarr.json``, and shard
indexes (plain and nested sharding) whose entries are crafted, with a valid crc32c over them.

Random bit flips of stored shards are ``test_corruption``'s; here the index entries are chosen
to be the dangerous ones (offsets past the end or into the index, overlapping chunks, huge
``nbytes``, the 2^64-1 sentinel in one half only, sums that overflow 64 bits), and the checksum
is recomputed so that they reach the code that trusts the index. Reads (whole, partial, point,
orthogonal), writes into the shard, and ``zarr3 check``'s decoding must end in success or a
``Zarr3Error``; a ``CorruptionError`` must name the shard's key.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import crc32c
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import zarr3_backend as z3
from tests.test_corruption import _memory_cap  # noqa: F401  (autouse: caps the address space)
from tests.test_fuzz_metadata import _SCALARS, _SIZES
from zarr3_backend import errors
from zarr3_backend._threads import pool_size, thread_map
from zarr3_backend.cli.check import check_unit
from zarr3_backend.codecs.shard_index import EMPTY
from zarr3_backend.core.chunk_grid import MAX_EDGES
from zarr3_backend.core.info import storage_info
from zarr3_backend.errors import CorruptionError, MetadataError, Zarr3Error

#: No example database, no explain phase (its line tracing does not fit under the memory cap).
_SETTINGS = {
    "deadline": None,
    "suppress_health_check": list(HealthCheck),
    "database": None,
    "phases": [Phase.explicit, Phase.generate, Phase.shrink],
}


def budget(n: int) -> int:
    """``n`` examples, times ``ZARR3_FUZZ_SCALE`` (run the fuzzers longer locally to hunt bugs)."""
    return n * int(os.environ.get("ZARR3_FUZZ_SCALE", "1"))


@pytest.fixture(scope="module", autouse=True)
def _warm_pools():
    """Start every thread of both pools before the address space is capped (``_memory_cap``
    measures it per test): a thread started under the cap may not find room for its stack."""
    for kind in ("io", "cpu"):
        thread_map(lambda _: time.sleep(0.01), range(pool_size(kind)), kind=kind)


def _typed(fn, *args: Any, **kwargs: Any) -> Any:
    """``fn(...)``, or ``None`` when it raises a ``Zarr3Error``; any other exception fails."""
    try:
        return fn(*args, **kwargs)
    except Zarr3Error:
        return None


# --- rectilinear chunk grids ---------------------------------------------------------------------
_EDGE = st.one_of(st.integers(1, 6), st.sampled_from(_SIZES), st.sampled_from(_SCALARS))
_RUN = st.one_of(
    st.tuples(st.integers(1, 5), st.integers(1, 4)).map(list),
    st.tuples(_EDGE, _EDGE).map(list),
    st.sampled_from([[1, 10**8], [2**62, 2], [1, 10**8 + 1], [1], [1, 2, 3], [[1, 2], 2]]),
)
_GOOD_RUN = st.tuples(st.integers(1, 5), st.integers(1, 4)).map(list)
_AXES = [
    st.lists(st.one_of(st.integers(1, 5), _GOOD_RUN), min_size=1, max_size=5),  # valid edges
    st.integers(1, 6),  # a regular axis
    st.lists(st.one_of(st.integers(1, 5), _RUN), min_size=1, max_size=5),
    st.lists(_EDGE, max_size=4),
    _EDGE,
    st.just([[1, 10**8]] * 3),  # 3*10^8 edges: each run within bounds, the sum not
]
_AXIS = st.integers(0, 11).flatmap(lambda i: _AXES[i] if i < len(_AXES) else _AXES[i % 2])


@st.composite
def rectilinear_docs(draw: st.DrawFn) -> dict[str, Any]:
    """An array ``zarr.json`` with a rectilinear grid, often sharded (the shard edges then are
    the grid's, the inner chunk shape the codec's)."""
    ndim = draw(st.integers(1, 3))
    shape = [draw(st.integers(0, 9)) for _ in range(ndim)]
    axes = [draw(_AXIS) for _ in range(ndim)]
    if draw(st.integers(0, 7)) == 3:
        axes = draw(st.sampled_from([[], axes[:-1], [*axes, 2], "x", {"a": 1}, None]))
    config: dict[str, Any] = {
        "kind": draw(st.integers(0, 9).map(lambda i: "other" if i == 7 else "inline")),
        "chunk_shapes": axes,
    }
    codecs: list[Any] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if draw(st.booleans()):
        codecs = [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": [draw(st.sampled_from([1, 1, 2, 3, 2**40])) for _ in range(ndim)],
                    "codecs": codecs,
                    "index_codecs": [codecs[0], {"name": "crc32c"}],
                    "index_location": draw(st.sampled_from(["start", "end"])),
                },
            }
        ]
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": draw(st.sampled_from(["int16", "float64", "uint8"])),
        "chunk_grid": {"name": "rectilinear", "configuration": config},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": codecs,
    }


@settings(max_examples=budget(600), **_SETTINGS)
@given(doc=rectilinear_docs(), chunk=st.binary(max_size=48))
def test_rectilinear_documents(doc, chunk):
    """Open, read, write, resize an array with a generated rectilinear grid and one stored chunk
    of arbitrary bytes."""
    store = z3.MemoryStore()
    store.set("zarr.json", b'{"zarr_format": 3, "node_type": "group"}')
    store.set("a/zarr.json", json.dumps(doc).encode())
    store.set("a/c/" + "/".join("0" * len(doc["shape"])), chunk)
    a = _typed(z3.open_array, store, path="a", mode="r+")
    if a is None:
        return
    repr(a), a.nchunks, a.fill_value
    _typed(lambda: a.chunks)  # a ShapeError: a rectilinear grid has no single chunk shape
    _typed(lambda: a.info)
    got = _typed(lambda: a[...])
    _typed(lambda: a[tuple(slice(1, None, 2) for _ in a.shape)])
    if got is not None and a.size:
        _typed(a.__setitem__, tuple(0 for _ in a.shape), 1)
        _typed(a.__setitem__, ..., got)
        _typed(lambda: a.oindex[tuple([0, s - 1] for s in a.shape)])
    _typed(a.resize, tuple(s + 3 for s in a.shape))
    _typed(lambda: z3.open_array(store, path="a")[...])
    from zarr3_backend.dask.read import from_array

    _typed(from_array, a)


# --- crafted shard indexes -----------------------------------------------------------------------
BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
CRC = {"name": "crc32c"}
KEY = "a/c/0"
N_INNER = 4  # shard (16,), inner chunks (4,)


def _layout(location: str, nested: bool, inner_crc: bool) -> list[dict[str, Any]]:
    inner: list[Any] = [BYTES, CRC] if inner_crc else [BYTES]
    if nested:
        inner = [
            {
                "name": "sharding_indexed",
                "configuration": {"chunk_shape": [2], "codecs": inner, "index_codecs": [BYTES, CRC]},
            }
        ]
    config = {"chunk_shape": [4], "codecs": inner, "index_codecs": [BYTES, CRC], "index_location": location}
    return [{"name": "sharding_indexed", "configuration": config}]


def _entry(size: int) -> st.SearchStrategy:
    """One ``(offset, nbytes)`` pair, most of them dangerous for a shard of ``size`` bytes."""
    near = st.integers(0, size + 16)
    big = st.sampled_from([EMPTY, EMPTY - 1, 2**63, 2**63 - 1, 2**62, 2**32, 2**31, size, size + 1])
    return st.tuples(st.one_of(near, big), st.one_of(near, big, st.integers(0, 64)))


def _with_index(shard: bytes, entries: np.ndarray, location: str) -> bytes:
    """``shard`` with its ``[bytes, crc32c]`` index replaced by ``entries`` (checksum valid)."""
    raw = entries.astype("<u8").tobytes()
    index = raw + crc32c.crc32c(raw).to_bytes(4, "little")
    return index + shard[len(index) :] if location == "start" else shard[: -len(index)] + index


def _index_of(shard: bytes, n: int, location: str) -> tuple[np.ndarray, int]:
    """The ``(n, 2)`` entries of a ``[bytes, crc32c]`` index and where the index starts."""
    size = 16 * n + 4
    start = 0 if location == "start" else len(shard) - size
    return np.frombuffer(shard[start : start + 16 * n], dtype="<u8").reshape(n, 2), start


@st.composite
def crafted_shards(draw: st.DrawFn) -> tuple[list, str, bytes]:
    """``(codecs, key, stored shard)``: a real shard with crafted entries in its index (or in
    the index of one of its inner shards)."""
    location = draw(st.sampled_from(["start", "end"]))
    nested = draw(st.booleans())
    codecs = _layout(location, nested, draw(st.booleans()))
    store = z3.MemoryStore()
    a = z3.create_array(store, "a", shape=(16,), dtype="int32", chunks=(16,), codecs=codecs, fill_value=0)
    values = np.arange(16, dtype="int32") + 1
    values[draw(st.sampled_from([slice(0, 0), slice(4, 8), slice(0, 2)]))] = 0  # some chunks empty
    a[:] = values
    shard = bytes(store.get(KEY))
    entries, _ = _index_of(shard, N_INNER, location)
    entries = entries.copy()
    if nested and draw(st.booleans()):  # damage an inner shard's index instead (its end)
        k = draw(st.integers(0, N_INNER - 1))
        off, nb = (int(v) for v in entries[k])
        if off != EMPTY:
            inner = shard[off : off + nb]
            inner_entries, _ = _index_of(inner, 2, "end")
            inner_entries = inner_entries.copy()
            for j in draw(st.lists(st.integers(0, 1), min_size=1, max_size=2)):
                inner_entries[j] = draw(_entry(len(inner)))
            inner = _with_index(inner, inner_entries, "end")
            return codecs, location, shard[:off] + inner + shard[off + nb :]
    for k in draw(st.lists(st.integers(0, N_INNER - 1), min_size=1, max_size=3)):
        entries[k] = draw(_entry(len(shard)))
    if draw(st.integers(0, 4)) == 0:  # two entries share their bytes
        entries[draw(st.integers(1, N_INNER - 1))] = entries[0]
    return codecs, location, _with_index(shard, entries, location)


#: Names of the package's error types (``zarr3 check`` reports an error by its type's name).
TYPED = {name for name, obj in vars(errors).items() if isinstance(obj, type) and issubclass(obj, Zarr3Error)}


def _check_read(fn) -> None:
    try:
        fn()
    except CorruptionError as e:
        assert KEY in str(e), f"error does not name the shard {KEY!r}: {e}"
    except Zarr3Error:
        pass


@settings(max_examples=budget(600), **_SETTINGS)
@given(case=crafted_shards(), local=st.booleans())
def test_crafted_shard_indexes(case, local, tmp_path_factory):
    """Reads, writes and ``zarr3 check``'s decoding of a shard whose index lies (checksum valid)."""
    codecs, _, shard = case
    store = z3.LocalStore(tmp_path_factory.mktemp("s")) if local else z3.MemoryStore()
    z3.create_array(store, "a", shape=(16,), dtype="int32", chunks=(16,), codecs=codecs, fill_value=0)
    store.set(KEY, shard)
    a = z3.open_array(store, "a", mode="r+")
    for sel in (Ellipsis, slice(5, 7), 3, slice(0, 16, 5), slice(8, 16)):
        _check_read(lambda sel=sel: a[sel])
    _check_read(lambda: a.oindex[[0, 9, 15]])
    _check_read(lambda: storage_info(a))  # what `zarr3 info` measures from each shard's index
    problem = check_unit(a, (0,), shard)  # reports any exception: it must be a typed one
    assert problem is None or problem.split(":")[0] in TYPED, problem
    store.set(KEY, shard)
    _check_read(lambda: a.__setitem__(slice(1, 2), 7))
    store.set(KEY, shard)
    _check_read(lambda: a.__setitem__(slice(0, 16), np.arange(16)))
    got = _typed(lambda: a[...])
    if got is not None:
        assert got.shape == (16,)


# --- regressions: inputs the fuzzers found --------------------------------------------------------
def _rect_doc(chunk_shapes: list) -> bytes:
    doc = {"zarr_format": 3, "node_type": "array", "shape": [0], "data_type": "int16", "fill_value": 0,
           "chunk_grid": {"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": chunk_shapes}},
           "chunk_key_encoding": {"name": "default"}, "codecs": [BYTES]}  # fmt: skip
    return json.dumps(doc).encode()


def test_rectilinear_run_lengths_are_bounded_in_total():
    """Three ``[1, 10**8]`` runs on one axis (each run within the old per-run bound): refused
    naming the field before they are expanded (was: ``MemoryError`` under the address cap)."""
    store = z3.MemoryStore()
    store.set("a/zarr.json", _rect_doc([[[1, 10**8]] * 3]))
    with pytest.raises(MetadataError, match=r"'chunk_shapes'\[0\]: run length .* chunk edges"):
        z3.open_array(store, path="a")
    store.set("a/zarr.json", _rect_doc([[[1, 10**8]]]))  # one run: 800 MB of edges, refused too
    with pytest.raises(MetadataError, match=r"'chunk_shapes'\[0\]"):
        z3.open_array(store, path="a")
    store.set("a/zarr.json", _rect_doc([[[1, MAX_EDGES // 2], [2, MAX_EDGES // 2]]]))  # the bound holds
    assert z3.open_array(store, path="a").shape == (0,)
    store.set("a/zarr.json", _rect_doc([[[1, MAX_EDGES // 2], [2, MAX_EDGES // 2], 3]]))
    with pytest.raises(MetadataError, match=r"'chunk_shapes'\[0\]: run length|chunk edges"):
        z3.open_array(store, path="a")


def _sharded(location: str) -> tuple[z3.MemoryStore, bytes]:
    store = z3.MemoryStore()
    a = z3.create_array(
        store,
        "a",
        shape=(16,),
        dtype="int32",
        chunks=(16,),
        codecs=_layout(location, False, False),
        fill_value=0,
    )
    a[:] = np.arange(16, dtype="int32") + 1
    return store, bytes(store.get(KEY))


@pytest.mark.parametrize("location", ["start", "end"])
@pytest.mark.parametrize(
    ("entry", "match"),
    [
        (lambda size: (size + 1, 16), "past the end of the shard|outside the shard's chunk data"),
        (lambda size: (0, 16), "into the shard index"),  # where the index is, for "start"
        (lambda size: (8, 2**63), "outside the shard's chunk data|past the end"),
        (lambda size: (2**63, 2**63), "outside the shard's chunk data|past the end"),
        (lambda size: (EMPTY - 1, 2), "outside the shard's chunk data|past the end"),
        (lambda size: (EMPTY, 16), "half empty"),
        (lambda size: (20, EMPTY), "half empty"),
    ],
    ids=[
        "past-end",
        "into-start",
        "huge-nbytes",
        "huge-both",
        "offset-overflows",
        "empty-offset",
        "empty-nbytes",
    ],
)
def test_a_lying_index_entry_is_a_corruption_error_naming_the_shard(location, entry, match):
    """One index entry of inner chunk 1 rewritten (crc32c recomputed, so only the entry lies):
    every read of that chunk raises ``CorruptionError`` naming the shard and why."""
    store, shard = _sharded(location)
    entries, _ = _index_of(shard, N_INNER, location)
    entries = entries.copy()
    bad = entry(len(shard))
    if bad == (0, 16) and location == "end":
        bad = (len(shard) - 70, 16)  # into the index at the end
    entries[1] = bad
    store.set(KEY, _with_index(shard, entries, location))
    a = z3.open_array(store, "a")
    for sel in (Ellipsis, slice(4, 8), 5):
        with pytest.raises(CorruptionError, match=match) as info:
            a[sel]
        assert KEY in str(info.value)
    try:  # other chunks: refused as well (the entries checked up front) or read right (an entry
        # past the end is found when its chunk is fetched: the shard's size is not known before)
        assert a[8:16].tolist() == list(range(9, 17))
    except CorruptionError as e:
        assert KEY in str(e)


@pytest.mark.parametrize("location", ["start", "end"])
def test_overlapping_index_entries_read_the_shared_bytes(location):
    """Two entries pointing at the same bytes (the spec does not forbid it): both chunks read
    those bytes' values, nothing else is touched."""
    store, shard = _sharded(location)
    entries, _ = _index_of(shard, N_INNER, location)
    entries = entries.copy()
    entries[3] = entries[0]
    store.set(KEY, _with_index(shard, entries, location))
    assert z3.open_array(store, "a")[...].tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 2, 3, 4]
