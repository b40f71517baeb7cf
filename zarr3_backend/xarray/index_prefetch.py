"""Read the index coordinates of opened groups all at once.

xarray loads every 1-D coordinate named after its own dimension (to build its indexes; a time
coordinate also while CF-decoding it), one variable after another: on an object store that is
one round trip each. An ``IndexBatch`` reads them all together, concurrently, the first time
xarray asks for any of them: one round trip for all (two for sharded ones: the shard indexes,
then the data), and nothing when xarray asks for none (``create_default_indexes=False`` and
``decode_times=False``). The values are the stored (still CF-encoded) ones: xarray's decoding
runs on them as it would on values it loaded itself.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from .._threads import thread_map
from ..core.array import Array


def is_index_coordinate(name: str, dims: Sequence[str]) -> bool:
    """Whether xarray builds a default index from variable ``name`` with dimensions ``dims``:
    one dimension, named as the variable (what ``StoreBackendEntrypoint`` promotes to a
    coordinate and ``open_dataset`` indexes)."""
    return len(dims) == 1 and dims[0] == name


def read_together(arrays: Mapping[Hashable, Array]) -> dict[Hashable, np.ndarray]:
    """Every array of ``arrays`` read whole, all concurrently (each from a thread of the "io"
    pool; each read is the core's own, so its requests are batched as usual). A read that fails
    raises its typed error, as it would when xarray loaded that variable."""
    keys = list(arrays)

    def read(key: Hashable) -> np.ndarray:
        return np.asarray(arrays[key][...])

    return dict(zip(keys, thread_map(read, keys, kind="io"), strict=True))


class IndexBatch:
    """Arrays read together (``read_together``) the first time any one of them is asked for,
    then served from memory. Pickles unread (a copy in another process reads on its own)."""

    __slots__ = ("_arrays", "_lock", "_values")

    def __init__(self, arrays: Mapping[Hashable, Array]) -> None:
        self._arrays = dict(arrays)
        self._lock = threading.Lock()
        self._values: dict[Hashable, np.ndarray] | None = None

    def __contains__(self, key: Hashable) -> bool:
        return key in self._arrays

    def values(self, key: Hashable) -> np.ndarray:
        """The stored values of array ``key`` (all arrays are read at the first call; a failed
        read raises its error and is tried again at the next call)."""
        with self._lock:
            if self._values is None:
                self._values = read_together(self._arrays)
            return self._values[key]

    def __reduce__(self) -> tuple[Any, ...]:
        return (IndexBatch, (self._arrays,))
