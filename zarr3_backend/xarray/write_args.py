"""The arguments of ``to_zarr``: the mode, the dataset and its variable names, checked before anything else."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import xarray as xr
from xarray.backends.common import NONE_VAR_NAME

from ..core.api import open_group
from ..core.group import Group, v2_ancestor
from ..core.paths import ancestor_paths, check_reserved_names
from ..errors import (
    ArgumentError,
    ArgumentTypeError,
    GroupNotFoundError,
    InvalidKeyError,
    NodeExistsError,
)
from ..stores.base import Store

WRITE_MODES = ("w", "w-", "a", "a-", "r+")


# ---- arguments ---------------------------------------------------------------------------------
def choose_mode(mode: str | None, append_dim: Hashable | None, region: Any) -> str:
    """The write mode xarray would use: ``a`` with ``append_dim``, ``r+`` with ``region``,
    else ``w-``; refuses combinations xarray refuses."""
    if mode is None:
        mode = "a" if append_dim is not None else "r+" if region is not None else "w-"
    if mode not in WRITE_MODES:
        raise ArgumentError(f"mode must be one of {WRITE_MODES}, got mode={mode!r}")
    if append_dim is not None and mode not in ("a", "a-"):
        raise ArgumentError(f"cannot set append_dim unless mode='a' or mode='a-', got mode={mode!r}")
    if region is not None and mode not in ("a", "a-", "r+"):
        raise ArgumentError(
            f"cannot set region unless mode='a', mode='a-', mode='r+' or mode=None, got mode={mode!r}"
        )
    return mode


def validate_names(ds: xr.Dataset) -> xr.Dataset:
    """Check variable names as xarray's writers do (a non-empty string, or ``None``, which is
    stored as xarray stores it, ``__values__``) and that each can name a Zarr array."""
    for name in ds.variables:
        if isinstance(name, str):
            if not name:
                raise ArgumentError(
                    f"Invalid name {name!r} for DataArray or Dataset key: string must be length 1 or "
                    "greater for serialization to Zarr"
                )
            if "/" in name or name in (".", ".."):
                raise ArgumentError(
                    f"variable name {name!r} cannot be a Zarr array name (no '/', '.' or '..')"
                )
            try:
                check_reserved_names(name)
            except InvalidKeyError as e:
                raise ArgumentError(f"variable name {name!r} cannot be a Zarr array name: {e}") from e
        elif name is not None:
            raise ArgumentTypeError(
                f"Invalid name {name!r} for DataArray or Dataset key: must be either a string or None "
                "for serialization to Zarr"
            )
    if None in ds.variables:
        ds = ds.rename({None: NONE_VAR_NAME})
    return ds


def as_dataset(obj: xr.Dataset | xr.DataArray) -> xr.Dataset:
    if isinstance(obj, xr.DataArray):
        return obj.to_dataset(name=obj.name if obj.name is not None else "__xarray_dataarray_variable__")
    if not isinstance(obj, xr.Dataset):
        raise ArgumentTypeError(f"to_zarr writes an xarray Dataset or DataArray, got {type(obj).__name__}")
    return obj


class UnknownVariableError(ArgumentError, KeyError):
    """An argument names a variable the dataset does not have (a ``KeyError`` as in xarray)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


def check_zarr_format(zarr_format: int | None) -> None:
    """Refuse any ``zarr_format`` but 2, 3 or None."""
    if isinstance(zarr_format, bool) or zarr_format not in (None, 2, 3):
        raise ArgumentError(f"zarr_format must be 2, 3 or None, got zarr_format={zarr_format!r}")


def choose_zarr_format(
    zarr_format: int | None, store: Store, path: str, mode: str, existing: Group | None
) -> int:
    """The format of the write: an existing group's (a different ``zarr_format`` is refused),
    else the one given; with neither, a new group inside a Zarr v2 hierarchy is v2, any other
    (and whatever mode="w" writes, as xarray's engine does) v3."""
    if existing is not None and not existing.implicit:
        if zarr_format is not None and zarr_format != existing.zarr_format:
            raise ArgumentError(
                f"zarr_format={zarr_format} was given, but group {path or '/'!r} in {store!r} is "
                f"Zarr v{existing.zarr_format} (mode={mode!r} adds to it; mode='w' replaces it)"
            )
        return existing.zarr_format
    if zarr_format is not None:
        return zarr_format
    if mode != "w" and v2_ancestor(store, ancestor_paths(path)) is not None:
        return 2
    return 3


def checked_encoding(
    encoding: Mapping[str, Mapping[str, Any]] | None, ds: xr.Dataset
) -> dict[str, Mapping[str, Any]]:
    """The ``encoding`` argument as a dict of dicts, refusing variables the dataset does not
    have (``UnknownVariableError``, a ``KeyError`` as in xarray) and entries that are no dicts."""
    encoding = dict(encoding or {})
    unknown = [k for k in encoding if k not in ds.variables]
    if unknown:
        raise UnknownVariableError(f"encoding given for variables {unknown} that are not in the dataset")
    for name, enc in encoding.items():
        if not isinstance(enc, Mapping):
            raise ArgumentError(
                f"encoding[{name!r}] must be castable to a dictionary of encoding keys, got {enc!r}"
            )
    return encoding


def open_existing(store: Store, path: str, mode: str) -> Group | None:
    """The group the write adds to, v3 or v2 (``None`` when there is none, or mode="w" replaces
    it); refuses what the mode forbids (``w-`` over a group, ``r+`` without one)."""
    if mode == "w":
        return None
    try:
        existing = open_group(store, path=path, mode="r+", use_consolidated=False)
    except GroupNotFoundError:
        if mode == "r+":
            raise
        return None
    if mode == "w-":
        raise NodeExistsError(f"a group already exists at {path or '/'!r} in {store!r} (mode='w-')")
    return existing
