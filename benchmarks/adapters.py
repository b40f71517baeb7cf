"""One adapter per library: the same operations spelled in each library's public API.

Every adapter is imported lazily by name so a worker process only imports the library it
measures. ``path`` is a store root, ``name`` the array inside it ("" for an array at the root);
roots are local directories, except in the remote group, where they are ``http://`` URLs of the
latency server (``benchmarks/latency_server.py``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .config import Size
from .data import BLOSC, DIMS, VAR, v3_codecs

Region = tuple[slice, ...]


class Adapter:
    """The operations a workload needs; ``NotImplementedError`` marks "not available here"."""

    name = "?"

    def versions(self) -> dict[str, str]:
        return {}

    def write(self, path: str, src: np.ndarray, size: Size, fixture: str) -> None:
        raise NotImplementedError

    def read(self, path: str, name: str = "") -> np.ndarray:
        raise NotImplementedError

    def open(self, path: str, name: str = "") -> Any:
        raise NotImplementedError

    def read_one(self, handle: Any, region: Region) -> np.ndarray:
        raise NotImplementedError

    def read_batch(self, handle: Any, regions: Sequence[Region]) -> list[np.ndarray]:
        raise NotImplementedError

    def xr_open(self, path: str) -> Any:
        raise NotImplementedError

    def xr_open_coords(self, path: str, consolidated: bool) -> Any:
        """``open_dataset`` of a group, consolidated metadata used or not (remote workload E)."""
        raise NotImplementedError

    def to_zarr(self, ds: Any, path: str, size: Size) -> None:
        raise NotImplementedError


class Z3Adapter(Adapter):
    """zarr3_backend."""

    name = "z3"

    def __init__(self) -> None:
        import zarr3_backend as z3

        self.z3 = z3

    def versions(self) -> dict[str, str]:
        return {"zarr3_backend": self.z3.__version__}

    def write(self, path, src, size, fixture):
        grid, codecs = v3_codecs(size, fixture)
        a = self.z3.create_array(
            path, shape=src.shape, dtype=src.dtype, chunks=tuple(grid), codecs=codecs, fill_value=0.0
        )
        a[...] = src

    def read(self, path, name=""):
        return self.z3.open_array(path, path=name, mode="r")[...]

    def open(self, path, name=""):
        return self.z3.open_array(path, path=name, mode="r")

    def read_one(self, handle, region):
        return handle[region]

    def read_batch(self, handle, regions):
        get_regions = getattr(handle, "get_regions", None)
        if get_regions is not None:
            return get_regions(regions)
        from zarr3_backend._threads import thread_map

        return thread_map(handle.get_region, regions, kind="io")

    def xr_open(self, path):
        import xarray as xr

        return xr.open_dataset(path, engine="zarr3", chunks={})

    def xr_open_coords(self, path, consolidated):
        import xarray as xr

        return xr.open_dataset(path, engine="zarr3", chunks={}, consolidated=consolidated)

    def to_zarr(self, ds, path, size):
        self.z3.to_zarr(
            ds, path, mode="w", encoding={VAR: {"chunks": (size.chunk,) * 3, "compressors": None}}
        )


class ZarrAdapter(Adapter):
    """zarr-python with its default codec pipeline (``pipeline=None``) or another one."""

    name = "zarr"
    pipeline: str | None = None

    def __init__(self) -> None:
        import zarr

        self.zarr = zarr
        if self.pipeline is not None:
            zarr.config.set({"codec_pipeline.path": self.pipeline})

    def versions(self) -> dict[str, str]:
        return {"zarr": self.zarr.__version__}

    def write(self, path, src, size, fixture):
        from zarr.codecs import BloscCodec

        lay_grid, _ = v3_codecs(size, fixture)
        sharded = fixture == "sharded"
        compressors = None
        if fixture == "blosc":
            compressors = BloscCodec(
                cname=BLOSC["cname"], clevel=BLOSC["clevel"], shuffle=BLOSC["shuffle"], typesize=4
            )
        a = self.zarr.create_array(
            store=path,
            shape=src.shape,
            dtype=src.dtype,
            chunks=(size.inner,) * 3 if sharded else tuple(lay_grid),
            shards=tuple(lay_grid) if sharded else None,
            compressors=compressors,
            fill_value=0.0,
            zarr_format=3,
            overwrite=True,
        )
        a[...] = src

    def read(self, path, name=""):
        return self.open(path, name)[...]

    def store(self, path: str) -> Any:
        """What zarr-python is given for a store root: the path or URL itself (zarr-python
        makes its LocalStore, or its FsspecStore for a URL)."""
        return path

    def open(self, path, name=""):
        store = self.store(path)
        if isinstance(store, str):
            return self.zarr.open_array(os.path.join(path, name) if name else path, mode="r")
        return self.zarr.open_array(store, path=name, mode="r")

    def read_one(self, handle, region):
        return handle[region]

    def read_batch(self, handle, regions):
        import asyncio

        from zarr.core.sync import sync

        async def gather() -> list:
            return await asyncio.gather(*(handle._async_array.getitem(r) for r in regions))

        return [np.asarray(r) for r in sync(gather())]

    def xr_open(self, path):
        import xarray as xr

        return xr.open_dataset(self.store(path), engine="zarr", chunks={}, consolidated=False, zarr_format=3)

    def xr_open_coords(self, path, consolidated):
        import xarray as xr

        return xr.open_dataset(
            self.store(path), engine="zarr", chunks={}, consolidated=consolidated, zarr_format=3
        )

    def to_zarr(self, ds, path, size):
        ds.to_zarr(
            path,
            mode="w",
            zarr_format=3,
            consolidated=False,
            encoding={VAR: {"chunks": (size.chunk,) * 3, "compressors": None}},
        )


class ZarrsAdapter(ZarrAdapter):
    """zarr-python with the Rust ``zarrs`` codec pipeline."""

    name = "zarrs"
    pipeline = "zarrs.ZarrsCodecPipeline"

    def __init__(self) -> None:
        import zarrs  # noqa: F401 - fail early (-> "not available") when it is not installed

        super().__init__()

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        return {**super().versions(), "zarrs": version("zarrs")}


class ZarrFusedAdapter(ZarrAdapter):
    """zarr-python with its opt-in synchronous ``FusedCodecPipeline`` (zarr-python 3.4+)."""

    name = "zarrfused"
    pipeline = "zarr.core.codec_pipeline.FusedCodecPipeline"

    def __init__(self) -> None:
        from zarr.core import codec_pipeline

        if not hasattr(codec_pipeline, "FusedCodecPipeline"):
            raise ImportError("this zarr-python has no FusedCodecPipeline (needs 3.4+)")
        super().__init__()


class ZarrObstoreAdapter(ZarrAdapter):
    """zarr-python's ObjectStore on obstore's HTTPStore (remote group only)."""

    name = "zarrobs"

    def __init__(self) -> None:
        import obstore  # noqa: F401 - fail early (-> "not installed") when it is missing

        super().__init__()

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        return {**super().versions(), "obstore": version("obstore")}

    def store(self, path):
        from obstore.store import HTTPStore
        from zarr.storage import ObjectStore

        if "://" not in path:
            raise NotImplementedError("the obstore variant reads over HTTP only (the remote group)")
        return ObjectStore(HTTPStore.from_url(path, client_options={"allow_http": True}), read_only=True)


class Zarr64Adapter(ZarrAdapter):
    """zarr-python's fsspec store with ``async.concurrency`` raised from its default to 64."""

    name = "zarr64"

    def __init__(self) -> None:
        super().__init__()
        self.zarr.config.set({"async.concurrency": 64})


