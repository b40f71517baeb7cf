"""``to_zarr``: write an xarray Dataset to Zarr v3 with the meaning of ``Dataset.to_zarr``.

Everything is validated before the first byte is written: names, modes, encodings, CF encoding
of every variable (appends reuse the stored units, calendar, dtype and packing, and refuse
values those cannot represent), dimension sizes, non-append coordinates, region bounds and the
ownership of every shard by exactly one writer (only the integer range of dask data waits for
its task, which checks it before writing its shard). Then the writes go in this order: data,
each array's ``zarr.json``, the group's attributes, consolidated metadata, so a reader never
sees metadata that points at data not yet there (``compute=False`` writes the metadata now and
returns a Delayed that writes the dask data).
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import numpy as np
import pandas as pd
import xarray as xr
from dask.delayed import Delayed, delayed
from dask.highlevelgraph import MaterializedLayer
from xarray import conventions
from xarray.backends.common import ensure_dtype_not_object
from xarray.coding import strings, variables
from xarray.core.variable import Variable

from ..core.api import array_metadata, consolidate_metadata, create_group, open_group, refuse_inside_v2
from ..core.array import Array
from ..core.codec_specs import coerce_codec
from ..core.group import Group
from ..core.metadata import GroupMetadata, to_bytes
from ..core.metadata_v2 import ARRAY_KEY, GROUP_KEY
from ..core.paths import join_path, metadata_key, node_name, normalize_path
from ..dask.alignment import check_deferred_edges, check_region_edges
from ..dask.progress import compute_with_progress
from ..dask.read import BlockReader, store_token
from ..dask.write import FusingDelayed, plan_chunks
from ..dask.write import store as dask_store
from ..errors import (
    ArgumentError,
    ArgumentTypeError,
    EncodedRangeError,
    GroupNotFoundError,
    MetadataError,
    NodeExistsError,
    Zarr3Error,
    ZarrV2Error,
)
from ..stores import make_store
from ..stores.base import Store
from .backend_array import Zarr3BackendArray
from .datastore import Zarr3DataStore
from .encoding import ZARR_ENCODING_KEYS, encode_attr_value, encode_fill_value_attr

WRITE_MODES = ("w", "w-", "a", "a-", "r+")
#: Encoding keys read back from a store that say nothing about how to write.
_SAFE_TO_DROP = frozenset({"source", "original_shape", "preferred_chunks", "cache_metadata"})
_VALID_ENCODING = ZARR_ENCODING_KEYS | {"codecs", "shard_index"}
_LAYOUT_KEYS = ("compressors", "filters", "serializer")


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
        raise ArgumentError(f"cannot set region unless mode='a', 'a-' or 'r+', got mode={mode!r}")
    return mode


def _validate_names(ds: xr.Dataset) -> None:
    for name in ds.variables:
        if not isinstance(name, str) or not name:
            raise ArgumentError(
                f"variable names must be non-empty strings to be stored in Zarr, got {name!r}"
            )
        if "/" in name or name in (".", ".."):
            raise ArgumentError(f"variable name {name!r} cannot be a Zarr array name (no '/', '.' or '..')")


def _as_dataset(obj: xr.Dataset | xr.DataArray) -> xr.Dataset:
    if isinstance(obj, xr.DataArray):
        return obj.to_dataset(name=obj.name if obj.name is not None else "__xarray_dataarray_variable__")
    if not isinstance(obj, xr.Dataset):
        raise ArgumentTypeError(f"to_zarr writes an xarray Dataset or DataArray, got {type(obj).__name__}")
    return obj


def _array_dims(a: Array) -> tuple[str, ...]:
    names = a.dimension_names or ()
    if len(names) != a.ndim or any(n is None for n in names):
        attr = a.metadata.attributes.get("_ARRAY_DIMENSIONS")
        if isinstance(attr, list) and len(attr) == a.ndim:
            return tuple(attr)
        raise ArgumentError(f"array {a.path!r} has no dimension names; cannot match it to dataset dimensions")
    return tuple(names)  # type: ignore[arg-type]


# ---- reading what is stored ----------------------------------------------------------------
def _decoded_existing(group: Group, arrays: Mapping[str, Array], names: list[str]) -> dict[str, Variable]:
    """Stored variables, CF-decoded lazily: their ``encoding`` is how new data must be encoded."""
    if not names:
        return {}
    datastore = Zarr3DataStore(group, members={n: arrays[n] for n in names})
    raw = {n: datastore.open_store_variable(n, arrays[n]) for n in names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        decoded, _, _ = conventions.decode_cf_variables(raw, {}, decode_coords=False)
    return dict(decoded)


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
            raise KeyError(
                f"region={{{dim!r}: 'auto'}} needs the coordinate {dim!r} in the store, but it has none"
            )
        stored = _decoded_existing(group, arrays, [dim])[dim]
        index = pd.Index(np.asarray(stored.values))
        idxs = index.get_indexer(np.asarray(ds[dim].values))
        if (idxs == -1).any():
            raise KeyError(
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


def _resolve_region(
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
            raise ArgumentError(f"region dimension {dim!r} is not a dimension of the dataset {list(ds.dims)}")
        if not isinstance(sel, slice):
            raise ArgumentTypeError(f"region values must be slices, got {sel!r} for dimension {dim!r}")
        if sel.step not in (None, 1):
            raise ArgumentError(f"region slices must have step 1, got {sel!r} for dimension {dim!r}")
    # index coordinates are dropped below anyway (a region write cannot change them)
    unmatched = [k for k, v in ds.variables.items() if not set(region) & set(v.dims) and k not in ds.indexes]
    if region and unmatched:
        raise ArgumentError(
            f"with region={list(region)}, every variable must use one of those dimensions; these do not: "
            f"{unmatched}. Drop them with .drop_vars({unmatched!r})"
        )
    if append_dim is not None and append_dim in region:
        raise ArgumentError(f"dimension {append_dim!r} cannot be both append_dim and a region dimension")
    return ds.drop_vars(list(ds.indexes)), region


# ---- per-variable encoding ---------------------------------------------------------------------
def _dtype_for_store(dtype: np.dtype) -> Any:
    """The data type to create: text (fixed, object or StringDType) is stored as zarr-python
    writes Python strings, ``string`` with the ``vlen-utf8`` codec."""
    if dtype.kind in "UT":
        return "string"
    if dtype.kind == "O":
        return "string"
    return dtype


def _as_tuple(value: Any, ndim: int, key: str, name: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, int | np.integer):
        return (int(value),) * ndim
    try:
        out = tuple(int(v) for v in value)
    except TypeError as e:
        raise ArgumentTypeError(
            f"encoding[{key!r}] for variable {name!r} must be an int or a tuple of ints, got {value!r}"
        ) from e
    return out


def _default_chunks(var: Variable, shards: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """The chunk shape dask chunks suggest (the largest block per axis), else ``None``.

    With ``shards``, each size is capped by the shard and lowered to a divisor of it, so that
    the inner chunks tile the shard.
    """
    if var.chunks is None:
        return None
    sizes = tuple(max(max(c), 1) for c in var.chunks)
    if shards is None or len(shards) != len(sizes) or any(n < 1 for n in shards):
        return sizes
    return tuple(_largest_divisor_at_most(n, c) for n, c in zip(shards, sizes, strict=True))


def _largest_divisor_at_most(n: int, cap: int) -> int:
    """The largest divisor of ``n`` that is at most ``cap`` (at least 1)."""
    for d in range(min(n, cap), 0, -1):
        if n % d == 0:
            return d
    return 1


def _layout_origin(var: Variable, kwargs: Mapping[str, Any], user_encoding: bool) -> str:
    """Where the chunk and shard shapes of a new array came from, for error messages."""
    where = "encoding" if user_encoding else "the variable's encoding"
    chunks_given = var.encoding.get("chunks") is not None
    parts = []
    if kwargs.get("chunks") is not None:
        if chunks_given:
            origin = f"from {where}['chunks']"
        elif kwargs.get("shards") is not None and var.chunks is not None:
            origin = "from the dask chunks, capped by and dividing the shards"
        elif var.chunks is not None:
            origin = "from the dask chunks (largest block per axis)"
        else:
            origin = "chosen by default"
        parts.append(f"chunks {tuple(kwargs['chunks'])} {origin}")
    if kwargs.get("shards") is not None:
        parts.append(f"shards {tuple(kwargs['shards'])} from {where}['shards']")
    return f" [{'; '.join(parts)}]" if parts else ""


_TEXT_SERIALIZERS = frozenset({"vlen-utf8", "vlen-bytes"})


def _codec_name(codec: Any) -> str | None:
    """The name of a codec given as JSON, ``{"name": ...}`` or a codec object."""
    if isinstance(codec, str):
        return codec
    if isinstance(codec, Mapping):
        return codec.get("name")
    return getattr(codec, "name", None)


def _codec_list(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [coerce_codec(c) for c in value]
    return [coerce_codec(value)]


def creation_kwargs(
    var: Variable, name: str, *, user_encoding: bool, write_empty_chunks: bool | None
) -> dict[str, Any]:
    """Keyword arguments of ``array_metadata`` for a CF-encoded variable and its zarr encoding.

    Raises ``ValueError`` for unknown keys in an encoding the user passed (unknown keys left
    from reading a store are dropped, as xarray does).
    """
    encoding = {k: v for k, v in var.encoding.items() if k not in _SAFE_TO_DROP}
    invalid = sorted(set(encoding) - _VALID_ENCODING)
    if invalid and user_encoding:
        raise ArgumentError(f"unexpected encoding parameters for variable {name!r}: {invalid}")
    for k in invalid:
        del encoding[k]
    if "_FillValue" in var.encoding and var.encoding["_FillValue"] is not None:
        raise ArgumentError(f"variable {name!r}: Zarr does not take _FillValue in encoding")
    ndim = var.ndim
    chunks = _as_tuple(encoding.get("chunks"), ndim, "chunks", name)
    if chunks is not None and len(chunks) != ndim:
        chunks = None  # xarray's rule: a chunk spec of the wrong rank is ignored
    shards = _as_tuple(encoding.get("shards"), ndim, "shards", name)
    if chunks is None:
        chunks = _default_chunks(var, shards if encoding.get("codecs") is None else None)
    kwargs: dict[str, Any] = {"shape": var.shape, "dtype": _dtype_for_store(var.dtype)}
    codecs = encoding.get("codecs")
    if codecs is not None:
        if user_encoding:
            given = [k for k in _LAYOUT_KEYS if k in encoding]
            if given:
                raise ArgumentError(f"variable {name!r}: give either encoding['codecs'] or {given}, not both")
        elif any(encoding.get(k) is not None for k in _LAYOUT_KEYS):
            codecs = None  # read back from a store: the split form carries the layout
    if codecs is not None:
        kwargs["codecs"] = _codec_list(codecs)
        grid = shards if shards is not None else chunks
        kwargs["chunks"] = grid
    else:
        kwargs["chunks"] = chunks
        kwargs["shards"] = shards
        if shards is not None and encoding.get("shard_index") is not None:
            kwargs["shard_index"] = dict(encoding["shard_index"])
        if "compressors" in encoding:
            kwargs["compressors"] = _codec_list(encoding["compressors"])
        if "filters" in encoding:
            kwargs["filters"] = _codec_list(encoding["filters"])
        serializer = encoding.get("serializer")
        if serializer is not None and not (
            # text is stored as variable-length strings: a fixed-width source's ``bytes``
            # serializer read back from a store does not apply (one the user gave still fails)
            kwargs["dtype"] == "string"
            and not user_encoding
            and _codec_name(serializer) not in _TEXT_SERIALIZERS
        ):
            kwargs["serializer"] = coerce_codec(serializer)
    if encoding.get("chunk_key_encoding") is not None:
        kwargs["chunk_key_encoding"] = encoding["chunk_key_encoding"]
    fill = encoding.get("fill_value")
    if fill is None and var.dtype.kind == "f":
        fill = np.nan  # xarray's default for floats: unwritten cells read as NaN
    kwargs["fill_value"] = fill
    enc_empty = encoding.get("write_empty_chunks")
    if write_empty_chunks is not None and enc_empty is not None and bool(enc_empty) != write_empty_chunks:
        raise ArgumentError(
            f"variable {name!r}: encoding['write_empty_chunks']={enc_empty!r} differs from write_empty_chunks={write_empty_chunks!r}"
        )
    kwargs["write_empty_chunks"] = bool(
        write_empty_chunks if write_empty_chunks is not None else enc_empty or False
    )
    return kwargs


def stored_attributes(var: Variable) -> dict[str, Any]:
    """JSON-ready attributes; a CF ``_FillValue`` in the form xarray's zarr engine writes."""
    attrs = {k: encode_attr_value(v) for k, v in var.attrs.items()}
    if "_FillValue" in attrs:
        fv = var.attrs["_FillValue"]
        if fv is None:
            del attrs["_FillValue"]
        else:
            attrs["_FillValue"] = encode_fill_value_attr(fv, var.dtype)
    return attrs


