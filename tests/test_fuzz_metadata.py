"""A seeded metadata fuzzer: mutated Zarr v3 and v2 documents never escape the error hierarchy.

Valid array and group documents (every codec family, sharding, both chunk key encodings, fill
values of every data type; v2 ``.zarray``/``.zgroup``/``.zattrs``/``.zmetadata``) are mutated
(wrong types, huge/negative/float/bool numbers, deep nesting, unknown codecs and configurations,
NaN/Infinity, unicode, missing fields, truncated text). Each mutated document is stored beside
real chunk data, then parsed, opened, read from and written to. The only allowed outcomes are
success or a ``Zarr3Error``: anything else fails with the document printed.

The documents run in a child process under an address-space cap (``RLIMIT_AS``) and a
per-document watchdog (``faulthandler``), so an allocation driven by a bad document shows up as
a ``MemoryError`` (a failure) instead of taking the machine down, and a hang as a failure too.
"""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Address-space cap of the child process (numpy, dask and xarray imported, thread stacks).
MEMORY_CAP = 3 * 2**30
#: Seconds one document may take before the watchdog kills the child.
DOC_TIMEOUT = 20

# --- the seeds: valid documents ---------------------------------------------------------------
_DTYPES = {
    "bool": False,
    "int8": -1,
    "int16": 7,
    "int32": -100,
    "int64": 2**40,
    "uint8": 255,
    "uint16": 1,
    "uint32": 2**32 - 1,
    "uint64": 2**64 - 1,
    "float16": "NaN",
    "float32": "Infinity",
    "float64": -0.5,
    "complex64": [1.0, "NaN"],
    "complex128": ["-Infinity", 2.0],
    "string": "",
}

_BYTES_CODEC = {"name": "bytes", "configuration": {"endian": "little"}}
_COMPRESSORS = [
    [],
    [{"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4}}],
    [{"name": "zstd", "configuration": {"level": 1, "checksum": False}}],
    [{"name": "gzip", "configuration": {"level": 3}}],
    [{"name": "crc32c"}],
    [{"name": "zstd", "configuration": {"level": 1, "checksum": True}}, {"name": "crc32c"}],
]


def _array_doc(rng: random.Random) -> dict[str, Any]:
    """A valid v3 array document (2-d, shape (6, 4))."""
    dtype = rng.choice(list(_DTYPES))
    serializer = {"name": "vlen-utf8"} if dtype == "string" else dict(_BYTES_CODEC)
    codecs: list[Any] = []
    if rng.random() < 0.2:
        codecs.append({"name": "transpose", "configuration": {"order": [1, 0]}})
    codecs.append(serializer)
    codecs += copy.deepcopy(rng.choice(_COMPRESSORS))
    chunk_shape = [3, 2]
    if rng.random() < 0.35 and not codecs[0]["name"] == "transpose":
        codecs = [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": [1, 2],
                    "codecs": codecs,
                    "index_codecs": [_BYTES_CODEC, {"name": "crc32c"}]
                    if rng.random() < 0.7
                    else [_BYTES_CODEC],
                    "index_location": rng.choice(["start", "end"]),
                },
            }
        ]
    encoding = rng.choice(
        [
            {"name": "default", "configuration": {"separator": "/"}},
            {"name": "default", "configuration": {"separator": "."}},
            {"name": "v2", "configuration": {"separator": "."}},
        ]
    )
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [6, 4],
        "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk_shape}},
        "chunk_key_encoding": encoding,
        "fill_value": _DTYPES[dtype],
        "codecs": codecs,
        "attributes": {"units": "m", "scale": 0.5, "nested": {"a": [1, 2, {"b": None}]}},
        "dimension_names": ["y", "x"],
    }


