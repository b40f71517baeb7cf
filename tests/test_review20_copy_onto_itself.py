"""review20: ``zarr3 copy SRC SRC --chunks ... --overwrite`` (rechunking "in place") erased each
source array before reading it, then copied nothing but fill values, and exited 0: the data was
gone. A copy whose overwrite would erase its own source is now refused before anything is
written (CopyArgumentError, exit 2)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from click.testing import CliRunner

import zarr3_backend as z3
from zarr3_backend.cli import main


def run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize("spelling", ["same", "file-url", "relative"])
def test_an_overwrite_of_the_source_itself_is_refused(tmp_path, monkeypatch, spelling):
    src = str(tmp_path / "s.zarr")
    g = z3.open_group(src, mode="w")
    g.create_array("a", shape=(8,), dtype="i4", chunks=(2,))[:] = np.arange(8) + 1
    g.create_group("sub").create_array("b", shape=(4,), dtype="f4", chunks=(2,))[:] = 5
    monkeypatch.chdir(tmp_path)
    dst = {"same": src, "file-url": "file://" + src, "relative": os.path.join(".", "s.zarr")}[spelling]

    result = run("copy", src, dst, "--chunks", "4", "--overwrite")
    assert result.exit_code == 2, result.output  # was 0, and every value gone
    assert "CopyArgumentError" in result.stderr and "the destination is the source" in result.stderr
    np.testing.assert_array_equal(z3.open_array(src, path="a")[:], np.arange(8) + 1)
    np.testing.assert_array_equal(z3.open_array(src, path="sub/b")[:], 5)


def test_a_copy_onto_itself_with_its_own_layout_still_checks_and_skips(tmp_path):
    src = str(tmp_path / "s.zarr")
    z3.open_group(src, mode="w").create_array("a", shape=(8,), dtype="i4", chunks=(2,))[:] = 3
    result = run("copy", src, src, "--overwrite")
    assert result.exit_code == 0, result.output
    assert "4 skipped" in result.output
    np.testing.assert_array_equal(z3.open_array(src, path="a")[:], 3)