def _range_context(attrs: Mapping[str, Any]) -> str:
    given = [f"{k}={attrs[k]!r}" for k in ("units", "scale_factor", "add_offset") if k in attrs]
    return f" (encoded with {', '.join(given)})" if given else ""


def check_integer_range(values: Any, dtype: Any, label: str, context: str = "") -> None:
    """Raise ``EncodedRangeError`` unless every value, rounded as xarray rounds before its cast,
    fits the integer ``dtype``; NaN or infinity (no ``_FillValue`` took their place) never do."""
    dt = np.dtype(dtype)
    v = np.asarray(values)
    if v.size == 0 or dt.kind not in "iu":
        return
    info = np.iinfo(dt)
    nonfinite = 0
    if v.dtype.kind == "f":
        finite = np.isfinite(v)
        nonfinite = int(v.size - np.count_nonzero(finite))
        r = np.round(v[finite]) if nonfinite else np.round(v)
        ok = r.size == 0 or (r.min() >= float(info.min) and r.max() < float(info.max) + 1)
        low, high = (r.min(), r.max()) if r.size else (None, None)
    else:
        low, high = int(v.min()), int(v.max())
        ok = info.min <= low and high <= info.max
    if ok and not nonfinite:
        return
    problems = []
    if not ok:
        problems.append(f"encoded values range from {low} to {high}")
    if nonfinite:
        problems.append(f"{nonfinite} values are NaN or infinite and no _FillValue replaces them")
    raise EncodedRangeError(
        f"variable {label!r}: {' and '.join(problems)}{context}, but the data type is {dt} "
        f"(from {info.min} to {info.max}); casting would wrap them around. Choose a wider dtype, "
        "scale_factor/add_offset or units that cover the data (an append must use the store's)."
    )


