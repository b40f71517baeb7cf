"""review20: ``zarr3 check`` said "ok" (exit 0) on a store whose consolidated metadata no longer
matched its members' documents: readers of the consolidated copy (xarray's default, a read-only
``open_group``) saw the old shape and missed the appended values, the new arrays, or still
listed removed ones. A stale copy (v3 inline, v2 ``.zmetadata``, at the root or below) is now
named as BAD under its document's key."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

import zarr3_backend as z3
from zarr3_backend.cli import main


def run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def make(path: str, zarr_format: int) -> None:
    g = z3.open_group(path, mode="w", zarr_format=zarr_format, attributes={"title": "t"})
    kw = {} if zarr_format == 2 else {"shards": (4,)}
    g.create_array("a", shape=(8,), dtype="u1", chunks=(2,), fill_value=0, zarr_format=zarr_format, **kw)[
        :
    ] = np.arange(8)
    sub = g.create_group("sub", attributes={"level": 1})
    sub.create_array("s", shape=(), dtype="f8", zarr_format=zarr_format)[...] = 1.5
    sub.create_array("txt", shape=(3,), dtype="U3", chunks=(3,), zarr_format=zarr_format)[:] = [
        "a",
        "bb",
        "c",
    ]
    z3.consolidate_metadata(path)


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_a_fresh_consolidated_store_is_ok(tmp_path, zarr_format):
    path = str(tmp_path / "s.zarr")
    make(path, zarr_format)
    result = run("check", path)
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith(": ok")


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_a_member_resized_after_consolidation_is_reported(tmp_path, zarr_format):
    path = str(tmp_path / "s.zarr")
    make(path, zarr_format)
    if zarr_format == 3:
        a = z3.open_array(path, path="a", mode="r+")  # the array alone: the copy is not refreshed
        a.resize((12,))
        a[8:] = 9
    else:  # this package refreshes a v2 .zmetadata itself; zarr-python 2's resize does not
        zarray = os.path.join(path, "a", ".zarray")
        with open(zarray) as f:
            doc = json.load(f)
        with open(zarray, "w") as f:
            json.dump({**doc, "shape": [12]}, f)
    assert z3.open_group(path, mode="r")["a"].shape == (8,)  # what consolidated readers see
    result = run("check", path, "--json")
    assert result.exit_code == 1, result.output  # was 0, "ok": true
    doc = json.loads(result.stdout)
    key = "zarr.json" if zarr_format == 3 else ".zmetadata"
    assert [b["key"] for b in doc["bad"]] == [key]
    assert "'a'" in doc["bad"][0]["error"] and "stale consolidated" in doc["bad"][0]["error"]
    z3.consolidate_metadata(path)
    assert run("check", path).exit_code == 0


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_members_removed_or_added_after_consolidation_are_reported(tmp_path, zarr_format):
    path = str(tmp_path / "s.zarr")
    make(path, zarr_format)
    shutil.rmtree(os.path.join(path, "sub", "txt"))  # removed by hand: the copy still lists it
    z3.open_group(path, mode="r+", use_consolidated=False).create_array(
        "new", shape=(2,), dtype="i4", chunks=(2,), zarr_format=zarr_format
    )
    result = run("check", path)
    assert result.exit_code == 1, result.output  # was 0
    assert "'sub/txt' is in it but not stored" in result.output
    if zarr_format == 2:  # a v2 creation refreshes .zmetadata: only the removal is stale
        assert "'new'" not in result.output
