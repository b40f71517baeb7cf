"""``region=``: resolve ``"auto"`` entries against the stored coordinates and check the rest."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from ..core.array import Array
from ..core.group import Group
from ..errors import (
    ArgumentError,
    ArgumentTypeError,
)
from .cf_encode import decode_stored
from .write_args import UnknownVariableError


class RegionLabelError(UnknownVariableError):
    """``region="auto"`` cannot place the dataset in the store: the store lacks the coordinate,
    or some of its values (a ``KeyError``, as xarray's engine raises)."""


def _auto_region(ds: xr.Dataset, region: dict, group: Group | None, arrays: Mapping[str, Array]) -> dict:
    out = {}
    for dim, sel in region.items():
        if sel != "auto":
            out[dim] = sel
            continue
        if dim not in ds.variables:
            out[dim] = slice(0, ds.sizes[dim])
            continue
        if group is None or dim not in arrays:
            raise RegionLabelError(
                f"region={{{dim!r}: 'auto'}} needs the coordinate {dim!r} in the store, but it has none"
            )
        stored = decode_stored(group, arrays, [dim])[dim]
        index = pd.Index(np.asarray(stored.values))
        if not index.is_unique:
            raise ArgumentError(
                f"region={{{dim!r}: 'auto'}}: the stored coordinate {dim!r} repeats values, so they "
                "name no single position; give the region as a slice"
            )
        idxs = index.get_indexer(np.asarray(ds[dim].values))
        if (idxs == -1).any():
            raise RegionLabelError(
                f"not all values of coordinate {dim!r} in the dataset were found in the store; a region "
                f"write cannot add coordinate values (use append_dim to grow {dim!r})"
            )
        if len(idxs) and (np.diff(idxs) != 1).any():
            raise ArgumentError(
                f"the values of coordinate {dim!r} map to non-contiguous positions in the store; a region "
                "write needs a contiguous block of the stored coordinate"
            )
        out[dim] = slice(int(idxs[0]), int(idxs[-1]) + 1) if len(idxs) else slice(0, 0)
    return out


def resolve_region(
    ds: xr.Dataset,
    region: Any,
    mode: str,
    append_dim: Hashable | None,
    group: Group | None,
    arrays: Mapping[str, Array],
) -> tuple[xr.Dataset, dict[str, slice]]:
    """Validate ``region`` (auto-detecting ``"auto"`` entries) and drop the indexes it cannot change."""
    if region == "auto":
        region = dict.fromkeys(ds.dims, "auto")
    if not isinstance(region, Mapping):
        raise ArgumentTypeError(
            f"region must be a dict of dimension -> slice or 'auto', got {type(region).__name__}"
        )
    region = dict(region)
    if any(v == "auto" for v in region.values()):
        if mode not in ("r+", "a"):
            raise ArgumentError(f"region='auto' needs mode='r+' or 'a', got mode={mode!r}")
        region = _auto_region(ds, region, group, arrays)
    for dim, sel in region.items():
        if dim not in ds.dims:
            raise ArgumentError(
                f"all keys in ``region`` are not in Dataset dimensions: {dim!r} is not one of {list(ds.dims)}"
            )
        if not isinstance(sel, slice):
            raise ArgumentTypeError(f"region values must be slice objects, got {sel!r} for dimension {dim!r}")
        if sel.step not in (None, 1):
            raise ArgumentError(f"step on all slices must be 1 or None, got {sel!r} for dimension {dim!r}")
    # index coordinates are dropped or checked below (a region write cannot change them)
    unmatched = [k for k, v in ds.variables.items() if not set(region) & set(v.dims) and k not in ds.indexes]
    if region and unmatched:
        raise ArgumentError(
            "all variables in the dataset to write must have at least one dimension in common with "
            f"the region's dimensions {list(region)}; these do not: {unmatched}. Drop them with "
            f".drop_vars({unmatched!r})"
        )
    if append_dim is not None and append_dim in region:
        raise ArgumentError(
            f"cannot list the same dimension in both ``append_dim`` and ``region``: {append_dim!r}"
        )
    # an index along a region dimension is the stored one's slice (a region write cannot change
    # it); one along another dimension labels all of it: the plan checks it equals the stored one
    # (xarray's engine refuses it; dropped unchecked, values in another order would be mislabelled);
    # one the store does not hold is dropped as before
    along = [k for k in ds.indexes if not region or set(region) & set(ds[k].dims) or k not in arrays]
    return ds.drop_vars(along), region