def _check_block(block: np.ndarray, target: str, label: str, context: str) -> np.ndarray:
    """A dask block passed through unchanged once its values fit ``target`` (runs in the task)."""
    check_integer_range(block, target, label, context)
    return block


class _RangeCheckedCast(variables.NonStringCoder):
    """xarray's final cast to ``encoding['dtype']``, refusing values an integer type cannot hold
    instead of letting them wrap: eagerly for numpy data, inside each dask task otherwise."""

    def encode(self, variable: Variable, name: Hashable = None) -> Variable:
        target = variable.encoding.get("dtype")
        if target is None or target in ("S1", str):
            return super().encode(variable, name)
        dt = np.dtype(target)
        if dt.kind in "iu" and variable.dtype.kind in "iuf" and dt != variable.dtype:
            label, context = str(name), _range_context(variable.attrs)
            data = variable.data
            if isinstance(data, da.Array):
                checked = data.map_blocks(
                    _check_block, dtype=data.dtype, target=dt.str, label=label, context=context
                )
                variable = variable.copy(deep=False, data=checked)
            else:
                check_integer_range(data, dt, label, context)
        return super().encode(variable, name)


_CODERS = tuple(
    _RangeCheckedCast() if isinstance(c, variables.NonStringCoder) else c for c in conventions.ZARR_CODERS
)


