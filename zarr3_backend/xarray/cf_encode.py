"""CF encoding of variables for Zarr: as xarray's zarr engine encodes them, with integer casts range-checked,
and appends encoded exactly as the stored variable is."""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Mapping
from typing import Any

import dask.array as da
import numpy as np
import pandas as pd
from xarray import conventions
from xarray.backends.common import ensure_dtype_not_object
from xarray.coding import strings, variables
from xarray.core.variable import Variable

from ..core.array import Array
from ..core.group import Group
from ..errors import (
    ArgumentError,
    ArgumentTypeError,
    EncodedRangeError,
    Zarr3Error,
)
from .datastore import Zarr3DataStore
from .encoding import encode_attr_value, encode_fill_value_attr


# ---- reading what is stored ----------------------------------------------------------------
def decode_stored(group: Group, arrays: Mapping[str, Array], names: list[str]) -> dict[str, Variable]:
    """Stored variables, CF-decoded lazily: their ``encoding`` is how new data must be encoded."""
    if not names:
        return {}
    datastore = Zarr3DataStore(group, members={n: arrays[n] for n in names})
    raw = {n: datastore.open_store_variable(n, arrays[n]) for n in names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        decoded, _, _ = conventions.decode_cf_variables(raw, {}, decode_coords=False)
    return dict(decoded)


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


def encode_variable(var: Variable, name: str) -> Variable:
    """CF-encode as xarray's zarr engine does for Zarr v3, with a range-checked integer cast."""
    try:
        out = conventions.encode_cf_variable(var, name=name, coders=_CODERS)
        out = ensure_dtype_not_object(out, name=name)
        if out.dtype.kind == "T":  # numpy's StringDType is stored as it is, nulls as ""
            return _without_string_nulls(out)
        out = strings.EncodedStringCoder(allows_unicode=True).encode(out, name=name)
        return strings.ensure_fixed_length_bytes(out)
    except Zarr3Error:
        raise
    except (ValueError, TypeError) as e:
        raise _named_error(e, f"variable {name!r}: {e}") from e


def _fill_string_nulls(values: np.ndarray) -> np.ndarray:
    """A StringDType array's null entries (its ``na_object``) as empty strings, as xarray
    writes them; the result has a plain ``StringDType()``."""
    out = np.asarray(values).astype(np.dtypes.StringDType(na_object=""))
    return out.astype(np.dtypes.StringDType())


def _without_string_nulls(var: Variable) -> Variable:
    """``var`` with nulls written as "" when its StringDType has an ``na_object``."""
    if var.dtype == np.dtypes.StringDType():  # no na_object: no nulls to write
        return var
    data = var.data
    if isinstance(data, da.Array):
        data = data.map_blocks(_fill_string_nulls, dtype=np.dtypes.StringDType())
    else:
        data = _fill_string_nulls(data)
    return var.copy(deep=False, data=data)


def _named_error(e: Exception, message: str) -> Exception:
    """xarray's plain ``ValueError``/``TypeError`` as our typed ones (still subclasses of
    those), more specific classes (``OutOfBoundsDatetime``, ...) as themselves."""
    if type(e) is ValueError:
        return ArgumentError(message)
    if type(e) is TypeError:
        return ArgumentTypeError(message)
    return type(e)(message)


def encode_like_stored(var: Variable, stored: Variable, name: str) -> Variable:
    """Encode new data exactly as ``stored`` is encoded; refuse values it cannot represent."""
    _check_append_dtype(name, stored, var)
    var = var.copy(deep=False)
    if var.dtype.kind in "mMO" and isinstance(var.data, da.Array):
        var = var.load()  # times are small: encode them now so errors come before any write
    _check_text_width(name, stored.dtype, _text_dtype(var))
    var.encoding = {
        k: v for k, v in stored.encoding.items() if k not in ("chunks", "shards", "preferred_chunks")
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        encoded = encode_variable(var, name)
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


def _text_width(dtype: np.dtype) -> int:
    """Characters (``U``) or bytes (``S``) one fixed-width text element holds."""
    return dtype.itemsize // 4 if dtype.kind == "U" else dtype.itemsize


def _text_dtype(var: Variable) -> np.dtype | None:
    """The fixed-width dtype that holds ``var``'s text: its own for ``S``/``U``, for object
    text (in memory: ``encode_like_stored`` loads it) that of its longest string."""
    if var.dtype.kind in "SU":
        return var.dtype
    if var.dtype.kind != "O":
        return None
    values = [v for v in np.ravel(var.values) if isinstance(v, str | bytes)]
    if not values:
        return None
    longest = max(len(v) for v in values)
    return np.dtype(f"U{longest}") if isinstance(values[0], str) else np.dtype(f"S{longest}")


def _check_text_width(name: str, stored: np.dtype, new: np.dtype | None) -> None:
    """Refuse text longer than a fixed-width store holds (numpy would truncate it silently,
    also when object text, which passes the dtype check xarray makes, is cast to it)."""
    if new is not None and stored.kind in "SU" and _text_width(new) > _text_width(stored):
        raise ArgumentError(
            f"variable {name!r}: the store holds fixed-width text of dtype {stored} but the data to "
            f"write has {new} (values up to {_text_width(new)} long), which would be truncated; "
            "rewrite the variable with a wider (or a variable-length) dtype"
        )


def _same_cf_setting(key: str, a: Any, b: Any) -> bool:
    """Whether two ``units`` (``"<unit> since <date>"``) or ``calendar`` strings mean the same."""
    a, b = str(a).strip(), str(b).strip()
    if a == b:
        return True
    if key == "calendar":
        aliases = {"standard": "gregorian"}
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
            f"Mismatched dtypes for variable {name!r} between the store and the dataset to write: "
            f"the store holds dtype {stored.dtype} but the data to write has dtype {new.dtype}"
        )
