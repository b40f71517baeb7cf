"""``zarr3 info``, ``tree``, ``check`` and ``migrate`` on corrupted stores: a clean exit code and
an ``error: ...`` line naming what is wrong, never a traceback.

A small v3 hierarchy (plain, sharded, nested-sharded and rectilinear arrays, a subgroup,
consolidated metadata) and a small v2 one (``.zmetadata``, structured and string arrays) are written to disk,
then one or two of their objects are damaged as ``test_fuzz_metadata`` damages documents
(reusing its mutations) or replaced by garbage, truncated or deleted. Every command runs
through click's ``CliRunner``: ``result.exception`` must be ``None`` or ``SystemExit``.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import zarr3_backend as z3
from tests.test_corruption import _memory_cap  # noqa: F401  (autouse: caps the address space)
from tests.test_fuzz_layout import _SETTINGS, _warm_pools, budget  # noqa: F401  (autouse fixture)
from tests.test_fuzz_metadata import _mutate, _text
from zarr3_backend.cli import main

#: The commands run on every damaged store (those that change it last).
COMMANDS = [
    ["info"],
    ["info", "--quick", "--json"],
    ["info", "--path", "a"],
    ["info", "--path", "g/b", "--json"],
    ["tree"],
    ["tree", "--json"],
    ["check"],
    ["check", "--json", "--path", "g"],
    ["migrate", "--dry-run"],
    ["check", "--repair"],
    ["migrate"],
]
SHARD = {
    "name": "sharding_indexed",
    "configuration": {
        "chunk_shape": [2, 2],
        "codecs": [{"name": "bytes"}, {"name": "crc32c"}],
        "index_codecs": [{"name": "bytes"}, {"name": "crc32c"}],
    },
}


def _files(store: z3.MemoryStore) -> dict[str, bytes]:
    return {k: bytes(store.get(k)) for k in store.list()}


def _v3_files() -> dict[str, bytes]:
    store = z3.MemoryStore()
    g = z3.open_group(store, mode="w", attributes={"title": "t"})
    a = g.create_array("a", shape=(4, 6), dtype="float32", chunks=(2, 3), dimension_names=("y", "x"))
    a[...] = np.arange(24, dtype="float32").reshape(4, 6)
    b = g.create_group("g").create_array("b", shape=(8, 4), dtype="int16", chunks=(2, 2), shards=(4, 4))
    b[...] = np.arange(32, dtype="int16").reshape(8, 4)
    c = z3.create_array(store, "g/c", shape=(8, 4), dtype="int16", chunks=(4, 4), codecs=[SHARD])
    c[...] = 7
    s = g.create_array("s", shape=(3,), dtype=str, chunks=(2,))
    s[...] = np.array(["x", "yy", ""], dtype=object)
    r = g.create_array("r", shape=(7, 3), dtype="int16", chunks=[[2, 5], 3])  # rectilinear
    r[...] = np.arange(21, dtype="int16").reshape(7, 3)
    z3.consolidate_metadata(store)
    return _files(store)


def _v2_files() -> dict[str, bytes]:
    store = z3.MemoryStore()
    g = z3.open_group(store, mode="w", zarr_format=2, attributes={"title": "t"})
    a = g.create_array("a", shape=(4, 6), dtype="<f8", chunks=(2, 3), fill_value=np.nan)
    a[...] = 1.5
    b = g.create_group("g").create_array("b", shape=(5,), dtype=[("x", "<i4"), ("y", "<f4")], chunks=(2,))
    b[...] = np.zeros(5, dtype=[("x", "<i4"), ("y", "<f4")])
    s = g.create_array("s", shape=(3,), dtype=str, chunks=(2,))
    s[...] = np.array(["x", "yy", ""], dtype=object)
    z3.consolidate_metadata(store)
    return _files(store)


BASES = {"v3": _v3_files(), "v2": _v2_files()}
DOCUMENTS = ("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata")


def _damage(files: dict[str, bytes], key: str, how: int, seed: int) -> None:
    """Damage ``files[key]`` in place: a mutated document, garbage, a truncation, a bit flip, or
    deletion."""
    rng = random.Random(seed)
    data = files[key]
    if how == 0 and key.endswith(DOCUMENTS):
        try:
            doc = json.loads(data)
        except ValueError:
            doc = None
        files[key] = _text(_mutate(doc, rng), rng).encode("utf-8", "surrogatepass")
    elif how == 1:
        files[key] = rng.randbytes(rng.randrange(0, 2 * len(data) + 8))
    elif how == 2:
        files[key] = data[: rng.randrange(len(data) + 1)]
    elif how == 3 and data:
        i = rng.randrange(len(data))
        files[key] = data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1 :]
    else:
        del files[key]


def _run(root: Path) -> list[tuple[list[str], Any]]:
    """Every command on the store at ``root``; each result's exception must be a clean exit."""
    runner = CliRunner()
    results = []
    for args in COMMANDS:
        result = runner.invoke(main, [args[0], str(root), *args[1:]])
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            f"zarr3 {' '.join(args)} raised {result.exception!r}:\n{result.output}"
        )
        if result.exit_code == 2:
            assert "error:" in result.output, f"zarr3 {' '.join(args)}: exit 2 without a message"
        results.append((args, result))
    return results