def _encode(var: Variable, name: str) -> Variable:
    """CF-encode as xarray's zarr engine does for Zarr v3, with a range-checked integer cast."""
    try:
        out = conventions.encode_cf_variable(var, name=name, coders=_CODERS)
        out = ensure_dtype_not_object(out, name=name)
        if out.dtype.kind == "T":  # numpy's StringDType is stored as it is
            return out
        out = strings.EncodedStringCoder(allows_unicode=True).encode(out, name=name)
        return strings.ensure_fixed_length_bytes(out)
    except EncodedRangeError:
        raise
    except (ValueError, TypeError) as e:
        raise type(e)(f"variable {name!r}: {e}") from e


def _encode_like_stored(var: Variable, stored: Variable, name: str) -> Variable:
    """Encode new data exactly as ``stored`` is encoded; refuse values it cannot represent."""
    _check_append_dtype(name, stored, var)
    var = var.copy(deep=False)
    if var.dtype.kind in "mMO" and isinstance(var.data, da.Array):
        var = var.load()  # times are small: encode them now so errors come before any write
    var.encoding = {
        k: v for k, v in stored.encoding.items() if k not in ("chunks", "shards", "preferred_chunks")
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        encoded = _encode(var, name)
    for key in ("units", "calendar"):
        want = stored.encoding.get(key)
        got = encoded.attrs.get(key)
        if want is not None and got is not None and not _same_cf_setting(key, want, got):
            raise ArgumentError(
                f"variable {name!r}: the new values cannot be encoded with the stored {key} {want!r} "
                f"(they need {got!r}), so they cannot be written to this store; "
                + "; ".join(str(w.message) for w in caught)
            )
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return encoded


def _same_cf_setting(key: str, a: Any, b: Any) -> bool:
    """Whether two ``units`` (``"<unit> since <date>"``) or ``calendar`` strings mean the same."""
    a, b = str(a).strip(), str(b).strip()
    if a == b:
        return True
    if key == "calendar":
        aliases = {"standard": "gregorian", "proleptic_gregorian": "proleptic_gregorian"}
        return aliases.get(a.lower(), a.lower()) == aliases.get(b.lower(), b.lower())
    ua, _, ra = a.partition(" since ")
    ub, _, rb = b.partition(" since ")
    if ua.strip().lower() != ub.strip().lower() or not ra or not rb:
        return False
    try:
        return pd.Timestamp(ra) == pd.Timestamp(rb)
    except (ValueError, TypeError, OverflowError):
        return ra.replace(" 00:00:00", "").strip() == rb.replace(" 00:00:00", "").strip()


def _check_append_dtype(name: str, stored: Variable, new: Variable) -> None:
    easy = (
        np.issubdtype(new.dtype, np.number)
        or np.issubdtype(new.dtype, np.datetime64)
        or np.issubdtype(new.dtype, np.bool_)
        or new.dtype == object
        or (new.dtype.kind in "SUT" and stored.dtype.kind in "OT")
    )
    if not easy and new.dtype != stored.dtype:
        raise ArgumentError(
            f"variable {name!r}: the store holds dtype {stored.dtype} but the data to write has dtype {new.dtype}"
        )


def _match_dims(
    name: str,
    var: Variable,
    stored_dims: tuple[str, ...],
    stored_shape: tuple[int, ...],
    region: Mapping[str, slice],
    append_dim: Hashable | None,
) -> Variable:
    if var.dims != stored_dims:
        if set(var.dims) != set(stored_dims):
            raise ArgumentError(
                f"variable {name!r} is stored with dimensions {stored_dims} but the dataset has {var.dims}; "
                "to_zarr cannot change a variable's dimensions"
            )
        var = var.transpose(*stored_dims)
    want, got = {}, {}
    for dim, n, m in zip(stored_dims, stored_shape, var.shape, strict=True):
        if dim == append_dim:
            continue
        if dim in region:
            start, stop, _ = region[dim].indices(n)
            n = stop - start
        want[dim], got[dim] = n, m
    if want != got:
        raise ArgumentError(
            f"variable {name!r} is stored with dimension sizes {want} but the dataset has {got}; only "
            "append_dim may change a size (use region= to write part of a stored variable)"
        )
    return var


# ---- the plan ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Write:
    """One variable's write: encoded data, target array (metadata maybe not yet stored), region."""

    name: str
    variable: Variable
    target: Array
    region: tuple[slice, ...]
    metadata_pending: bool  # zarr.json (new array, or new shape) is written after the data


@dataclass
class _Plan:
    writes: list[_Write] = field(default_factory=list)
    attrs: dict[str, Any] | None = None  # group attributes to store (None: leave them)


def _region_tuple(dims: tuple[str, ...], region: Mapping[str, slice]) -> tuple[slice, ...]:
    return tuple(region.get(d, slice(None)) for d in dims)


def _concrete(region: tuple[slice, ...], shape: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(*s.indices(n)[:2]) for s, n in zip(region, shape, strict=True))


def _plan(
    ds: xr.Dataset,
    *,
    store: Store,
    path: str,
    mode: str,
    group: Group | None,
    arrays: dict[str, Array],
    encoding: Mapping[str, Any],
    append_dim: Hashable | None,
    region: dict[str, slice],
    safe_chunks: bool,
    align_chunks: bool,
    write_empty_chunks: bool | None,
    compute: bool = True,
) -> _Plan:
    variables, attrs = conventions.encode_dataset_coordinates(ds)
    for k, enc in encoding.items():
        variables[k].encoding = dict(enc)
    existing_names = [n for n in variables if n in arrays] if mode != "w" else []
    new_names = [n for n in variables if n not in existing_names]

    if mode == "r+" and new_names:
        raise ArgumentError(
            f"the dataset has variables {new_names} that the store does not; mode='r+' only writes "
            "existing variables (use mode='a' to add variables)"
        )
    if region and new_names:
        raise ArgumentError(f"a region write needs every variable in the store already; missing: {new_names}")
    if mode in ("a", "a-", "r+"):
        clash = sorted(set(encoding) & set(existing_names))
        if clash:
            raise ArgumentError(
                f"variables {clash} already exist in the store, but encoding was provided for them"
            )
    if append_dim is not None:
        stored_dims = {d for a in arrays.values() for d in (a.dimension_names or ())}
        if append_dim not in stored_dims:
            raise ArgumentError(
                f"append_dim={append_dim!r} is not a dimension of the stored dataset {sorted(stored_dims)}"
            )
        left_out = [
            n for n, a in arrays.items() if append_dim in (a.dimension_names or ()) and n not in variables
        ]
        if left_out:
            raise ArgumentError(
                f"stored variables {left_out} have dimension {append_dim!r} but are missing from the dataset to "
                "append; appending without them would leave them shorter than the rest"
            )
        growing_new = [n for n in new_names if append_dim in variables[n].dims]
        if growing_new:
            raise ArgumentError(
                f"variables {growing_new} are not in the store but have the append dimension {append_dim!r}: "
                f"appended, they would hold only the new {append_dim!r} steps while the stored variables hold "
                f"them all, and the store could no longer be opened. Write them over the whole {append_dim!r} "
                "first (mode='a' without append_dim), or drop them from this append"
            )

    stored = _decoded_existing(group, arrays, existing_names) if group is not None else {}
    plan = _Plan(attrs={k: encode_attr_value(v) for k, v in attrs.items()} if mode != "r+" else None)
    if plan.attrs is not None:
        try:  # written last, so checked first: a bad attribute must not strand written data
            to_bytes(GroupMetadata(attributes=plan.attrs))
        except (Zarr3Error, TypeError, ValueError) as e:
            raise MetadataError(f"dataset attributes cannot be stored in zarr.json: {e}") from e
    for name, var in variables.items():
        if name in existing_names:
            write = _plan_existing(
                name,
                var,
                arrays[name],
                stored[name],
                ds=ds,
                store=store,
                mode=mode,
                append_dim=append_dim,
                region=region,
                write_empty_chunks=write_empty_chunks,
            )
        else:
            write = _plan_new(
                name,
                var,
                store=store,
                path=path,
                user_encoding=name in encoding,
                write_empty_chunks=write_empty_chunks,
            )
        if write is None:
            continue
        _check_ownership(
            write,
            region=region,
            compute=compute,
            safe_chunks=safe_chunks,
            align_chunks=align_chunks,
            unit_source=_unit_source(write, encoding.get(name, {}), new=name not in existing_names),
        )
        plan.writes.append(write)
    return plan


def _unit_source(write: _Write, user_encoding: Mapping[str, Any], *, new: bool) -> str:
    """Where a target's shard (or chunk) shape came from, for error messages."""
    if not new:
        return f"as stored in {metadata_key(write.target.path)!r}"
    enc = user_encoding or write.variable.encoding
    where = f"encoding[{write.name!r}]" if user_encoding else "the variable's encoding"
    full_chain = enc.get("codecs") is not None
    key = "shards" if write.target.shards is not None and not full_chain else "chunks"
    if enc.get(key) is not None:
        return f"from {where}[{key!r}]"
    if key == "chunks" and write.variable.chunks is not None:
        return "from the dask chunks (largest block per axis)"
    return "chosen by default"


def _check_ownership(
    write: _Write,
    *,
    region: Mapping[str, slice],
    compute: bool,
    safe_chunks: bool,
    align_chunks: bool,
    unit_source: str,
) -> None:
    """Prove, before anything is written, that this write owns every shard it touches.

    Dask chunks must not split a shard; a region (numpy or dask data, any mode) must not cut a
    shard a neighbouring writer owns; a deferred (``compute=False``) dask write must not share
    a shard with data outside it, which another pending write could rewrite at the same time.
    """
    target, dims = write.target, write.variable.dims
    sharded = target.shards is not None
    lazy = isinstance(write.variable.data, da.Array)
    if lazy:
        plan_chunks(
            write.variable.data,
            target,
            write.region,
            align_chunks=align_chunks,
            name=write.name,
            dims=dims,
            unit_source=unit_source,
        )
    if not safe_chunks:
        return
    if region:
        own = tuple(
            sl if d in region else slice(0, n)
            for sl, d, n in zip(write.region, dims, target.shape, strict=True)
        )
        check_region_edges(
            own, target.shape, target.storage_chunks, name=write.name, dims=dims, sharded=sharded
        )
    if lazy and not compute:
        check_deferred_edges(
            write.region, target.shape, target.storage_chunks, name=write.name, dims=dims, sharded=sharded
        )


def _plan_new(
    name: str, var: Variable, *, store: Store, path: str, user_encoding: bool, write_empty_chunks: bool | None
) -> _Write:
    """A new array: CF-encode, build its metadata (held back until the data is written)."""
    encoded = _encode(var, name)
    kwargs = creation_kwargs(
        encoded, name, user_encoding=user_encoding, write_empty_chunks=write_empty_chunks
    )
    wec = kwargs.pop("write_empty_chunks")
    apath = join_path(path, name)
    try:
        meta = array_metadata(
            **kwargs, dimension_names=encoded.dims, attributes=stored_attributes(encoded), path=apath
        )
        to_bytes(meta)  # the document written after the data must be writable: check it now
    except Zarr3Error as e:
        origin = _layout_origin(encoded, kwargs, user_encoding)
        raise type(e)(f"variable {name!r}: {e}{origin}") from e
    target = Array(store, apath, meta, write_empty_chunks=wec)
    return _Write(name, encoded, target, _concrete((slice(None),) * encoded.ndim, target.shape), True)


def _plan_existing(
    name: str,
    var: Variable,
    a: Array,
    stored: Variable,
    *,
    ds: xr.Dataset,
    store: Store,
    mode: str,
    append_dim: Hashable | None,
    region: Mapping[str, slice],
    write_empty_chunks: bool | None,
) -> _Write | None:
    """A stored array: encode like the store, check dims and sizes, grow it when appending.

    ``None`` when nothing is to be written (``a-`` mode, or an unchanged non-append coordinate).
    """
    dims = _array_dims(a)
    has_append = append_dim is not None and append_dim in dims
    if append_dim is not None and not has_append:
        if mode == "a-":
            return None
        if name in ds.coords:
            _check_same_coordinate(name, var, a, stored, dims, append_dim)
            return None  # identical once encoded: nothing to write
    encoded = _match_dims(name, _encode_like_stored(var, stored, name), dims, a.shape, region, append_dim)
    wec = a.write_empty_chunks if write_empty_chunks is None else write_empty_chunks
    reg = _region_tuple(dims, region)
    meta, pending = a.metadata, False
    if has_append:
        axis = dims.index(append_dim)
        old = a.shape[axis]
        shape = tuple(old + encoded.shape[axis] if i == axis else n for i, n in enumerate(a.shape))
        meta, pending = a.metadata.evolve(shape=shape), True  # the new shape is stored after the data
        reg = tuple(slice(old, shape[axis]) if i == axis else s for i, s in enumerate(reg))
    target = Array(store, a.path, meta, write_empty_chunks=wec)
    return _Write(name, encoded, target, _concrete(reg, target.shape), pending)


def _check_same_coordinate(
    name: str, var: Variable, a: Array, stored: Variable, dims: tuple[str, ...], append_dim: Hashable
) -> None:
    """Refuse a non-append coordinate whose values, encoded as the store encodes them (its
    dtype, units, packing), differ from the stored ones: a float64 latitude equals a float32
    stored one when it rounds to the same float32 values."""
    why = ""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            encoded = _encode_like_stored(var, stored, name)
        new = np.asarray(encoded.transpose(*dims).values)
        old = np.asarray(a[...])
        if new.shape != old.shape:
            why = f" (shape {new.shape} against {old.shape})"
            same = False
        elif new.dtype.kind in "fc" and old.dtype.kind in "fc":
            same = bool(np.array_equal(new, old, equal_nan=True))
        else:
            same = bool(np.array_equal(new.astype(object), old.astype(object)))
    except (ValueError, TypeError) as e:
        same, why = False, f" ({e})"
    if not same:
        raise ArgumentError(
            f"coordinate {name!r} differs from the one in the store{why}; appending along "
            f"{append_dim!r} needs the other coordinates unchanged"
        )


def _refuse_clashes(store: Store, path: str, plan: _Plan, arrays: Mapping[str, Array]) -> None:
    """Before anything is written: the group must not lie inside a Zarr v2 hierarchy, and a new
    array must not land where another node is stored (a v3 group, or a v2 node, which v3
    listings leave out)."""
    refuse_inside_v2(store, path)
    new = [w.target.path for w in plan.writes if w.name not in arrays]
    keys = [k for p in new for k in (metadata_key(p), join_path(p, ARRAY_KEY), join_path(p, GROUP_KEY))]
    found = store.exists_many(keys) if keys else []
    for i, p in enumerate(new):
        if found[3 * i]:
            raise NodeExistsError(f"cannot write variable {node_name(p)!r}: a group is stored at {p!r}")
        if found[3 * i + 1] or found[3 * i + 2]:
            raise ZarrV2Error(
                f"cannot write variable {node_name(p)!r}: a Zarr v2 node is stored at {p!r} "
                "(zarr3_backend reads v2 but writes only v3)"
            )


# ---- executing it ------------------------------------------------------------------------------
def _open_target(store: Store, path: str, mode: str, group: Group | None) -> Group:
    if mode in ("w", "w-"):
        return open_group(store, path=path, mode=mode)
    if group is not None:
        return group
    return create_group(store, path)


def _finish(*_: Any) -> None:
    return None


def to_zarr(
    dataset: xr.Dataset | xr.DataArray,
    store: Any = None,
    mode: str | None = None,
    group: str | None = None,
    encoding: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    compute: bool = True,
    consolidated: bool | None = None,
    append_dim: Hashable | None = None,
    region: Mapping[str, slice | str] | str | None = None,
    safe_chunks: bool = True,
    align_chunks: bool = False,
    storage_options: dict[str, Any] | None = None,
    zarr_format: int | None = None,
    write_empty_chunks: bool | None = None,
    chunkmanager_store_kwargs: dict[str, Any] | None = None,
    progress: bool = False,
) -> Group | Delayed:
    """Write ``dataset`` to a Zarr v3 store, as ``xarray.Dataset.to_zarr`` would.

    Dask variables are written with one task per shard (per chunk when unsharded); dask chunks
    that would split a shard raise ``ChunkAlignmentError`` unless ``align_chunks=True``. A
    ``region`` write (numpy or dask, any mode) must own whole shards, and so must the dask part
    of a ``compute=False`` write (an append starting inside a partly filled shard is refused:
    another pending append could rewrite that shard); ``safe_chunks=False`` lifts these two
    checks when no other write of the arrays runs at the same time. Integer-encoded values
    (packing, times) that overflow their dtype raise ``EncodedRangeError``. mode="w" refuses
    dask data read from the group it erases. ``progress=True`` shows a progress bar
    (distributed's when a Client is active). Returns the written Group, or with
    ``compute=False`` a Delayed that writes the dask data.
    """
    ds = _as_dataset(dataset)
    mode = choose_mode(mode, append_dim, region)
    if zarr_format not in (None, 3):
        raise ArgumentError(f"zarr3_backend writes zarr_format 3 only, got zarr_format={zarr_format!r}")
    _validate_names(ds)
    encoding = dict(encoding or {})
    unknown = [k for k in encoding if k not in ds.variables]
    if unknown:
        raise ArgumentError(f"encoding given for variables {unknown} that are not in the dataset")
    zstore = make_store(store if store is not None else {}, mode="a", storage_options=storage_options)
    path = normalize_path(group)

    existing: Group | None = None
    if mode != "w":
        try:
            existing = open_group(zstore, path=path, mode="r+", use_consolidated=False)
        except GroupNotFoundError:
            if mode == "r+":
                raise
    if mode == "w-" and existing is not None:
        raise NodeExistsError(f"a group already exists at {path or '/'!r} in {zstore!r} (mode='w-')")
    if existing is not None and existing.zarr_format == 2:
        raise ZarrV2Error(
            f"group {path or '/'!r} in {zstore!r} is Zarr v2: zarr3_backend reads v2 but writes only v3 "
            f"(mode={mode!r} cannot add to it; mode='w' on the store's root replaces it with v3)"
        )
    arrays = dict(existing.arrays()) if existing is not None else {}

    if mode == "w":
        ds = _detach_from_target(ds, zstore, path)
    reg: dict[str, slice] = {}
    if region is not None:
        ds, reg = _resolve_region(ds, region, mode, append_dim, existing, arrays)
        encoding = {k: v for k, v in encoding.items() if k in ds.variables}

    plan = _plan(
        ds,
        store=zstore,
        path=path,
        mode=mode,
        group=existing,
        arrays=arrays,
        encoding=encoding,
        append_dim=append_dim,
        region=reg,
        safe_chunks=safe_chunks,
        align_chunks=align_chunks,
        write_empty_chunks=write_empty_chunks,
        compute=compute,
    )

    if mode != "w":
        _refuse_clashes(zstore, path, plan, arrays)

    # ---- nothing has been written up to here ----
    root_consolidated = _root_is_consolidated(zstore)
    target_group = _open_target(zstore, path, mode, existing)
    lazy = []
    for w in plan.writes:
        data = w.variable.data
        if isinstance(data, da.Array):
            lazy.append(
                dask_store(
                    data,
                    w.target,
                    w.region,
                    compute=False,
                    align_chunks=align_chunks,
                    name=w.name,
                    dims=w.variable.dims,
                )
            )
        else:
            w.target.set_region(w.region, np.asarray(w.variable.values))

    def write_metadata() -> Group:
        docs = {
            metadata_key(w.target.path): to_bytes(w.target.metadata)
            for w in plan.writes
            if w.metadata_pending
        }
        if docs:
            zstore.set_many(docs)
        if plan.attrs is not None and plan.attrs != dict(target_group.attrs):
            target_group.attrs.put(plan.attrs)
        changed = bool(docs) or plan.attrs is not None
        if changed and (consolidated or (consolidated is None and mode != "r+") or root_consolidated):
            consolidate_metadata(zstore, "")
        return open_group(zstore, path=path, mode="r+")

    if not compute:
        write_metadata()
        finish = delayed(_finish, pure=False)(*lazy)
        return FusingDelayed(finish.key, finish.dask)
    if lazy:
        compute_with_progress(*lazy, progress=progress, **(chunkmanager_store_kwargs or {}))
    return write_metadata()


# ---- sources that mode="w" would erase -------------------------------------------------------
_MAX_WRAPPERS = 16


def _core_arrays(obj: Any) -> list[Array]:
    """The zarr3_backend Arrays an object of a dask graph or a lazy variable reads, looking
    through our readers and xarray's lazy-indexing wrappers."""
    for _ in range(_MAX_WRAPPERS):
        if isinstance(obj, Array):
            return [obj]
        if isinstance(obj, BlockReader):
            return [obj.array]
        if isinstance(obj, Zarr3BackendArray):
            return [obj.get_array()]
        if type(obj).__name__ == "DataNode":  # dask's wrapper of a literal in a graph
            obj = getattr(obj, "value", None)
            continue
        if type(obj).__module__.startswith("xarray.") and hasattr(obj, "array"):
            obj = obj.array
            continue
        return []
    return []


def _graph_literals(darr: da.Array) -> list[Any]:
    """Objects held as data (not tasks) in a dask array's graph: where array-likes live."""
    found = []
    for layer in darr.dask.layers.values():
        indices = getattr(layer, "indices", None)
        if indices is not None:  # Blockwise: inlined arguments have no index
            found.extend(arg for arg, index in indices if index is None)
        elif isinstance(layer, MaterializedLayer):
            found.extend(v for v in layer.mapping.values() if not isinstance(v, tuple | list | str))
    return found


def _reads_target(var: Variable, target_store: str, path: str) -> list[str]:
    """Paths of arrays under ``path`` of the target store that ``var`` reads lazily."""
    data = var._data  # the lazy wrapper, not the values
    objs = _graph_literals(data) if isinstance(data, da.Array) else [data]
    out = []
    for obj in objs:
        for arr in _core_arrays(obj):
            inside = not path or arr.path == path or arr.path.startswith(path + "/")
            if inside and store_token(arr.store) == target_store:
                out.append(arr.path)
    return out


def _detach_from_target(ds: xr.Dataset, zstore: Store, path: str) -> xr.Dataset:
    """Load lazily read numpy variables that mode="w" would erase, refuse dask ones.

    mode="w" erases the group before any data is computed, so data read lazily from it would
    come back as fill values. Numpy-backed lazy variables are loaded now (the write loads
    them anyway); dask variables may be larger than memory, so they are refused.
    """
    target = store_token(zstore)
    to_load = []
    for name, var in ds.variables.items():
        sources = _reads_target(var, target, path)
        if not sources:
            continue
        if isinstance(var._data, da.Array):
            raise ArgumentError(
                f"variable {name!r} is read lazily (dask) from {sources[0]!r} in the store being "
                f"overwritten, and mode='w' erases group {path or '/'!r} before the data is computed, "
                "so it would be written as fill values. Load it first (.load() or .persist() on a "
                "distributed cluster), write to another store or group, or overwrite in place with "
                "mode='a' (or mode='r+')"
            )
        to_load.append(name)
    if not to_load:
        return ds
    ds = ds.copy(deep=False)
    for name in to_load:
        ds.variables[name].load()
    return ds


def _root_is_consolidated(store: Store) -> bool:
    try:
        root = open_group(store, path="", mode="r+")
    except (GroupNotFoundError, Zarr3Error):
        return False
    return root.metadata.consolidated_metadata is not None
