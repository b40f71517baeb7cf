"""The package with its base dependencies only (the README's quick start installs no extra):
importing it, and a local write and read through xarray, need none of the extras' modules."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: Modules of the optional extras (test, obstore, icechunk, ...) the base install lacks.
EXTRAS = ("aiohttp", "s3fs", "obstore", "zarr", "tensorstore", "icechunk", "requests", "moto")


def test_the_package_works_without_any_extra(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys
        for name in {EXTRAS!r}:
            sys.modules[name] = None  # "import name" raises ImportError, as when not installed
        import numpy as np, xarray as xr
        import zarr3_backend as z3
        from zarr3_backend import stores
        ds = xr.Dataset({{"t": (("x",), np.arange(6.0))}})
        z3.to_zarr(ds, sys.argv[1], encoding={{"t": {{"chunks": (2,), "shards": (4,)}}}})
        back = xr.open_dataset(sys.argv[1], engine="zarr3").load()
        assert back.identical(ds), back
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "s.zarr")],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
