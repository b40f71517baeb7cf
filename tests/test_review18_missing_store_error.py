"""review18: opening a store that does not exist raised ``GroupNotFoundError`` as a ``KeyError``
only; xarray's zarr engine raises ``FileNotFoundError`` there (and zarr-python's own
``NodeNotFoundError`` is one), so the usual ``except FileNotFoundError:`` (write the store
first, else append) let ours through. Still a ``KeyError`` and a ``Zarr3Error``."""

from __future__ import annotations

import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.errors import GroupNotFoundError, NodeNotFoundError


def test_open_dataset_of_a_missing_store_is_a_file_not_found_error(tmp_path):
    missing = str(tmp_path / "missing.zarr")
    with pytest.raises(FileNotFoundError):
        xr.open_dataset(missing, engine="zarr")  # the oracle
    with pytest.raises(FileNotFoundError) as e:
        xr.open_dataset(missing, engine="zarr3")
    assert isinstance(e.value, GroupNotFoundError) and isinstance(e.value, KeyError)


def test_a_missing_node_is_a_file_not_found_error_too(tmp_path):
    g = z3.open_group(str(tmp_path / "s.zarr"), mode="w")
    with pytest.raises(FileNotFoundError) as e:
        g["nope"]
    assert isinstance(e.value, NodeNotFoundError) and isinstance(e.value, KeyError)
    assert str(e.value).startswith("no array or group named 'nope'")
