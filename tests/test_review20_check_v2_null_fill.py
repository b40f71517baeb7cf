"""review20: ``zarr3 check`` said "ok" for a Zarr v2 array with ``fill_value: null`` that had lost
a chunk. Such an array has no fill value (this package stores every chunk of it, as
``write_empty_chunks`` is forced on), so a chunk that is not stored has no values at all: this
package reads zeros, zarr-python 2 uninitialised memory. ``check`` now names each such chunk."""

from __future__ import annotations

import json
import os

import numpy as np
from click.testing import CliRunner

import zarr3_backend as z3
from zarr3_backend.cli import main


def run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def make(path: str) -> None:
    g = z3.open_group(path, mode="w", zarr_format=2)
    a = g.create_array("a", shape=(6,), dtype="i4", chunks=(2,), fill_value=None, zarr_format=2)
    a[:] = np.arange(6)
    b = g.create_array("b", shape=(6,), dtype="i4", chunks=(2,), fill_value=0, zarr_format=2)
    b[:] = np.arange(6)  # chunk 0 holds a value other than 0: stored; all are
    z = g.create_array("z", shape=(), dtype="f8", fill_value=None, zarr_format=2)
    z[...] = 0.0


def test_a_whole_null_fill_array_is_ok(tmp_path):
    path = str(tmp_path / "v2.zarr")
    make(path)
    assert json.load(open(os.path.join(path, "a", ".zarray")))["fill_value"] is None
    result = run("check", path)
    assert result.exit_code == 0, result.output


def test_a_lost_chunk_of_a_null_fill_array_is_named(tmp_path):
    path = str(tmp_path / "v2.zarr")
    make(path)
    os.remove(os.path.join(path, "a", "1"))
    os.remove(os.path.join(path, "z", "0"))
    os.remove(os.path.join(path, "b", "1"))  # b has a fill value: a missing chunk reads as it
    result = run("check", path, "--json")
    assert result.exit_code == 1, result.output  # was 0
    bad = {b["key"]: b["error"] for b in json.loads(result.stdout)["bad"]}
    assert sorted(bad) == ["a/1", "z/0"]
    assert all(e.startswith("missing") for e in bad.values())