class TensorstoreAdapter(Adapter):
    """tensorstore's zarr3 driver on the file kvstore, default context (no chunk cache)."""

    name = "tensorstore"

    def __init__(self) -> None:
        import tensorstore as ts

        self.ts = ts
        self.context = ts.Context()

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        return {"tensorstore": version("tensorstore")}

    def _kv(self, path: str, name: str = "") -> dict | str:
        if "://" in path:  # a URL (the remote group): tensorstore's http kvstore parses it
            return "/".join(p.strip("/") for p in (path, name) if p) + "/"
        return {"driver": "file", "path": os.path.join(path, name, "") if name else path + "/"}

    def write(self, path, src, size, fixture):
        grid, codecs = v3_codecs(size, fixture)
        spec = {
            "driver": "zarr3",
            "kvstore": self._kv(path),
            "metadata": {
                "shape": list(src.shape),
                "data_type": "float32",
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": grid}},
                "chunk_key_encoding": {"name": "default"},
                "fill_value": 0.0,
                "codecs": codecs,
            },
            "create": True,
            "delete_existing": True,
        }
        t = self.ts.open(spec, context=self.context).result()
        t.write(src).result()

    def open(self, path, name=""):
        spec = {"driver": "zarr3", "kvstore": self._kv(path, name)}
        return self.ts.open(spec, context=self.context, read=True).result()

    def read(self, path, name=""):
        return self.open(path, name).read().result()

    def read_one(self, handle, region):
        return handle[region].read().result()

    def read_batch(self, handle, regions):
        futures = [handle[r].read() for r in regions]
        return [f.result() for f in futures]

    def xr_open(self, path):
        import xarray_tensorstore

        ds = xarray_tensorstore.open_zarr(path, context=self.context)
        chunks = self.open(path, VAR).chunk_layout.read_chunk.shape
        return ds.chunk(dict(zip(DIMS, chunks, strict=True)))

    def xr_open_coords(self, path, consolidated):
        import xarray_tensorstore

        return xarray_tensorstore.open_zarr(path, context=self.context, consolidated=consolidated)


ADAPTERS: dict[str, type[Adapter]] = {
    "z3": Z3Adapter,
    "zarr": ZarrAdapter,
    "zarrfused": ZarrFusedAdapter,
    "zarrs": ZarrsAdapter,
    "tensorstore": TensorstoreAdapter,
    "zarrobs": ZarrObstoreAdapter,
    "zarr64": Zarr64Adapter,
}


def get_adapter(lib: str) -> Adapter:
    """An adapter instance; raises ImportError when the library is not installed."""
    return ADAPTERS[lib]()
