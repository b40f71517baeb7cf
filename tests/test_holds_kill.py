"""An add killed after each of its file-system steps, holding (or taking, or giving
up) its shared holds of the groups above the variable it adds: another add to that group then
commits, whole, with the killed one's variable whole or absent (after a ``repair`` when the
killed write's marker refuses the new one's planning), and an erase of the group goes on; no
record, shared holds included, is left."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from dying_child import KILL_AFTER_STEP

import zarr3_backend as z3
from zarr3_backend.errors import InterruptedWriteError

REPO = Path(__file__).resolve().parents[1]

CHILD = KILL_AFTER_STEP + textwrap.dedent(
    """
    import numpy as np, xarray as xr
    import zarr3_backend as z3
    ds = xr.Dataset({"x": ("t", np.arange(6.0) + 10)})
    z3.to_zarr(ds, sys.argv[2], group="g", mode="a", encoding={"x": {"chunks": (2,)}})
    print(count[0])
    """
)


def _run(root: Path, kill_after: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(kill_after), str(root)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )


def _make_old(root: Path) -> None:
    z3.to_zarr(xr.Dataset({"a": ("t", np.arange(6.0))}), str(root), group="g", mode="w")


def _stored(root: Path) -> dict[str, list[float]]:
    got = xr.open_dataset(str(root), engine="zarr3", group="g").load()
    return {name: got[name].values.tolist() for name in sorted(got.data_vars)}


def _records(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and ".z3-txn" in p.parts]


@pytest.mark.slow
def test_an_add_killed_at_any_step_leaves_the_others_free_to_add_and_erase(tmp_path):
    probe = tmp_path / "probe"
    _make_old(probe)
    done = _run(probe, 10**9)
    assert done.returncode == 0, done.stderr
    steps = int(done.stdout.split()[-1])
    a, x, y = list(np.arange(6.0)), list(np.arange(6.0) + 10), list(np.arange(6.0) + 20)

    for k in range(1, steps + 1):  # every step (16 or so)
        root = tmp_path / f"k{k}"
        _make_old(root)
        proc = _run(root, k)
        assert proc.returncode in (0, -9), proc.stderr
        add_y = xr.Dataset({"y": ("t", np.arange(6.0) + 20)})
        try:  # the next write finishes the killed one (its Transaction repairs dead writes) ...
            z3.to_zarr(add_y, str(root), group="g", mode="a")
        except InterruptedWriteError:  # ... unless its planning met the killed one's marker
            z3.repair(str(root))
            z3.to_zarr(add_y, str(root), group="g", mode="a")
        assert _stored(root) in ({"a": a, "y": y}, {"a": a, "x": x, "y": y}), k
        assert not _records(root), (k, _records(root))

        z3.to_zarr(xr.Dataset({"b": ("t", np.arange(6.0))}), str(root), group="g", mode="w")
        assert _stored(root) == {"b": a}, k
        assert not _records(root), (k, _records(root))
