"""zarr-python 2.18 (and 3.4) as test oracles: session fixtures ``zarr218`` and ``zarr34`` running
snippets in cached virtual environments with pinned versions: ``zarr==2.18.7`` cannot share an
environment with zarr 3, and zarr 3.4 needs Python >= 3.12 (found on PATH or under pyenv).

Each environment is built once per machine under ``$XDG_CACHE_HOME`` (or ``~/.cache``)
``/zarr3_backend-tests/<pinned versions>``: in a temporary sibling folder, checked, then renamed
into place under a file lock, so a run killed half-way leaves nothing that a later run uses. A
failing ``pip install`` (or no interpreter of the needed version) raises ``Zarr218Error`` with
the output (a test ERROR, never a skip).

Snippets exchange values with this process as JSON, with numpy arrays (anywhere in the
arguments or the result) carried in an ``.npz`` file beside it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest


@dataclass(frozen=True)
class OracleEnv:
    """One pinned oracle environment: exact ``name==version`` requirements and the Python
    (``"3.12"``) to build it with; ``None`` is the running interpreter."""

    requirements: tuple[str, ...]
    python: str | None = None

    def pins(self) -> dict[str, str]:
        """``{distribution name: version}`` of the requirements."""
        return dict(r.split("==", 1) for r in self.requirements)

    def python_version(self) -> str:
        """The ``major.minor`` version the environment runs."""
        return self.python or f"{sys.version_info.major}.{sys.version_info.minor}"


#: The newest zarr-python 2.18 (Python >= 3.11) and the newest numcodecs it accepts (< 0.16).
ZARR_VERSION = "2.18.7"
NUMCODECS_VERSION = "0.15.2"
REQUIREMENTS = (f"zarr=={ZARR_VERSION}", f"numcodecs=={NUMCODECS_VERSION}")
ZARR218_ENV = OracleEnv(REQUIREMENTS)
#: zarr-python 3.4 (Python >= 3.12) and the numcodecs it resolves to.
ZARR34_ENV = OracleEnv(("zarr==3.4.2", "numcodecs==0.17.1"), python="3.12")
#: Written into a finished environment last, before it is renamed into place.
READY_MARKER = "zarr3_backend-ready.json"


class Zarr218Error(RuntimeError):
    """An oracle environment could not be built, or a snippet run in it failed."""


# Packing values for the trip between the two interpreters: one source, run on both sides (the
# environment has numpy but neither this package nor pytest).
_TRANSPORT = r'''
import base64
import json
import numpy as np


def pack(value, arrays):
    """``value`` as JSON: numpy arrays become references into ``arrays``, complex numbers and
    bytes tagged objects."""
    if isinstance(value, np.ndarray):
        key = f"a{len(arrays)}"
        arrays[key] = value
        return {"__ndarray__": key}
    if isinstance(value, np.generic):
        return pack(value.item(), arrays)
    if isinstance(value, complex):
        return {"__complex__": [value.real, value.imag]}
    if isinstance(value, bytes):
        return {"__bytes__": base64.b64encode(value).decode()}
    if isinstance(value, dict):
        return {str(k): pack(v, arrays) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [pack(v, arrays) for v in value]
    return value


def unpack(value, arrays):
    """The inverse of ``pack``."""
    if isinstance(value, dict):
        if set(value) == {"__ndarray__"}:
            return arrays[value["__ndarray__"]]
        if set(value) == {"__complex__"}:
            return complex(*value["__complex__"])
        if set(value) == {"__bytes__"}:
            return base64.b64decode(value["__bytes__"])
        return {k: unpack(v, arrays) for k, v in value.items()}
    if isinstance(value, list):
        return [unpack(v, arrays) for v in value]
    return value


def save(value, base):
    """Write ``value`` as ``base.json`` (+ ``base.npz`` holding its arrays)."""
    arrays = {}
    doc = pack(value, arrays)
    if arrays:
        np.savez(base + ".npz", **arrays)
    with open(base + ".json", "w") as f:
        json.dump({"value": doc, "arrays": bool(arrays)}, f)


def load(base):
    """Read what ``save`` wrote (object arrays come back through numpy's pickle)."""
    with open(base + ".json") as f:
        doc = json.load(f)
    arrays = {}
    if doc["arrays"]:
        with np.load(base + ".npz", allow_pickle=True) as npz:
            arrays = {k: npz[k] for k in npz.files}
    return unpack(doc["value"], arrays)
'''

_DRIVER = (
    _TRANSPORT
    + r"""
import sys

_inp, _out = sys.argv[1], sys.argv[2]
_payload = load(_inp)
_ns = {"__name__": "__zarr218__", "args": _payload["args"]}
exec(compile(_payload["code"], "<zarr218 snippet>", "exec"), _ns)
save(_ns.get("result"), _out)
"""
)

_transport: dict[str, Any] = {}
exec(_TRANSPORT, _transport)  # the parent's copy of the same pack/unpack/save/load

#: Run in the environment by ``Zarr218.write`` and ``Zarr34.write``: ``args = [root, spec]``. One
#: writer for both versions: zarr 3's ``zarr.create`` keeps 2.18's arguments; the branches are the
#: store class, ``zarr_format=2`` and where ``write_empty_chunks`` goes.
_WRITE = r"""
import warnings

import numcodecs
import zarr

warnings.simplefilter("ignore")
root, spec = args
ZARR3 = int(zarr.__version__.split(".")[0]) >= 3
store = zarr.storage.LocalStore(root) if ZARR3 else zarr.DirectoryStore(root)
v2 = {"zarr_format": 2} if ZARR3 else {}


def codec(config):
    return None if config is None else numcodecs.get_codec(dict(config))


def dtype_of(spec):  # a type string, or a structured dtype as [name, type(, shape)] lists
    if isinstance(spec, list):
        return [(f[0], dtype_of(f[1]), *[tuple(x) for x in f[2:]]) for f in spec]
    return spec


def write(path, spec):
    if "members" in spec:
        group = zarr.open_group(store, path=path, mode="a", **v2)
        group.attrs.update(spec.get("attrs") or {})
        for name, member in spec["members"].items():
            write(f"{path}/{name}" if path else name, member)
        return
    filters = [codec(f) for f in spec.get("filters") or []]
    object_codec = None
    dtype = dtype_of(spec["dtype"])
    if spec["dtype"] in ("object", "|O", "O") and filters:
        object_codec, filters = filters[0], filters[1:]
        if ZARR3:  # zarr 3 takes no object codec: the data type names it (and adds it as a filter)
            dtype = {"vlen-utf8": zarr.dtype.VariableLengthUTF8, "vlen-bytes": zarr.dtype.VariableLengthBytes}[
                object_codec.codec_id
            ]()
            object_codec = None
    empty = spec.get("write_empty_chunks", True)
    z = zarr.create(
        store=store,
        path=path or None,
        shape=spec["shape"],
        chunks=spec.get("chunks", True),
        dtype=dtype,
        compressor=codec(spec.get("compressor")),
        filters=filters or None,
        object_codec=object_codec,
        order=spec.get("order", "C"),
        fill_value=spec.get("fill", 0),
        dimension_separator=spec.get("dimension_separator", "."),
        overwrite=True,
        **({"config": {"write_empty_chunks": empty}, **v2} if ZARR3 else {"write_empty_chunks": empty}),
    )
    z.attrs.update(spec.get("attrs") or {})
    if spec.get("data") is not None:
        z[...] = spec["data"]


write("", spec)
if spec.get("consolidate"):
    zarr.consolidate_metadata(store)
result = None
"""

#: Run by ``Zarr218.read``: ``args = [root, consolidated]``.
_READ = r"""
import zarr

root, consolidated = args
node = zarr.open_consolidated(root, mode="r") if consolidated else zarr.open(root, mode="r")
result = {}
if isinstance(node, zarr.Array):
    result[""] = node[...]
else:
    node.visititems(lambda name, obj: result.update({name: obj[...]}) if isinstance(obj, zarr.Array) else None)
"""

#: Run by ``Zarr218.info``: ``args = [root, consolidated]``.
_INFO = r"""
import json
import zarr

root, consolidated = args
node = zarr.open_consolidated(root, mode="r") if consolidated else zarr.open(root, mode="r")


def describe(obj):
    out = {"attrs": obj.attrs.asdict()}
    if isinstance(obj, zarr.Array):
        fill = obj.fill_value
        out.update(
            kind="array",
            shape=list(obj.shape),
            chunks=list(obj.chunks),
            dtype=obj.dtype.str if obj.dtype.fields is None else obj.dtype.descr,
            order=obj.order,
            fill_value=fill.tolist() if hasattr(fill, "tolist") else fill,
            compressor=obj.compressor.get_config() if obj.compressor else None,
            filters=[f.get_config() for f in obj.filters or []],
            dimension_separator=obj._dimension_separator,
        )
    else:
        out["kind"] = "group"
    return json.loads(json.dumps(out, default=str))


result = {"": describe(node)}
if not isinstance(node, zarr.Array):
    node.visititems(lambda name, obj: result.update({name: describe(obj)}))
"""

#: Run by ``Zarr34.read``: ``args = [root, array paths or None, consolidated or None]``.
_READ_ZARR3 = r"""
import warnings

import zarr

warnings.simplefilter("ignore")
root, paths, consolidated = args
node = None
if consolidated is not None:  # through the group, whose members come from .zmetadata if asked
    node = zarr.open_group(root, mode="r", use_consolidated=consolidated)
if paths is None:
    node = node or zarr.open(root, mode="r")
    if isinstance(node, zarr.Array):
        paths = [""]
    else:
        paths = [name for name, obj in node.members(max_depth=None) if isinstance(obj, zarr.Array)]
result = {}
for path in paths:
    try:
        if isinstance(node, zarr.Group):
            result[path] = node[path][...]
        else:
            result[path] = zarr.open_array(root, path=path, mode="r")[...]
    except Exception as e:
        result[path] = f"{type(e).__name__}: {e}"
"""


def cache_root() -> Path:
    """Where test environments are kept: ``$XDG_CACHE_HOME`` or ``~/.cache``, then our folder."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "zarr3_backend-tests"


def env_dir(env: OracleEnv = ZARR218_ENV) -> Path:
    """The environment's folder, named by every pinned version and its Python's."""
    pins = "-".join(f"{name}-{version}" for name, version in env.pins().items())
    return cache_root() / f"{pins}-py{env.python_version().replace('.', '')}"


def find_python(version: str) -> str:
    """An interpreter of ``version`` (``"3.12"``): this one, ``python3.12`` on PATH, or a
    pyenv installation; raises ``Zarr218Error`` when there is none."""
    if version == f"{sys.version_info.major}.{sys.version_info.minor}":
        return sys.executable
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    candidates = [
        shutil.which(f"python{version}"),
        *sorted(map(str, pyenv.glob(f"{version}.*/bin/python{version}"))),
    ]
    for python in filter(None, candidates):
        probe = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            env=_child_env(),
        )
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return python
    raise Zarr218Error(f"no Python {version} interpreter: looked for python{version} on PATH and in {pyenv}")


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _child_env() -> dict[str, str]:
    """This process's environment without what would let the parent's packages leak in."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _check(venv: Path, env: OracleEnv) -> bool:
    """Whether ``venv`` is finished and still runs the pinned versions (a changed base
    interpreter breaks a virtual environment)."""
    if not (venv / READY_MARKER).is_file():
        return False
    probe = "import json, sys, importlib.metadata as m; print(json.dumps({d: m.version(d) for d in sys.argv[1:]}))"
    try:
        out = subprocess.run(
            [str(_python(venv)), "-c", probe, *env.pins()],
            capture_output=True,
            text=True,
            env=_child_env(),
            timeout=120,
        )
    except OSError:
        return False
    return out.returncode == 0 and json.loads(out.stdout) == env.pins()


def _build(target: Path, env: OracleEnv) -> None:
    """Build the environment in a temporary sibling of ``target`` and rename it into place."""
    python = find_python(env.python_version())
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.building-", dir=target.parent))
    try:
        # no pip inside the environment: this interpreter's pip installs into it (faster)
        pip = [sys.executable, "-m", "pip", "--python", str(_python(tmp))]
        steps = [
            [python, "-m", "venv", "--without-pip", str(tmp)],
            [*pip, "install", "--no-input", *env.requirements],
        ]
        for cmd in steps:
            done = subprocess.run(cmd, capture_output=True, text=True, env=_child_env())
            if done.returncode != 0:
                raise Zarr218Error(
                    f"building the test environment {target.name} failed: {' '.join(cmd)} "
                    f"exited {done.returncode}\n--- stdout ---\n{done.stdout}\n--- stderr ---\n{done.stderr}"
                )
        freeze = subprocess.run([*pip, "freeze"], capture_output=True, text=True, env=_child_env())
        (tmp / READY_MARKER).write_text(
            json.dumps({"requirements": list(env.requirements), "freeze": freeze.stdout.split()})
        )
        if not _check(tmp, env):
            raise Zarr218Error(f"the environment built in {tmp} does not hold {', '.join(env.requirements)}")
        if target.exists():  # a stale one (its marker or interpreter gone): replace it
            shutil.rmtree(target)
        os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ensure_env(env: OracleEnv = ZARR218_ENV) -> Path:
    """The path of a ready environment, built now (under a lock shared by concurrent test
    runs) if there is none."""
    target = env_dir(env)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _check(target, env):
            # what a killed build left (never used; no build runs while the lock is held)
            for leftover in target.parent.glob(f".{target.name}.building-*"):
                shutil.rmtree(leftover, ignore_errors=True)
            _build(target, env)
    return target


class Oracle:
    """Runs code in an oracle environment's own interpreter (one process per call)."""

    def __init__(self, venv: Path, workdir: Path) -> None:
        self.venv = venv
        self.python = _python(venv)
        self._workdir = workdir
        self._calls = 0

    def run(self, code: str, *args: Any) -> Any:
        """Run ``code`` with ``args`` (JSON values and numpy arrays) bound to ``args``; returns
        what it assigns to ``result`` (same kinds). Raises ``Zarr218Error`` with its stderr."""
        self._calls += 1
        base = str(self._workdir / f"call{self._calls}")
        _transport["save"]({"code": code, "args": list(args)}, base + "-in")
        done = subprocess.run(
            [str(self.python), "-c", _DRIVER, base + "-in", base + "-out"],
            capture_output=True,
            text=True,
            env=_child_env(),
        )
        if done.returncode != 0:
            raise Zarr218Error(f"snippet failed in {self.venv.name}:\n{done.stderr}")
        return _transport["load"](base + "-out")


class Zarr218(Oracle):
    """zarr-python 2.18: writes and reads Zarr v2."""

    def write(self, path: str | os.PathLike[str], spec: Mapping[str, Any]) -> None:
        """Write a v2 node at ``path`` with zarr 2.18. An array spec has ``dtype``, ``shape``
        and optionally ``chunks``, ``compressor`` and ``filters`` (numcodecs configs; for an
        object dtype the first filter is the object codec), ``order``, ``dimension_separator``,
        ``fill``, ``attrs``, ``data`` (numpy) and ``write_empty_chunks``; a group spec has
        ``members`` (name -> spec) and ``attrs``. ``consolidate`` on the root writes
        ``.zmetadata``."""
        self.run(_WRITE, os.fspath(path), dict(spec))

    def read(self, path: str | os.PathLike[str], consolidated: bool = False) -> dict[str, np.ndarray]:
        """Every array of the v2 hierarchy (or the single array) at ``path`` as zarr 2.18 reads
        it, by path inside it (``""`` for a root array); through ``.zmetadata`` if asked."""
        return self.run(_READ, os.fspath(path), consolidated)

    def info(self, path: str | os.PathLike[str], consolidated: bool = False) -> dict[str, dict[str, Any]]:
        """What zarr 2.18 sees of every node at ``path`` (``""`` the root): ``kind``, ``attrs``
        and, for arrays, ``shape``, ``chunks``, ``dtype``, ``order``, ``fill_value``,
        ``compressor``, ``filters`` (numcodecs configs) and ``dimension_separator``."""
        return self.run(_INFO, os.fspath(path), consolidated)


class Zarr34(Oracle):
    """zarr-python 3.4: writes Zarr v2, reads Zarr v2 and v3."""

    def write(self, path: str | os.PathLike[str], spec: Mapping[str, Any]) -> None:
        """Write a v2 node at ``path`` with zarr 3.4 (``zarr_format=2``) from a spec as
        ``Zarr218.write`` takes it (the same writer)."""
        self.run(_WRITE, os.fspath(path), dict(spec))

    def read(
        self, path: str | os.PathLike[str], arrays: list[str] | None = None, consolidated: bool | None = None
    ) -> dict[str, Any]:
        """The arrays at ``arrays`` (paths inside the node at ``path``; default: every array
        of the hierarchy, ``""`` for a root array) as zarr 3.4 reads them; an array it cannot
        read maps to its error, ``"<ExceptionType>: <message>"``, instead. ``consolidated``
        reads through the group at ``path`` (with or without its consolidated metadata)."""
        return self.run(_READ_ZARR3, os.fspath(path), arrays, consolidated)


@pytest.fixture(scope="session")
def zarr218(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Zarr218]:
    """zarr-python 2.18 in a cached virtual environment (built on first use)."""
    yield Zarr218(ensure_env(ZARR218_ENV), tmp_path_factory.mktemp("zarr218-calls"))


@pytest.fixture(scope="session")
def zarr34(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Zarr34]:
    """zarr-python 3.4 on Python 3.12 in a cached virtual environment (built on first use)."""
    yield Zarr34(ensure_env(ZARR34_ENV), tmp_path_factory.mktemp("zarr34-calls"))
