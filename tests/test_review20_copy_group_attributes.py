"""review20: ``zarr3 copy`` kept whatever stood at a source group's path in the destination and
exited 0: the groups' attributes stayed the destination's old ones (a dataset's global "title",
"history", "Conventions" not copied, even with --overwrite), and a destination array where the
source has an (empty) group stayed an array. A group already there is now kept only when it is
the one this copy writes (a resumed copy: same attributes and format); other attributes are
refused (NodeExistsError) or, with --overwrite, replaced; another node is refused. All before
anything is written."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from sample_data import files_under

import zarr3_backend as z3
from zarr3_backend.cli import main


def run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def source(tmp_path) -> str:
    src = str(tmp_path / "src.zarr")
    g = z3.open_group(src, mode="w", attributes={"title": "new", "Conventions": "CF-1.8"})
    g.create_group("h", attributes={"level": 1}).create_array("a", shape=(2,), dtype="i4", chunks=(2,))[:] = 1
    return src


def old_destination(tmp_path) -> str:
    dst = str(tmp_path / "dst.zarr")
    d = z3.open_group(dst, mode="w", attributes={"title": "old"})
    d.create_group("h", attributes={"other": True})
    return dst


def test_group_attributes_are_copied_with_overwrite(tmp_path, source):
    dst = old_destination(tmp_path)
    result = run("copy", source, dst, "--overwrite")
    assert result.exit_code == 0, result.output
    g = z3.open_group(dst, mode="r")
    assert dict(g.attrs) == {"title": "new", "Conventions": "CF-1.8"}  # was {"title": "old"}
    assert dict(g["h"].attrs) == {"level": 1}  # was {"other": True}
    np.testing.assert_array_equal(g["h/a"][:], 1)


def test_other_group_attributes_are_refused_without_overwrite(tmp_path, source):
    dst = old_destination(tmp_path)
    before = files_under(dst)
    result = run("copy", source, dst)
    assert result.exit_code == 2, result.output  # was 0, the old attributes kept
    assert "NodeExistsError" in result.stderr and "--overwrite" in result.stderr
    assert files_under(dst) == before


def test_a_resumed_copy_keeps_its_own_groups(tmp_path, source):
    dst = str(tmp_path / "dst.zarr")
    assert run("copy", source, dst).exit_code == 0
    result = run("copy", source, dst)  # everything already there, as this copy writes it
    assert result.exit_code == 0, result.output
    assert "1 skipped" in result.output


def test_an_array_where_the_source_has_a_group_is_refused(tmp_path):
    src, dst = str(tmp_path / "src.zarr"), str(tmp_path / "dst.zarr")
    z3.open_group(src, mode="w").create_group("g", attributes={"k": 1})
    z3.open_group(dst, mode="w").create_array("g", shape=(3,), dtype="u1", chunks=(3,))[:] = 7
    before = files_under(dst)
    result = run("copy", src, dst, "--overwrite")
    assert result.exit_code == 2, result.output  # was 0, and no group g
    assert "NodeExistsError" in result.stderr
    assert files_under(dst) == before
