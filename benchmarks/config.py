"""What the suite measures: sizes, libraries, workloads and the cases (workload x library) to run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

#: Bytes in a GB for the GB/s columns (decimal, as disk and network vendors count).
GB = 1e9
MiB = 2**20


@dataclass(frozen=True)
class Size:
    """Array edge ``n`` (shape n^3 float32), storage chunk edge, inner chunk edge, random reads."""

    name: str
    n: int
    chunk: int
    inner: int
    random_reads: int

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.n,) * 3

    @property
    def nbytes(self) -> int:
        return self.n**3 * 4


SIZES = {
    # The workloads: 512 MiB float32, chunks 128^3, shards 128^3 of 64^3 inner chunks.
    "full": Size("full", 512, 128, 64, 1000),
    "small": Size("small", 256, 64, 32, 1000),
    "tiny": Size("tiny", 32, 16, 8, 40),
}

#: Library names: ours, zarr-python (default pipeline), zarr-python with its synchronous
#: FusedCodecPipeline, zarr-python with the zarrs (Rust) codec pipeline, tensorstore.
#: ``numpy`` and ``file`` name the reference points.
LIBS = ("z3", "zarr", "zarrfused", "zarrs", "tensorstore")
#: Libraries measured only in the remote group (over HTTP): zarr-python on obstore's HTTPStore
#: (its ObjectStore), and zarr-python's fsspec store with ``async.concurrency`` 64.
REMOTE_ONLY_LIBS = ("zarrobs", "zarr64")
ALL_LIBS = LIBS + REMOTE_ONLY_LIBS
ANCHORS = ("zarr", "zarrfused", "zarrs", "tensorstore", *REMOTE_ONLY_LIBS)


@dataclass(frozen=True)
class Workload:
    """One measured operation; ``unit`` is ``GB/s`` (uncompressed bytes / wall) or ``reads/s``."""

    id: str
    title: str
    kind: str  # write | read | random_one | random_batch | xr_mean[_in_memory] | to_zarr | copy | file_* | icechunk_read | remote_* | latency_write
    fixture: str | None = None  # raw | blosc | sharded (the store read from / layout written)
    cold: bool = False
    unit: str = "GB/s"
    libs: tuple[str, ...] = LIBS
    distributed: bool = False
    remote: str | None = None  # the remote group: the store served over HTTP (remote_workloads)
    latency_ms: float | None = None  # the remote group: latency the server adds to each request


REFERENCE_LIBS = ("numpy", "file")
WORKLOADS: tuple[Workload, ...] = (
    Workload("ref_copy", "numpy copy (reference)", "copy", libs=("numpy",)),
    Workload("ref_file_write", "one file write to page cache (reference)", "file_write", libs=("file",)),
    Workload("ref_file_read_warm", "one file read, warm (reference)", "file_read", libs=("file",)),
    Workload("ref_file_read_cold", "one file read, cold (reference)", "file_read", cold=True, libs=("file",)),
    Workload("a_write_raw", "(a) write, uncompressed", "write", "raw"),
    Workload("b_write_blosc", "(b) write, blosc lz4 shuffle", "write", "blosc"),
    Workload("c_read_raw_warm", "(c) read uncompressed, warm", "read", "raw"),
    Workload("c_read_raw_cold", "(c) read uncompressed, cold", "read", "raw", cold=True),
    Workload("c_read_blosc_warm", "(c) read blosc, warm", "read", "blosc"),
    Workload("c_read_blosc_cold", "(c) read blosc, cold", "read", "blosc", cold=True),
    Workload("d_write_sharded", "(d) write sharded", "write", "sharded"),
    Workload("d_read_sharded", "(d) read sharded, warm", "read", "sharded"),
    Workload(
        "e_random_one", "(e) random inner-chunk reads, one at a time", "random_one", "sharded", unit="reads/s"
    ),
    Workload(
        "e_random_batch", "(e) random inner-chunk reads, one call", "random_batch", "sharded", unit="reads/s"
    ),
    Workload(
        "ref_mean_in_memory",
        "(f) the same mean on the same dask chunks already in memory, no I/O (reference)",
        "xr_mean_in_memory",
        libs=("numpy",),
    ),
    Workload("f_xarray_mean", "(f) xarray open_dataset(chunks={}) + mean(time), threads", "xr_mean", "raw"),
    Workload(
        "g_to_zarr_threads",
        "(g) to_zarr of a dask dataset, threads",
        "to_zarr",
        "raw",
        libs=("z3", "zarr", "zarrfused", "zarrs"),
    ),
    Workload(
        "i_copy_reshard_cli",
        "(i) zarr3 copy of a 1000 MiB array into a new shard layout, threads",
        "cli_copy",
        libs=("z3",),
    ),
    Workload(
        "i_copy_reshard_read_write",
        "(i) the same copy as one full read plus one full write (reference)",
        "read_write_copy",
        libs=("z3",),
    ),
    Workload(
        "h_to_zarr_distributed",
        "(h) to_zarr on a LocalCluster of 2 processes",
        "to_zarr",
        "raw",
        libs=("z3", "zarr", "zarrfused", "zarrs"),
        distributed=True,
    ),
    Workload(
        "i_icechunk_read",
        "(i) xarray open_dataset of an Icechunk session store + full read, warm",
        "icechunk_read",
        libs=("z3", "zarr"),
    ),
)

#: Latencies (ms per request) the remote group is defined at: 20 and 100 are measured by
#: default (``--latency``); 5 keeps the smoke test quick.
REMOTE_LATENCIES_MS = (5, 20, 100)
DEFAULT_LATENCIES_MS = (20, 100)
REMOTE_LIBS = ("z3", "zarr", "zarrobs", "zarr64", "tensorstore")
_REMOTE = (
    # (id stem, title, kind, served store, unit, libs)
    ("r_a_read_blosc", "(A) remote: whole blosc array, ~500 objects", "remote_read", "blosc", "GB/s"),
    ("r_b_read_sharded", "(B) remote: the same array sharded", "remote_read", "sharded", "GB/s"),
    (
        "r_c_random_batch",
        "(C) remote: random inner-chunk reads, one call",
        "remote_random_batch",
        "sharded",
        "reads/s",
    ),
    (
        "r_d_xr_mean",
        "(D) remote: open_dataset(chunks={}) + mean(time), threads",
        "remote_xr_mean",
        "blosc",
        "GB/s",
    ),
    ("r_e_open", "(E) remote: open_dataset with 6 index coordinates", "remote_open", "coords", "opens/s"),
    (
        "r_e_open_consolidated",
        "(E) remote: the same, consolidated",
        "remote_open",
        "coords_consolidated",
        "opens/s",
    ),
)
REMOTE_WORKLOADS = tuple(
    Workload(
        f"{stem}_{ms}ms",
        f"{title}, {ms} ms per request",
        kind,
        unit=unit,
        libs=REMOTE_LIBS,
        remote=store,
        latency_ms=ms,
    )
    for ms in REMOTE_LATENCIES_MS
    for stem, title, kind, store, unit in _REMOTE
)
WORKLOADS += REMOTE_WORKLOADS
#: The remote-write group (``write_workloads``): writes of a 20-variable dataset through an
#: in-process store charging a latency per request; xarray writers only (no tensorstore).
WRITE_LIBS = ("z3", "zarr")
_WRITES = (
    ("w_append", "(W) remote write: append 2 steps to 20 variables", "append"),
    ("w_region", "(W) remote write: region of 2 steps in 20 variables", "region"),
    ("w_overwrite", "(W) remote write: 20 variables overwritten whole (mode=a)", "overwrite"),
)
WRITE_WORKLOADS = tuple(
    Workload(
        f"{stem}_{ms}ms",
        f"{title}, {ms} ms per request",
        "latency_write",
        fixture=how,
        unit="writes/s",
        libs=WRITE_LIBS,
        latency_ms=ms,
    )
    for ms in REMOTE_LATENCIES_MS
    for stem, title, how in _WRITES
)
WORKLOADS += WRITE_WORKLOADS
WORKLOADS_BY_ID = {w.id: w for w in WORKLOADS}


@dataclass(frozen=True)
class Case:
    """One (workload, library) measurement, run in its own process; JSON-serialisable."""

    workload: str
    lib: str
    size: str
    workdir: str
    repeat: int
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict) -> Case:
        return cls(**obj)
