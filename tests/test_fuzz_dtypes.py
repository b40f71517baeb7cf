"""Hypothesis fuzzing of v3 data types and their fill values (``core/dtypes*.py``): generated
``data_type`` values (extension types with configurations, structs nested too) and fill values
of every JSON form; parsing either ends in a ``Zarr3Error`` or in a fill value whose JSON form
parses back to the same bytes."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_corruption import _memory_cap  # noqa: F401  (autouse: caps the address space)
from tests.test_fuzz_layout import _SETTINGS, _typed, budget
from tests.test_fuzz_metadata import _FILLS, _SCALARS, _SIZES
from tests.test_fuzz_v2 import fill_values
from zarr3_backend.core.dtypes import parse_data_type

_NAMES = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
    "float32", "float64", "complex64", "complex128", "r8", "r16", "r24", "r0", "r7", "r2048",
    "string", "bytes", "variable_length_bytes",
]  # fmt: skip
_CONFIGS: list[Any] = [None, {}, *_SCALARS[:12]]


def _sized(name: str) -> st.SearchStrategy:
    size = st.one_of(st.integers(0, 12), st.sampled_from(_SIZES), st.sampled_from(_SCALARS))
    return st.builds(lambda n: {"name": name, "configuration": {"length_bytes": n}}, size)


_TIME = st.builds(
    lambda name, unit, scale: {"name": name, "configuration": {"unit": unit, "scale_factor": scale}},
    st.sampled_from(["numpy.datetime64", "numpy.timedelta64"]),
    st.sampled_from(["s", "ms", "ns", "D", "generic", "Y", "x", "", 5]),
    st.one_of(st.integers(-2, 2**40), st.sampled_from(_SCALARS)),
)


def _struct(depth: int) -> st.SearchStrategy:
    leaf = st.one_of(
        st.sampled_from(_NAMES[:14]), _sized("fixed_length_utf32"), _sized("null_terminated_bytes")
    )
    ftype = leaf if depth == 0 else st.one_of(leaf, _struct(depth - 1))
    field = st.one_of(
        st.fixed_dictionaries({"name": st.sampled_from(["a", "b", "c", ""]), "data_type": ftype}),
        st.lists(st.one_of(st.sampled_from(["a", "b"]), ftype), min_size=2, max_size=2),
        st.sampled_from(_SCALARS),
    )
    return st.builds(
        lambda fields, name: {"name": name, "configuration": {"fields": fields}},
        st.lists(field, max_size=4),
        st.sampled_from(["struct", "structured"]),
    )


data_types = st.one_of(
    st.sampled_from(_NAMES),
    _sized("fixed_length_utf32"),
    _sized("null_terminated_bytes"),
    _TIME,
    _struct(2),
    st.builds(
        lambda n, c: {"name": n, "configuration": c}, st.sampled_from(_NAMES), st.sampled_from(_CONFIGS)
    ),
)


_ANY_FILL = st.one_of(fill_values, st.sampled_from(_FILLS))


def _near(draw: st.DrawFn, good: Any) -> Any:
    """A fill value close to ``good`` (a valid JSON fill): itself, one part replaced, or anything."""
    choice = draw(st.integers(0, 5))
    if choice == 0:
        return draw(_ANY_FILL)
    if isinstance(good, dict) and good and choice < 4:
        name = draw(st.sampled_from(sorted(good)))
        return {**good, name: _near(draw, good[name]) if choice < 3 else draw(_ANY_FILL)}
    if isinstance(good, list) and good and choice < 4:
        i = draw(st.integers(0, len(good) - 1))
        return [*good[:i], draw(_ANY_FILL), *good[i + 1 :]]
    if isinstance(good, int | float) and not isinstance(good, bool) and choice < 4:
        return draw(
            st.one_of(st.integers(-(2**65), 2**65), st.floats(), st.sampled_from(["NaN", "-Infinity"]))
        )
    return good


@settings(max_examples=budget(1500), **_SETTINGS)
@given(data_type=data_types, data=st.data())
def test_data_types_and_fill_values(data_type, data):
    dt = _typed(parse_data_type, data_type)
    if dt is None:
        return
    assert parse_data_type(dt.to_json()) == dt
    fill = _near(data.draw, dt.fill_value_to_json(dt.default_fill_value()))
    value = _typed(dt.parse_fill_value, fill)
    if value is None:
        return
    again = dt.parse_fill_value(dt.fill_value_to_json(value))
    if dt.numpy.kind not in "OT":
        assert np.asarray(again, dtype=dt.numpy).tobytes() == np.asarray(value, dtype=dt.numpy).tobytes()
