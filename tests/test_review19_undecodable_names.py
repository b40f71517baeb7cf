"""review19: since keys with no UTF-8 form are refused (validate_key, 2afb757), a local store
holding one stray file or directory whose name is not UTF-8 (another tool's file, named in
Latin-1: ``notes-été.txt``) could no longer be listed: an unconsolidated open, an append or a
``mode="a"``/``"w"`` write raised InvalidKeyError; worse, with the stray file inside an array's
directory, ``to_zarr(mode="w")`` failed *after* marking the nodes (its erase of the old keys
validates them), leaving the dataset unreadable (InterruptedWriteError) and ``repair`` failing
the same way for good. Such names are no keys: the store's listings skip them, as they skip
temporary files."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import xarray as xr

import zarr3_backend as z3

warnings.filterwarnings("ignore", category=FutureWarning)

DS = xr.Dataset({"a": ("x", np.arange(4.0))})


def _stray(path, *parts: bytes) -> None:
    """A file whose name is not UTF-8 (Latin-1 'été'), as another tool may leave."""
    target = os.path.join(os.fsencode(path), *parts)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "wb") as f:
        f.write(b"x")


@pytest.mark.parametrize("consolidated", [False, True])
def test_a_stray_file_at_the_root_is_no_member(tmp_path, consolidated):
    path = tmp_path / "s.zarr"
    z3.to_zarr(DS, path, mode="w", consolidated=consolidated)
    _stray(path, b"notes-\xe9t\xe9.txt")
    assert list(xr.open_dataset(path, engine="zarr3", consolidated=consolidated).data_vars) == ["a"]
    assert sorted(z3.open_group(path, mode="r").members()) == ["a"]
    z3.to_zarr(DS, path, append_dim="x")
    z3.to_zarr(xr.Dataset({"b": ("y", np.ones(2))}), path, mode="a")
    back = xr.open_dataset(path, engine="zarr3").load()
    np.testing.assert_array_equal(back["a"].values, np.tile(np.arange(4.0), 2))
    np.testing.assert_array_equal(back["b"].values, np.ones(2))


def test_mode_w_over_a_stray_file_in_an_array_directory_commits(tmp_path):
    path = tmp_path / "s.zarr"
    z3.to_zarr(DS, path, mode="w")
    _stray(path, b"a", b"c", b"junk-\xe9")
    z3.to_zarr(DS * 2, path, mode="w")
    np.testing.assert_array_equal(xr.open_dataset(path, engine="zarr3")["a"].values, np.arange(4.0) * 2)
    assert not (path / ".z3-txn").exists() or not [
        n for n in os.listdir(path / ".z3-txn") if n != "shape-claims"
    ]