@settings(max_examples=budget(40), **_SETTINGS)
@given(
    base=st.sampled_from(sorted(BASES)),
    damage=st.lists(
        st.tuples(st.integers(0, 10**6), st.integers(0, 4), st.integers(0, 2**32)), min_size=1, max_size=2
    ),
)
def test_commands_on_damaged_stores(base, damage):
    """One or two damaged objects (documents picked twice as often as chunks)."""
    files = dict(BASES[base])
    for pick, how, seed in damage:
        docs = [k for k in sorted(files) if k.endswith(DOCUMENTS)]
        keys = docs * 2 + [k for k in sorted(files) if not k.endswith(DOCUMENTS)]
        if keys:
            _damage(files, keys[pick % len(keys)], how, seed)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "s.zarr"
        for key, data in files.items():
            (root / key).parent.mkdir(parents=True, exist_ok=True)
            (root / key).write_bytes(data)
        _run(root)


# --- targeted: each command names the damaged key --------------------------------------------------
def _write(tmp_path: Path, files: dict[str, bytes]) -> Path:
    root = tmp_path / "s.zarr"
    for key, data in files.items():
        os.makedirs((root / key).parent, exist_ok=True)
        (root / key).write_bytes(data)
    return root


@pytest.mark.parametrize(
    ("base", "key", "value"),
    [
        ("v3", "a/zarr.json", b"{not json"),
        ("v3", "g/b/zarr.json", b'{"zarr_format": 3, "node_type": "array"}'),
        ("v2", "a/.zarray", b'{"zarr_format": 2, "shape": [4, 6]}'),
        ("v2", "g/b/.zarray", b"[" * 100_000),
    ],
    ids=["v3-not-json", "v3-fields-missing", "v2-fields-missing", "v2-deep"],
)
def test_a_broken_document_is_named(tmp_path, base, key, value):
    """A broken metadata document: ``info``/``tree`` of it and ``check`` exit non-zero naming
    the node, never with a traceback (the consolidated copy is dropped so that the
    documents themselves are read; ``migrate`` of a v2 store too)."""
    files = {k: v for k, v in BASES[base].items() if not k.endswith(".zmetadata")}
    if base == "v3":
        root_doc = json.loads(files["zarr.json"])
        root_doc.pop("consolidated_metadata", None)
        files["zarr.json"] = json.dumps(root_doc).encode()
    files[key] = value
    root = _write(tmp_path, files)
    node = key.rpartition("/")[0]
    runner = CliRunner()
    commands = [["info", str(root), "--path", node], ["tree", str(root)], ["check", str(root)]]
    if base == "v2":  # a v3 store has nothing to migrate
        commands.append(["migrate", str(root), "--dry-run"])
    for args in commands:
        result = runner.invoke(main, args)
        assert isinstance(result.exception, SystemExit) and result.exit_code != 0, (args, result.output)
        assert node in result.output, (args, result.output)


