"""Read the index coordinates of opened groups all at once.

xarray loads every 1-D coordinate named after its own dimension (to build its indexes), one
variable after another: on an object store that is one round trip each. Reading them together,
concurrently, before xarray asks costs one round trip for all (two for sharded ones: the shard
indexes, then the data). The values are the stored (still CF-encoded) ones: xarray's decoding
runs on them as it would on values it loaded itself.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

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
