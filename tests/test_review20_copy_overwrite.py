"""review20: ``zarr3 copy --overwrite`` erased destination arrays before it checked where the
other arrays would go; a copy refused part-way (exit 2, a typed error) had already deleted them.

A failed call writes nothing: every destination place is checked (the array ancestor, the
Zarr v2 group a v3 array would sit in) before the first old array is erased.
"""

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
    g = z3.open_group(src, mode="w")
    g.create_array("a", shape=(4,), dtype="i4", chunks=(2,))[:] = 1
    g.create_group("sub").create_array("x", shape=(4,), dtype="i4", chunks=(2,))[:] = 2
    return src


def test_refused_copy_into_a_v2_group_erases_nothing(tmp_path, source):
    """``sub`` is a Zarr v2 group in the destination: the v3 ``sub/x`` is refused (ZarrV2Error),
    and the old ``a`` and ``sub/x`` are still there."""
    dst = str(tmp_path / "dst.zarr")
    d = z3.open_group(dst, mode="w")
    d.create_array("a", shape=(4,), dtype="i4", chunks=(4,))[:] = 9
    sub = z3.open_group(dst + "/sub", mode="w", zarr_format=2)
    sub.create_array("x", shape=(4,), dtype="i4", chunks=(4,), zarr_format=2)[:] = 8
    before = files_under(dst)

    result = run("copy", source, dst, "--overwrite")
    assert result.exit_code == 2, result.output
    assert "ZarrV2Error" in result.stderr and "Traceback" not in result.stderr
    assert files_under(dst) == before  # was: a/ and sub/x/ erased
    np.testing.assert_array_equal(z3.open_array(dst, path="a")[:], 9)


def test_refused_copy_of_one_array_into_a_v2_group_erases_nothing(tmp_path, source):
    dst = str(tmp_path / "dst.zarr")
    sub = z3.open_group(dst, mode="w", zarr_format=2).create_group("sub")
    sub.create_array("x", shape=(4,), dtype="i4", chunks=(4,), zarr_format=2)[:] = 8
    before = files_under(dst)

    result = run("copy", source, dst, "--path", "sub/x", "--overwrite")
    assert result.exit_code == 2, result.output
    assert files_under(dst) == before  # was: sub/x/ erased, then the copy refused
    np.testing.assert_array_equal(z3.open_array(dst, path="sub/x")[:], 8)


def test_refused_copy_under_an_array_erases_nothing(tmp_path, source):
    """``sub`` is an array in the destination: ``sub/x`` cannot go below it (NodeExistsError),
    and the old ``a`` is still there."""
    dst = str(tmp_path / "dst.zarr")
    d = z3.open_group(dst, mode="w")
    d.create_array("a", shape=(4,), dtype="i4", chunks=(4,))[:] = 9
    d.create_array("sub", shape=(3,), dtype="u1", chunks=(3,))[:] = 7
    before = files_under(dst)

    result = run("copy", source, dst, "--overwrite")
    assert result.exit_code == 2, result.output
    assert "NodeExistsError" in result.stderr
    assert files_under(dst) == before  # was: a/ erased