def _group_doc(rng: random.Random, child: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = {"zarr_format": 3, "node_type": "group", "attributes": {"title": "t"}}
    if rng.random() < 0.5:
        doc["consolidated_metadata"] = {"kind": "inline", "must_understand": False, "metadata": {"a": child}}
    return doc


_V2_DTYPES = ["<i4", ">f8", "|u1", "|b1", "<c8", "|S4", "<U3", "|O", "<M8[s]", "|V2"]


def _zarray(rng: random.Random) -> dict[str, Any]:
    dtype = rng.choice(_V2_DTYPES)
    filters = [{"id": "vlen-utf8"}] if dtype == "|O" else None
    if filters is None and rng.random() < 0.2:
        filters = [{"id": "delta", "dtype": dtype}]
    return {
        "zarr_format": 2,
        "shape": [6, 4],
        "chunks": [3, 2],
        "dtype": dtype,
        "compressor": rng.choice([None, {"id": "zlib", "level": 1}, {"id": "blosc", "cname": "lz4"}]),
        "fill_value": rng.choice([0, None, "NaN", 1.5, "", "AAA="]),
        "order": rng.choice(["C", "F"]),
        "filters": filters,
        "dimension_separator": rng.choice([".", "/"]),
    }


# --- mutations --------------------------------------------------------------------------------
_DEEP = "__zarr3_fuzz_deep__"
_SCALARS: list[Any] = [
    0,
    1,
    -1,
    2,
    7,
    255,
    2**31,
    2**32,
    2**40,
    2**62,
    2**63,
    2**64,
    -(2**63),
    10**30,
    0.5,
    -0.0,
    1e308,
    float("nan"),
    float("inf"),
    float("-inf"),
    True,
    False,
    None,
    "",
    "x",
    "NaN",
    "Infinity",
    "0x7fc00000",
    "\u00e9\U0001f600",
    "\x00",
    "../../etc",
    "int32",
    "bytes",
    "sharding_indexed",
    "v2",
    "/",
    [],
    [0],
    [2**63],
    [[1, 2]],
    [-1, 2],
    [2**40, 2**40],
    {},
    {"name": "nope"},
    {"must_understand": False},
    _DEEP,
]
_CODECS: list[Any] = [
    "bytes",
    "crc32c",
    {"name": "unknown_codec"},
    {"name": "unknown_codec", "must_understand": False},
    {"name": "bytes", "configuration": {"endian": "middle"}},
    {
        "name": "blosc",
        "configuration": {"typesize": 2**40, "shuffle": "shuffle", "cname": "lz4", "clevel": 1},
    },
    {
        "name": "blosc",
        "configuration": {"blocksize": 2**62, "cname": "zstd", "clevel": 1, "shuffle": "noshuffle"},
    },
    {"name": "zstd", "configuration": {"level": 2**40, "checksum": False}},
    {"name": "gzip", "configuration": {"level": -1}},
    {"name": "transpose", "configuration": {"order": [0, 0]}},
    {"name": "transpose", "configuration": {"order": [1, 2**63]}},
    {"name": "sharding_indexed", "configuration": {"chunk_shape": [2**40, 1]}},
    {"name": "sharding_indexed", "configuration": {"chunk_shape": [1, 1], "index_codecs": ["bytes"]}},
    {"name": "numcodecs.zlib", "configuration": {"level": 1}},
    {"name": "numcodecs.delta", "configuration": {"dtype": "<i8"}},
    {"name": "numcodecs.nonexistent"},
    {"name": "vlen-utf8"},
    {"name": "vlen-bytes"},
]


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and indexes) into ``obj``."""
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


def _set(obj: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    parent = obj
    for p in path[:-1]:
        parent = parent[p]
    parent[path[-1]] = value
    return obj


_SIZES = [0, 1, 2, 3, 5, 2**31 - 1, 2**31, 2**32 + 1, 2**40, 2**53 + 1, 2**62, 2**63 - 1, 2**63, -1]
_FILLS: list[Any] = [
    0,
    1,
    -1,
    255,
    256,
    2**63,
    2**64,
    -(2**63) - 1,
    0.5,
    1e300,
    "NaN",
    "Infinity",
    "-Infinity",
    "nan",
    "0x7fc00000",
    "0x7ff8000000000000",
    "0x0",
    "0xZZ",
    [1.0, 2.0],
    [1.0],
    ["NaN", "NaN"],
    [0, 0, 0],
    "",
    "abc",
    "\u00e9",
    True,
    False,
    None,
    {},
    [],
]


def _targeted(doc: dict[str, Any], rng: random.Random) -> None:
    """One mutation of a v3 array document that keeps the rest of it valid (reaches deeper)."""
    grid = (
        doc.get("chunk_grid", {}).get("configuration", {}) if isinstance(doc.get("chunk_grid"), dict) else {}
    )
    codecs = doc.get("codecs") if isinstance(doc.get("codecs"), list) else []
    shard = next((c for c in codecs if isinstance(c, dict) and c.get("name") == "sharding_indexed"), None)
    choice = rng.randrange(9)
    if choice == 0 and isinstance(doc.get("shape"), list) and doc["shape"]:
        doc["shape"][rng.randrange(len(doc["shape"]))] = rng.choice(_SIZES)
    elif choice == 1 and isinstance(grid.get("chunk_shape"), list) and grid["chunk_shape"]:
        grid["chunk_shape"][rng.randrange(len(grid["chunk_shape"]))] = rng.choice(_SIZES)
    elif choice == 2 and shard is not None:
        inner = shard["configuration"]["chunk_shape"]
        inner[rng.randrange(len(inner))] = rng.choice(_SIZES)
    elif choice == 3:
        doc["fill_value"] = copy.deepcopy(rng.choice(_FILLS))
    elif choice == 4:
        doc["data_type"] = rng.choice(list(_DTYPES))  # the stored chunks now have the wrong size
    elif choice == 5:
        for c in codecs:
            if isinstance(c, dict) and isinstance(c.get("configuration"), dict) and c["configuration"]:
                key = rng.choice(list(c["configuration"]))
                c["configuration"][key] = copy.deepcopy(rng.choice(_SCALARS + _SIZES))
                break
    elif choice == 6:
        doc["chunk_key_encoding"] = copy.deepcopy(
            rng.choice(
                [
                    {"name": "default", "configuration": {"separator": rng.choice(["/", ".", "-", "", 1])}},
                    {"name": "v2", "configuration": {"separator": rng.choice(["/", ".", "\\"])}},
                    {"name": "v2"},
                    "default",
                    {"name": "default", "configuration": {"separator": "/", "x": 1}},
                ]
            )
        )
    elif choice == 7:
        doc["dimension_names"] = copy.deepcopy(rng.choice([["y"], ["y", 1], [None, None], "yx", ["a", "a"]]))
    elif shard is not None:
        config = shard["configuration"]
        config[rng.choice(["index_codecs", "codecs", "index_location"])] = copy.deepcopy(
            rng.choice([[], ["bytes"], [_BYTES_CODEC, {"name": "zstd"}], "middle", [{"name": "crc32c"}]])
        )


def _mutate(doc: Any, rng: random.Random) -> Any:
    doc = copy.deepcopy(doc)
    if isinstance(doc, dict) and doc.get("node_type") == "array" and rng.random() < 0.5:
        _targeted(doc, rng)
        return doc
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        paths = _paths(doc)
        path = rng.choice(paths[1:] if len(paths) > 1 else paths)
        r = rng.random()
        if r < 0.45:
            doc = _set(doc, path, copy.deepcopy(rng.choice(_SCALARS)))
        elif r < 0.6 and path:
            parent = doc
            for p in path[:-1]:
                parent = parent[p]
            del parent[path[-1]]
        elif r < 0.7 and isinstance(doc, dict):
            key = rng.choice(["extra", "zarr3_backend.write_in_progress", "consolidated_metadata", "shape"])
            doc[key] = copy.deepcopy(rng.choice(_SCALARS))
        elif r < 0.85 and isinstance(doc, dict) and isinstance(doc.get("codecs"), list):
            codecs = doc["codecs"]
            i = rng.randrange(len(codecs) + 1)
            codecs.insert(i, copy.deepcopy(rng.choice(_CODECS)))
            if rng.random() < 0.5 and len(codecs) > 1:
                del codecs[rng.randrange(len(codecs))]
        elif isinstance(doc, dict) and "data_type" in doc:
            doc["data_type"] = rng.choice([*_DTYPES, "r16", "int128", {"name": "x"}, "float8"])
            if rng.random() < 0.5:
                doc["fill_value"] = copy.deepcopy(rng.choice(list(_DTYPES.values()) + _SCALARS))
        else:
            doc = _set(doc, path, copy.deepcopy(rng.choice(_SCALARS)))
    return doc


#: Nesting depths of the deep-nesting mutation. v2 documents are parsed by ``core/group.py``
#: (``_parse_json``), which does not yet use ``metadata.load_json``: past the C scanner's own
#: recursion limit they still raise ``RecursionError`` there, so they get the depths it parses.
_DEPTHS_V3 = (20, 129, 2000, 100_000)
_DEPTHS_V2 = (20, 129, 500, 2000, 100000)


def _text(doc: Any, rng: random.Random, depths: tuple[int, ...] = _DEPTHS_V3) -> str:
    """``doc`` as JSON text (bare NaN tokens allowed), with deep nesting or truncation at times."""
    text = json.dumps(doc, allow_nan=True, ensure_ascii=rng.random() < 0.5)
    depth = rng.choice(depths)
    text = text.replace(json.dumps(_DEEP), "[" * depth + "]" * depth)
    r = rng.random()
    if r < 0.03:
        text = text[: rng.randrange(len(text) + 1)]
    elif r < 0.05:
        i = rng.randrange(len(text) + 1)
        text = text[:i] + rng.choice(["{", "]", '"', "\\", "\x00", "\ud800"]) + text[i:]
    return text


# --- the case list: (key -> document text) plus valid chunk bytes -------------------------------
def _v3_chunks(doc: dict[str, Any]) -> dict[str, bytes]:
    """Real chunks for the (valid) seed document, written by the package itself."""
    import zarr3_backend as z3

    store = z3.MemoryStore()
    store.set("zarr.json", json.dumps({"zarr_format": 3, "node_type": "group"}).encode())
    store.set("a/zarr.json", json.dumps(doc).encode())
    a = z3.open_array(store, "a", mode="r+")
    if a.dtype.kind in "OT":
        a[...] = np.array([[f"s{i}{j}" for j in range(4)] for i in range(6)], dtype=object)
    else:
        a[...] = np.arange(24).reshape(6, 4).astype(a.dtype)
    return {k: bytes(store.get(k)) for k in store.list() if not k.endswith("zarr.json")}


def _v2_chunks(zarray: dict[str, Any]) -> dict[str, bytes]:
    """Chunk bytes for a (valid) seed ``.zarray``, encoded with numcodecs."""
    out = {}
    dtype = np.dtype(zarray["dtype"])
    sep = zarray["dimension_separator"]
    for i in range(2):
        for j in range(2):
            if dtype.kind == "O":
                data = numcodecs.VLenUTF8().encode(np.array(["ab"] * 6, dtype=object))
            else:
                chunk = np.zeros((3, 2), dtype=dtype)
                if zarray["filters"]:
                    chunk = numcodecs.get_codec(zarray["filters"][0]).encode(chunk)
                data = np.asarray(chunk).tobytes(order=zarray["order"])
            if zarray["compressor"] is not None:
                data = numcodecs.get_codec(dict(zarray["compressor"])).encode(data)
            out[f"a/{i}{sep}{j}"] = bytes(data)
    return out


def make_cases(seed: int, n: int, v2: bool) -> list[dict[str, Any]]:
    """``n`` fuzz cases: ``{"files": {key: text or bytes-as-latin1}, "path": node, "xr": bool}``."""
    rng = random.Random(seed)
    cases = []
    seeds: dict[int, tuple] = {}
    while len(cases) < n:
        kind = rng.random()
        if v2 and kind < 0.4:
            zarray = _zarray(rng)
            try:
                chunks = _v2_chunks(zarray)
            except Exception:
                chunks = {}
            files = {k: v.decode("latin1") for k, v in chunks.items()}
            target = rng.random()
            zattrs = {"_ARRAY_DIMENSIONS": ["y", "x"], "units": "K"}
            docs = {"a/.zarray": zarray, "a/.zattrs": zattrs, ".zgroup": {"zarr_format": 2}}
            if rng.random() < 0.3:
                docs[".zmetadata"] = {
                    "zarr_consolidated_format": 1,
                    "metadata": {"a/.zarray": zarray, "a/.zattrs": zattrs, ".zgroup": {"zarr_format": 2}},
                }
            keys = list(docs)
            key = keys[0] if target < 0.6 else rng.choice(keys)
            docs[key] = _mutate(docs[key], rng)
            files.update({k: _text(d, rng, _DEPTHS_V2) for k, d in docs.items()})
            cases.append(
                {
                    "files": files,
                    "latin1": list(chunks),
                    "path": "a",
                    "xr": rng.random() < 0.1,
                    "local": rng.random() < 0.15,
                }
            )
            continue
        slot = rng.randrange(12)
        if slot not in seeds:
            doc = _array_doc(rng)
            seeds[slot] = (doc, _v3_chunks(doc))
        doc, chunks = seeds[slot]
        files = {k: v.decode("latin1") for k, v in chunks.items()}
        if kind < 0.85:
            files["a/zarr.json"] = _text(_mutate(doc, rng), rng)
            files["zarr.json"] = json.dumps(_group_doc(rng, doc))
        else:
            files["a/zarr.json"] = json.dumps(doc)
            files["zarr.json"] = _text(_mutate(_group_doc(rng, doc), rng), rng)
        cases.append(
            {
                "files": files,
                "latin1": list(chunks),
                "path": "a",
                "xr": rng.random() < 0.1,
                "local": rng.random() < 0.15,
            }
        )
    return cases


# --- the child process ------------------------------------------------------------------------
_CHILD = textwrap.dedent(
    """
    import faulthandler, json, resource, shutil, sys, traceback, warnings
    resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
    warnings.simplefilter("ignore")
    import numpy as np
    import zarr3_backend as z3
    from zarr3_backend.errors import Zarr3Error
    from tests.test_fuzz_metadata import make_cases

    def exercise(store, path, use_xr):
        try:
            group = z3.open_group(store, mode="r")
            group.members(max_depth=None)
            list(group.arrays())
            dict(group.attrs)
            group.tree()
        except Zarr3Error:
            pass
        try:
            z3.open_node(store, path=path)
            arr = z3.open_array(store, path=path, mode="r+")
        except Zarr3Error:
            return
        repr(arr), arr.nchunks, arr.chunks, arr.shards, arr.fill_value, dict(arr.attrs)
        sel = tuple(slice(0, 2) for _ in arr.shape)
        arr[sel]
        arr[...] if arr.size <= 10_000 and arr.nbytes <= 2**24 else None
        if arr.ndim:
            arr.oindex[tuple([0] for _ in arr.shape)]
        if arr.metadata.chunk_spec.nbytes <= 2**24:
            arr[tuple(0 for _ in arr.shape)] = arr[tuple(0 for _ in arr.shape)]
        if arr.size and arr.ndim:
            arr.vindex[tuple(np.array([0, s - 1]) for s in arr.shape)]
        arr.attrs["fuzz"] = 1
        if use_xr:
            import xarray as xr
            try:
                ds = xr.open_dataset(store, engine="zarr3", consolidated=None)
                ds.isel({{d: slice(0, 2) for d in ds.dims}}).load()
            finally:
                tree = xr.open_datatree(store, engine="zarr3")
                tree.isel({{d: slice(0, 2) for d in tree.dims}}).load()

    failures = []
    opened = 0
    cases = make_cases({seed}, {n}, {v2})
    for i, case in enumerate(cases):
        faulthandler.dump_traceback_later({timeout}, exit=True)
        print(json.dumps(case)[:4000], file=open({current!r}, "w"))
        if case["local"]:
            shutil.rmtree({local!r}, ignore_errors=True)
            store = z3.LocalStore({local!r})
        else:
            store = z3.MemoryStore()
        for k, v in case["files"].items():
            store.set(k, v.encode("latin1") if k in case["latin1"] else v.encode("utf-8", "surrogatepass"))
        for stage in ("open",):
            try:
                exercise(store, case["path"], case["xr"])
                opened += 1
            except Zarr3Error:
                pass
            except BaseException as e:
                failures.append({{"case": i, "error": repr(e)[:500], "trace": traceback.format_exc()[-3000:],
                                  "files": {{k: v[:2000] for k, v in case["files"].items() if k.endswith(("json", "zarray", "zattrs", "zgroup", "zmetadata"))}}}})
        faulthandler.cancel_dump_traceback_later()
    print(json.dumps({{"failures": failures, "completed": opened}}))
    """
)


def run_fuzz(tmp_path: Path, seed: int, n: int, v2: bool) -> None:
    current = tmp_path / "current_case.json"
    code = _CHILD.format(
        cap=MEMORY_CAP,
        seed=seed,
        n=n,
        v2=v2,
        timeout=DOC_TIMEOUT,
        current=str(current),
        local=str(tmp_path / "store"),
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600
    )
    if proc.returncode != 0:
        last = current.read_text() if current.exists() else "(none)"
        pytest.fail(
            f"fuzz child died (exit {proc.returncode}; a hang or a crash) on document:\n{last}\n"
            f"stderr:\n{proc.stderr[-6000:]}"
        )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    failures = result["failures"]
    # the fuzzer reaches past parsing: a fair share of documents open, read and write
    assert result["completed"] >= n // 10, result["completed"]
    if failures:
        kinds: dict[str, dict] = {}  # one example per distinct (error type, raising line)
        for f in failures:
            where = f["trace"].strip().splitlines()[-3:-1]
            kinds.setdefault(f"{f['error'][:60]} @ {where}", f)
        report = "\n\n".join(
            f"case {f['case']}: {f['error']}\n"
            + "\n".join(f"{k}: {v[:400]}" for k, v in f["files"].items())
            + f"\n{f['trace'][-1500:]}"
            for f in list(kinds.values())[:8]
        )
        pytest.fail(f"{len(failures)} documents ({len(kinds)} kinds) escaped the error hierarchy:\n{report}")


def test_fuzz_fast(tmp_path):
    """~1,000 mutated v3 and v2 documents: success or a Zarr3Error, nothing else."""
    run_fuzz(tmp_path, seed=1, n=1000, v2=True)


@pytest.mark.slow
def test_fuzz_slow(tmp_path):
    """12,000 more documents (v2 included), other seeds."""
    run_fuzz(tmp_path, seed=2, n=6000, v2=True)
    run_fuzz(tmp_path, seed=3, n=6000, v2=True)


def test_mutations_are_varied():
    """The generator really produces the promised kinds of damage (guards the fuzzer itself)."""
    cases = make_cases(5, 300, True)
    texts = [t for c in cases for k, t in c["files"].items() if k.endswith(("json", "zarray", "zmetadata"))]
    joined = "\n".join(texts)
    assert "[" * 129 in joined  # deep nesting
    assert "NaN" in joined and "Infinity" in joined
    assert str(2**63) in joined
    assert "unknown_codec" in joined
    assert any(k.endswith(".zarray") for c in cases for k in c["files"])