@pytest.mark.parametrize("key", ["a/c/0/0", "g/b/c/1/0", "g/c/c/0/0"])
def test_a_damaged_chunk_or_shard_is_named_by_check(tmp_path, key):
    """``zarr3 check`` exits 1 naming a truncated chunk or shard; ``info`` measures it or names it."""
    files = dict(BASES["v3"])
    files[key] = files[key][:-3]
    root = _write(tmp_path, files)
    result = CliRunner().invoke(main, ["check", str(root)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert f"BAD      {key}:" in result.output
    result = CliRunner().invoke(main, ["info", str(root), "--path", key.split("/c/")[0]])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output


def test_info_names_a_shard_whose_index_lies(tmp_path):
    """``zarr3 info`` (which measures shards from their index) on a shard whose index entry
    points into the index itself, crc32c valid: exit 2 naming the shard (was: the error without
    the key, so nothing said which of the shards was bad)."""
    files = dict(BASES["v3"])
    key = "g/c/c/0/0"  # index [bytes, crc32c] at the end, 4 inner chunks
    shard = files[key]
    entries = np.frombuffer(shard[-68:-4], dtype="<u8").reshape(4, 2).copy()
    entries[2] = (len(shard) - 60, 16)
    raw = entries.astype("<u8").tobytes()
    files[key] = shard[:-68] + raw + crc32c.crc32c(raw).to_bytes(4, "little")
    root = _write(tmp_path, files)
    result = CliRunner().invoke(main, ["info", str(root), "--path", "g/c"])
    assert isinstance(result.exception, SystemExit) and result.exit_code == 2, result.output
    assert f"shard {key!r}" in result.output and "into the shard index" in result.output


def test_commands_on_healthy_rectilinear_arrays(tmp_path):
    """A healthy store with rectilinear arrays, plain and sharded: ``check`` finds nothing
    (it decoded every unit with the first unit's chain: a false "frame declares 30 bytes"),
    ``tree`` and ``info`` show the grid's edges (both ended in a ShapeError, exit 2)."""
    g = z3.open_group(tmp_path / "s.zarr", mode="w")
    r = g.create_array("r", shape=(7, 3), dtype="int16", chunks=[[2, 5], 3])
    r[...] = np.arange(21, dtype="int16").reshape(7, 3)
    rs = g.create_array("rs", shape=(6, 3), dtype="int16", chunks=(2, 3), shards=[[2, 4], 3])
    rs[...] = np.arange(18, dtype="int16").reshape(6, 3)
    root = str(tmp_path / "s.zarr")
    runner = CliRunner()
    result = runner.invoke(main, ["check", root])
    assert result.exit_code == 0, result.output
    assert "2 array(s), 4 stored unit(s) checked: ok" in result.output
    result = runner.invoke(main, ["tree", root])
    assert result.exit_code == 0, result.output
    assert "r (7, 3) int16 chunks=([2, 5], 3)" in result.output
    assert "rs (6, 3) int16 chunks=(2, 3) shards=([2, 4], 3)" in result.output
    result = runner.invoke(main, ["info", root, "--path", "rs"])
    assert result.exit_code == 0, result.output
    assert (
        "Shard shape          : ([2, 4], 3)" in result.output
        and "Shards present       : 2/2" in result.output
    )
    assert "Inner chunks present : 3/3" in result.output  # counted on rectilinear grids too
    # a damaged unit of the second (larger) shape is still found
    stored = (tmp_path / "s.zarr" / "r" / "c" / "1" / "0").read_bytes()
    (tmp_path / "s.zarr" / "r" / "c" / "1" / "0").write_bytes(stored[:-2])
    result = runner.invoke(main, ["check", root])
    assert result.exit_code == 1 and "BAD      r/c/1/0:" in result.output, result.output


@pytest.mark.parametrize("base", sorted(BASES))
def test_every_command_succeeds_on_the_undamaged_bases(tmp_path, base):
    """The fuzzer's starting points are healthy: every command exits 0 on them (so an exit 2
    on a damaged copy is the damage's doing, not a command that cannot handle the layout)."""
    root = _write(tmp_path, dict(BASES[base]))
    for args, result in _run(root):
        assert result.exit_code == 0, (args, result.output)
    assert not list(root.rglob(".zarray")), "migrate left v2 documents"
