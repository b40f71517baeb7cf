"""The layout of a new array (data type, chunks, shards, codecs) from a CF-encoded variable and its encoding."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from xarray.core.variable import Variable

from ..core.codec_specs import coerce_codec
from ..errors import (
    ArgumentError,
    ArgumentTypeError,
)
from .encoding import ZARR_ENCODING_KEYS

#: Encoding keys read back from a store that say nothing about how to write.
_SAFE_TO_DROP = frozenset({"source", "original_shape", "preferred_chunks", "cache_metadata"})
_VALID_ENCODING = ZARR_ENCODING_KEYS | {"codecs", "shard_index"}
_LAYOUT_KEYS = ("compressors", "filters", "serializer")


def _dtype_for_store(dtype: np.dtype, serializer: Any) -> Any:
    """The data type to create, as zarr-python (through xarray's engine) stores each kind of
    text: fixed-width numpy text keeps its width (``<U`` as ``fixed_length_utf32``, ``S`` as
    ``null_terminated_bytes``), unless the ``vlen-utf8``/``vlen-bytes`` serializer asks for
    variable-length; object and StringDType text is variable-length ``string``."""
    if dtype.kind in "TO":
        return "string"
    name = _codec_name(serializer)
    if dtype.kind == "U" and name == "vlen-utf8":
        return "string"
    if dtype.kind == "S" and name == "vlen-bytes":
        return "variable_length_bytes"
    return dtype


def _as_tuple(value: Any, ndim: int, key: str, name: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, int | np.integer):
        return (int(value),) * ndim
    items = list(value) if isinstance(value, list | tuple | np.ndarray) else None
    if items is not None and any(isinstance(v, list | tuple) for v in items):
        # what ``array_encoding`` reads from a rectilinear grid; refused as xarray's engine does
        raise ArgumentTypeError(
            f"encoding[{key!r}]={value!r} for variable {name!r} is a rectilinear (variable-sized) "
            "grid: to_zarr cannot write one yet. To write a regular grid instead, clear the "
            f"encoding (del ds[{name!r}].encoding[{key!r}]) and give the variable uniform chunks"
        )
    if items is None or not all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in items):
        raise ArgumentTypeError(
            f"encoding[{key!r}] for variable {name!r} must be an int or a tuple of ints, got {value!r}"
        )
    return tuple(int(v) for v in items)


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


def layout_origin(var: Variable, kwargs: Mapping[str, Any], user_encoding: bool) -> str:
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
#: The compressor xarray's engine (through zarr-python 3.1.6) gives a new Zarr v2 array:
#: numcodecs' default Blosc.
V2_DEFAULT_COMPRESSOR = {
    "name": "blosc",
    "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "blocksize": 0},
}


def _codec_name(codec: Any) -> str | None:
    """The name of a codec given as JSON, ``{"name": ...}`` or a codec object."""
    if isinstance(codec, str):
        return codec
    if isinstance(codec, Mapping):
        return codec.get("name")
    return getattr(codec, "name", None)


def _as_codec(value: Any) -> Any:
    """A codec given in ``encoding``: ours, its JSON form, a numcodecs object (``coerce_codec``)
    or a zarr-python codec object, which users of xarray's engine pass and which becomes its
    ``zarr.json`` form. By hand: the library never imports zarr-python, so its classes cannot
    be named; they are known by their module."""
    if type(value).__module__.split(".")[0] == "zarr":
        return value.to_dict()
    return coerce_codec(value)


def _codec_list(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [_as_codec(c) for c in value]
    return [_as_codec(value)]


def creation_kwargs(
    var: Variable,
    name: str,
    *,
    user_encoding: bool,
    write_empty_chunks: bool | None,
    zarr_format: int = 3,
) -> dict[str, Any]:
    """Keyword arguments of ``array_metadata`` (``v2_array_metadata`` with ``zarr_format=2``)
    for a CF-encoded variable and its zarr encoding.

    Raises ``ValueError`` for unknown keys in an encoding the user passed (unknown keys left
    from reading a store are dropped, as xarray does). For v2, as xarray's engine: no
    ``fill_value`` key (the CF ``_FillValue`` is the array's fill value) and Blosc(lz4) by
    default.
    """
    encoding = {k: v for k, v in var.encoding.items() if k not in _SAFE_TO_DROP}
    if "_FillValue" in encoding and encoding["_FillValue"] is None:
        del encoding["_FillValue"]  # "no CF _FillValue": CF encoding has already honoured it
    valid = _VALID_ENCODING if zarr_format == 3 else _VALID_ENCODING - {"fill_value"}
    invalid = sorted(set(encoding) - valid)
    if invalid and user_encoding:
        hint = " Use `_FillValue` to set the Zarr array `fill_value`" if "fill_value" in invalid else ""
        raise ArgumentError(f"unexpected encoding parameters for variable {name!r}: {invalid}.{hint}")
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
    kwargs: dict[str, Any] = {
        "shape": var.shape,
        "dtype": _dtype_for_store(var.dtype, encoding.get("serializer")),
    }
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
        elif zarr_format == 2:
            kwargs["compressors"] = [V2_DEFAULT_COMPRESSOR]
        if "filters" in encoding:
            kwargs["filters"] = _codec_list(encoding["filters"])
        serializer = encoding.get("serializer")
        variable_length = isinstance(kwargs["dtype"], str)
        if serializer is not None and not (
            # a serializer read back from a store that stored the text the other way (a
            # fixed-width source's ``bytes``, a variable-length one's ``vlen-*``) does not
            # apply: the data's dtype decides (one the user gave still fails)
            not user_encoding and variable_length != (_codec_name(serializer) in _TEXT_SERIALIZERS)
        ):
            kwargs["serializer"] = _as_codec(serializer)
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
