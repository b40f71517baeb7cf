"""``to_zarr(mode="a")`` of a DataTree (three nested groups) that overwrites every stored
variable whole and adds new ones, killed after a seeded sample of its file-system steps: the
claims it takes (adds and whole overwrites), its marks and documents applied level by level in
parallel. After each kill a reader sees the old tree, the new one, or a refusal (v3); after
``repair`` the old or the new one (the new one when it was already seen), with no records left.
A v2 store has no marks, so only the state after ``repair`` is checked there."""

from __future__ import annotations

import os
import random
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
NODES = {"/": 0, "/g": 1, "/g/h": 2}


def tree(version: int) -> xr.DataTree:
    """Version 1: two variables per node; version 2: new values, attributes, and one more
    variable per node (added by the write)."""

    def node(n: int) -> xr.Dataset:
        base = np.arange(24.0).reshape(6, 4) + 100 * version + n
        ds = xr.Dataset(
            {f"t{n}": (("time", "x"), base), f"p{n}": (("time", "x"), -base)},
            coords={"time": np.arange(6), "x": np.arange(4) * 0.5},
            attrs={"version": version},
        )
        if version > 1:
            ds[f"new{n}"] = ("x", np.arange(4.0) + version)
        return ds

    return xr.DataTree.from_dict({path: node(n) for path, n in NODES.items()})


CHILD = KILL_AFTER_STEP + textwrap.dedent(
    """
    import zarr3_backend as z3
    sys.path.insert(0, sys.argv[4])
    from test_review11_kill_mode_a import tree
    z3.to_zarr(tree(2), sys.argv[2], mode="a", zarr_format=int(sys.argv[3]))
    print(count[0])
    """
)


def _make_old(root: Path, zarr_format: int) -> None:
    encoding = {path: {f"{v}{n}": {"chunks": (2, 2)} for v in "tp"} for path, n in NODES.items()}
    z3.to_zarr(tree(1), str(root), mode="w", zarr_format=zarr_format, encoding=encoding)


def _run(root: Path, zarr_format: int, kill_after: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            str(kill_after),
            str(root),
            str(zarr_format),
            str(Path(__file__).parent),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )


def _seen(root: Path) -> xr.DataTree | str:
    try:
        return xr.open_datatree(str(root), engine="zarr3").load()
    except InterruptedWriteError:
        return "refused"


def _which(seen: xr.DataTree | str, states: list[xr.DataTree]) -> str | None:
    if isinstance(seen, str):
        return seen
    for name, state in zip(("old", "new"), states, strict=True):
        if seen.identical(state):
            return name
    return None


def _records(root: Path) -> list[str]:
    return [
        str(p)
        for p in root.rglob("*")
        if p.is_file() and (".z3-txn" in p.parts or p.name.startswith(".z3tmp"))
    ]


@pytest.mark.slow
@pytest.mark.parametrize("zarr_format,kills", [(3, 8), (2, 4)])
def test_mode_a_tree_write_killed_after_random_steps(tmp_path, zarr_format, kills):
    probe = tmp_path / "probe"
    _make_old(probe, zarr_format)
    old = _seen(probe)
    done = _run(probe, zarr_format, 10**9)
    assert done.returncode == 0, done.stderr
    steps = int(done.stdout.split()[-1])
    new = _seen(probe)
    assert _which(new, [old, new]) == "new" and not new.identical(old)

    rng = random.Random(f"review11-mode-a-{zarr_format}")
    for k in sorted(rng.sample(range(1, steps + 1), kills)):
        root = tmp_path / f"k{k}"
        _make_old(root, zarr_format)
        proc = _run(root, zarr_format, k)
        assert proc.returncode in (0, -9), proc.stderr
        before = _which(_seen(root), [old, new])
        if zarr_format == 3:
            assert before in ("old", "new", "refused"), (k, before)
        z3.repair(str(root))
        after = _which(_seen(root), [old, new])
        assert after in ("old", "new"), (k, before, after)
        if before == "new":
            assert after == "new", k
        assert not _records(root), (k, _records(root))
