"""review20: ``zarr3 copy`` reported units of an array with no elements (shape (0, 3) with
chunks (2, 2): no chunk at all) as "2 unit(s), 2 written" (v2 destination) or "2 empty": dask
makes empty blocks of it. Such an array has no unit; nothing is written and nothing counted."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

import zarr3_backend as z3
from zarr3_backend.cli import main


def run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize("zarr_format", ["3", "2"])
def test_an_empty_array_has_no_unit_to_copy(tmp_path, zarr_format):
    src, dst = str(tmp_path / "s.zarr"), str(tmp_path / "d.zarr")
    g = z3.open_group(src, mode="w")
    g.create_array("e", shape=(0, 3), dtype="f8", chunks=(2, 2))
    g.create_array("z", shape=(), dtype="i4")[...] = 4
    result = run("copy", src, dst, "--zarr-format", zarr_format, "--json")
    assert result.exit_code == 0, result.output
    got = {r["path"]: r for r in json.loads(result.stdout)}
    assert (got["e"]["units"], got["e"]["written"], got["e"]["empty"]) == (0, 0, 0)  # was 2 units
    assert (got["z"]["units"], got["z"]["written"]) == (1, 1)
    assert z3.open_array(dst, path="e").shape == (0, 3)
    docs = {"zarr.json", ".zarray", ".zattrs"}
    assert not set(os.listdir(os.path.join(dst, "e"))) - docs  # no chunk file
