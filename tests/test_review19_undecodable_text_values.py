"""review19: text is coerced to the string type's numpy dtype on every write path (2afb757),
and a value with no Unicode form is an ArgumentError naming it; but only a str that cannot be
encoded (a lone surrogate) was caught. Bytes that are not UTF-8 written to a string array raise
UnicodeDecodeError, a ValueError, which ``coerce_value`` reports as a ShapeError with a false
message: "value of shape (2,) cannot be written to a selection of shape (2,)"."""

from __future__ import annotations

import numpy as np
import pytest

import zarr3_backend as z3
from zarr3_backend import errors


@pytest.mark.parametrize(
    "value",
    [b"\xff", np.array([b"ok", b"\xff"], dtype=object), [b"ok", b"caf\xe9"]],
    ids=["bytes", "object_array", "list"],
)
def test_bytes_that_are_not_utf8_are_named_as_such(value):
    array = z3.create_array(z3.MemoryStore(), "s", shape=(3,), dtype="str", chunks=(3,))
    with pytest.raises(errors.ArgumentError, match="not valid Unicode") as info:
        array[:2] = value
    assert not isinstance(info.value, errors.ShapeError)
    np.testing.assert_array_equal(array[...], ["", "", ""])  # nothing written
