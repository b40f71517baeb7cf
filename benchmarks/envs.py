"""The interpreter the benchmark cases run in.

The newest zarr-python (3.2 and later) needs Python 3.12+, newer than the 3.11 the project
supports as its floor. So by default the suite builds one virtual environment on the newest
Python 3.12+ it can find (``benchmarks/_env/py3.N``, rebuilt when ``pyproject.toml`` changes),
installs this repository with its ``bench`` extra into it, and runs *every* case there:
zarr3_backend and every anchor see the same numpy, numcodecs, dask and xarray.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
ENV_ROOT = HERE / "_env"
MIN_ANCHOR_PYTHON = (3, 12)


def python_version(exe: str) -> tuple[int, int] | None:
    """``(major, minor)`` of an interpreter, or None when it does not run."""
    try:
        out = subprocess.run(
            [exe, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    major, minor = out.stdout.split()
    return int(major), int(minor)


def find_python(minimum: tuple[int, int] = MIN_ANCHOR_PYTHON) -> tuple[str, tuple[int, int]] | None:
    """The newest interpreter >= ``minimum`` on PATH or under pyenv; None if there is none."""
    candidates = []
    for minor in range(20, minimum[1] - 1, -1):
        exe = shutil.which(f"python3.{minor}")
        if exe:
            candidates.append(exe)
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates += sorted(glob.glob(os.path.join(pyenv_root, "versions", "3.*", "bin", "python3")))
    best: tuple[str, tuple[int, int]] | None = None
    for exe in dict.fromkeys(candidates):
        v = python_version(exe)
        if v is not None and v >= minimum and (best is None or v > best[1]):
            best = (exe, v)
    return best


def _stamp() -> str:
    """What the environment was built from: a change here means rebuild."""
    return hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()


def env_python(env_dir: Path) -> Path:
    return env_dir / "bin" / "python"


def ensure_env(base_python: str, version: tuple[int, int], root: Path = ENV_ROOT) -> Path:
    """Build (once) a venv on ``base_python`` with this repo and its bench extra; its python."""
    env_dir = root / f"py{version[0]}.{version[1]}"
    stamp_file = env_dir / ".built-from"
    if stamp_file.exists() and stamp_file.read_text() == _stamp() and env_python(env_dir).exists():
        return env_python(env_dir)
    print(f"building the benchmark environment {env_dir} on Python {version[0]}.{version[1]} ...", flush=True)
    if env_dir.exists():
        shutil.rmtree(env_dir)
    subprocess.run([base_python, "-m", "venv", str(env_dir)], check=True)
    py = str(env_python(env_dir))
    pip = [py, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "install", "-e", f"{REPO}[bench]"], check=True)
    stamp_file.write_text(_stamp())
    return env_python(env_dir)


def resolve_python(choice: str) -> str:
    """The interpreter for ``--python``: ``auto``, ``current`` or a path.

    ``auto`` is this interpreter when it is 3.12+, else the suite's own 3.12+ environment, else
    (no such Python on the machine) this interpreter.
    """
    if choice == "current":
        return sys.executable
    if choice != "auto":
        if python_version(choice) is None:
            raise SystemExit(f"--python {choice!r} does not run")
        return choice
    if sys.version_info[:2] >= MIN_ANCHOR_PYTHON:
        return sys.executable
    found = find_python()
    if found is None:
        print(
            "no Python >= 3.12 found: running in this interpreter, so zarr-python is the newest "
            "release that supports it",
            flush=True,
        )
        return sys.executable
    return str(ensure_env(*found))


def versions_in(python: str, packages: tuple[str, ...]) -> dict[str, str]:
    """Installed versions of ``packages`` as seen by ``python`` (plus the Python version)."""
    code = (
        "import json, platform, sys\n"
        "from importlib.metadata import version, PackageNotFoundError\n"
        "out = {'python': platform.python_version()}\n"
        "for n in sys.argv[1:]:\n"
        "    try: out[n] = version(n)\n"
        "    except PackageNotFoundError: out[n] = 'not installed'\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run([python, "-c", code, *packages], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)
