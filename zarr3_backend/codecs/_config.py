"""Checks for codec ``configuration`` objects: known keys, integers in range, choices, booleans.

Every failure is a ``CodecError`` whose message names the codec and the key at fault.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

import numpy as np

from ..errors import CodecError


def check_keys(
    codec: str, configuration: Any, allowed: Iterable[str], required: Iterable[str] = ()
) -> dict[str, Any]:
    """``configuration`` as a dict, after refusing a non-object, unknown keys and missing keys."""
    if configuration is None:
        configuration = {}
    if not isinstance(configuration, Mapping):
        raise CodecError(f"codec {codec!r}: configuration must be an object, got {configuration!r}")
    allowed = tuple(allowed)
    unknown = sorted(str(k) for k in configuration if k not in allowed)
    if unknown:
        known = ", ".join(allowed) if allowed else "none"
        raise CodecError(f"codec {codec!r}: unknown configuration key {unknown[0]!r} (allowed: {known})")
    for key in required:
        if key not in configuration:
            raise CodecError(f"codec {codec!r}: configuration key {key!r} is required")
    return dict(configuration)


def check_int(codec: str, key: str, value: Any, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as an ``int`` within ``[lo, hi]``; booleans and floats are refused."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise CodecError(f"codec {codec!r}: {key!r} must be an integer, got {value!r}")
    value = int(value)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = (
            f"from {lo} to {hi}"
            if lo is not None and hi is not None
            else f">= {lo}"
            if lo is not None
            else f"<= {hi}"
        )
        raise CodecError(f"codec {codec!r}: {key!r} must be an integer {bounds}, got {value}")
    return value


def check_choice(codec: str, key: str, value: Any, choices: Collection[str]) -> str:
    """``value`` if it is one of the strings ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise CodecError(
            f"codec {codec!r}: {key!r} must be one of {', '.join(map(repr, choices))}, got {value!r}"
        )
    return value


def check_bool(codec: str, key: str, value: Any) -> bool:
    """``value`` if it is a boolean (JSON ``true``/``false``)."""
    if not isinstance(value, bool | np.bool_):
        raise CodecError(f"codec {codec!r}: {key!r} must be a boolean, got {value!r}")
    return bool(value)
