"""Writers killed with SIGKILL at random instants, and at each step of the commit.

After every kill, an open (ours, and zarr-python's) sees exactly the old state, exactly the new
state, or refuses; the next write (or ``repair``) finishes or drops the interrupted one, and then
no temporary record of it is left."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.errors import InterruptedWriteError

REPO = Path(__file__).resolve().parents[1]
SHAPE, CHUNKS, SHARDS = (120, 60), (6, 15), (24, 60)
LAYOUTS = {
    "raw": {"chunks": CHUNKS, "compressors": None},
    "blosc": {"chunks": CHUNKS},
    "sharded": {"chunks": CHUNKS, "shards": SHARDS, "compressors": None},
}


def old_values(shape=SHAPE) -> np.ndarray:
    return np.arange(np.prod(shape), dtype="f8").reshape(shape)


def new_values(shape=SHAPE) -> np.ndarray:
    return -1.0 - old_values(shape)


# The child writes one of the scenarios; ``KILL_AT`` (optional) is "method:text:count": the child
# kills itself with SIGKILL right after the count-th call of that store method whose first
# argument contains the text (a step inside the commit).
CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    import zarr3_backend as z3
    from zarr3_backend.stores import LocalStore

    root, scenario, layout = sys.argv[1:4]
    kill_at = os.environ.get("KILL_AT")
    store = LocalStore(root)
    if kill_at:
        method, text, count = kill_at.split(":")
        count = int(count)
        original = getattr(store, method)
        calls = [0]

        def dying(*args, **kwargs):
            result = original(*args, **kwargs)
            calls[0] += text in str(args[0])
            if calls[0] >= count:
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        setattr(store, method, dying)
    shape = tuple(int(n) for n in sys.argv[4].split(","))
    old = np.arange(np.prod(shape), dtype="f8").reshape(shape)
    new = -1.0 - old
    a = z3.open_array(store, path="x", mode="r+")
    print("ready", flush=True)
    if scenario == "array":
        a[...] = new
    elif scenario == "region":
        a[7:113, 3:58] = new[7:113, 3:58]
    elif scenario == "append":
        a.append(new[:30])
    print("done", flush=True)
    """
)


def make_old(root: Path, layout: str) -> None:
    a = z3.create_array(str(root), path="x", shape=SHAPE, dtype="f8", fill_value=0.0, **LAYOUTS[layout])
    a[...] = old_values()
    z3.consolidate_metadata(str(root))


def expected_states(scenario: str) -> list[np.ndarray]:
    old, new = old_values(), new_values()
    if scenario == "array":
        return [old, new]
    if scenario == "region":
        mixed = old.copy()
        mixed[7:113, 3:58] = new[7:113, 3:58]
        return [old, mixed]
    if scenario == "append":
        return [old, np.concatenate([old, new[:30]])]
    raise AssertionError(scenario)


def run_child(root: Path, scenario: str, layout: str, *, kill_after: float | None = None, env=None):
    """Start the writer; SIGKILL it ``kill_after`` seconds after it is ready. Returns how long
    the write ran (None when it was killed) ."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root), scenario, layout, ",".join(map(str, SHAPE))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    start = time.perf_counter()
    if kill_after is not None:
        time.sleep(kill_after)
        proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    took = time.perf_counter() - start
    if proc.returncode == 0:
        assert out.strip() == "done", err
        return took
    assert proc.returncode == -signal.SIGKILL, err
    return None


def state_seen(root: Path) -> str:
    """What a fresh open sees: 'refused', or the index of the expected state it matches."""
    try:
        a = z3.open_array(str(root), path="x", mode="r")
        values = a[...]
    except InterruptedWriteError:
        return "refused"
    return values


def classify(values, states) -> int:
    for i, s in enumerate(states):
        if values.shape == s.shape and np.array_equal(values, s):
            return i
    raise AssertionError(f"a state that is neither old nor new: shape {values.shape}")


def zarr_python_sees(root: Path, states) -> str:
    zarr = pytest.importorskip("zarr")
    try:
        values = zarr.open_array(str(root), path="x", mode="r")[...]
    except Exception:  # zarr-python refuses the marked document (an unknown must_understand field)
        return "refused"
    return str(classify(values, states))


def leftovers(root: Path) -> list[str]:
    """Temporary files and transaction records (files; an emptied directory does not count)."""
    return [
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and (p.name.startswith(".z3tmp-") or ".z3-txn" in p.parts)
    ]


def check_after_kill(root: Path, scenario: str, must_finish: bool = False) -> str:
    states = expected_states(scenario)
    seen = state_seen(root)
    outcome = "refused" if isinstance(seen, str) else ("old", "new")[classify(seen, states)]
    zp = zarr_python_sees(root, states)
    if outcome != "refused":
        assert zp == str(("old", "new").index(outcome)), (outcome, zp)
    # the next writer finishes or drops the interrupted write
    z3.repair(str(root))
    after = state_seen(root)
    assert not isinstance(after, str), "still refused after repair"
    final = ("old", "new")[classify(after, states)]
    if outcome == "new" or must_finish:
        assert final == "new", outcome
    assert zarr_python_sees(root, states) == str(("old", "new").index(final))
    assert not leftovers(root), leftovers(root)  # no staging, no temporary file of the killed writer
    return outcome if outcome == "refused" else final


SCENARIOS = [("array", "raw"), ("region", "blosc"), ("append", "sharded"), ("array", "sharded")]


@pytest.mark.parametrize("scenario,layout", SCENARIOS)
def test_kill_inside_the_commit_window(tmp_path, scenario, layout):
    """Killed after the manifest (readers still see the old state), after the first mark,
    part-way through the moves, and after the cleanup: refused (or old) until repaired, then
    exactly the new state."""
    for kill_at in [
        "set:manifest.json:1",
        "set_if:zarr.json:1",
        "_merge_dir::2",  # part-way through putting the values in place
        "move_prefix::1",  # every value in place, no document written yet
        "erase_prefix:.z3-txn:1",
    ]:
        root = tmp_path / kill_at.replace(":", "-")
        make_old(root, layout)
        assert run_child(root, scenario, layout, env={"KILL_AT": kill_at}) is None
        outcome = check_after_kill(root, scenario)
        assert outcome in ("refused", "new"), (kill_at, outcome)


@pytest.mark.slow
@pytest.mark.parametrize(
    "scenario,layout", [(s, lay) for s in ("array", "region", "append") for lay in LAYOUTS]
)
def test_kill_at_random_instants(tmp_path, scenario, layout):
    """Six SIGKILLs at random instants of one write (9 cases: 54 kills): only old, new, or a
    refusal that repair turns into old or new."""
    rng = random.Random(f"{scenario}-{layout}")
    probe = tmp_path / "probe"
    make_old(probe, layout)
    took = run_child(probe, scenario, layout)
    assert took is not None
    outcomes = []
    for i in range(6):
        root = tmp_path / f"k{i}"
        make_old(root, layout)
        when = rng.uniform(0, took * 1.2)
        if run_child(root, scenario, layout, kill_after=when) is None:
            outcomes.append(check_after_kill(root, scenario))
        else:
            outcomes.append("finished")
            assert classify(state_seen(root), expected_states(scenario)) == 1
    assert outcomes


def test_zarr_python_refuses_a_marked_array(tmp_path):
    """The marker is spec-conforming: an implementation that does not know it must refuse."""
    zarr = pytest.importorskip("zarr")
    make_old(tmp_path, "raw")
    doc = json.loads((tmp_path / "x" / "zarr.json").read_text())
    doc["zarr3_backend.write_in_progress"] = {"must_understand": True, "id": "t", "writes": {}}
    (tmp_path / "x" / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(Exception):  # noqa: B017 - any refusal will do; what matters is no data
        zarr.open_array(str(tmp_path), path="x", mode="r")[...]
    with pytest.raises(InterruptedWriteError):
        z3.open_array(str(tmp_path), path="x")


# ---- to_zarr: create, mode="w", append and region writes ---------------------------------------
XR_CHILD = textwrap.dedent(
    """
    import sys
    import numpy as np
    import xarray as xr
    import zarr3_backend as z3
    sys.path.insert(0, sys.argv[4])
    from test_fault_injection import dataset, same_layout, xr_encoding

    root, scenario, layout = sys.argv[1:4]
    print("ready", flush=True)
    new = dataset(new=True)
    if scenario == "create" or scenario == "w":
        z3.to_zarr(new, root, mode="w", encoding=xr_encoding(layout, new))
    elif scenario == "append":
        z3.to_zarr(same_layout(new).isel(time=slice(0, 24)).assign_coords(time=np.arange(120, 144)), root, append_dim="time")
    elif scenario == "region":
        z3.to_zarr(same_layout(new).isel(time=slice(24, 96)).drop_vars(["time", "label", "x"]), root, region={"time": slice(24, 96)})
    print("done", flush=True)
    """
)


def dataset(new: bool = False):
    """Two variables and coordinates (the new one differs in values, names and attributes)."""
    import xarray as xr

    values = new_values() if new else old_values()
    ds = xr.Dataset(
        {"t2m": (("time", "x"), values), "tp": (("time", "x"), values.astype("f4") * 2)},
        coords={"time": np.arange(SHAPE[0]), "x": np.arange(SHAPE[1]) * 0.5, "label": "0001"},
        attrs={"version": 2 if new else 1},
    )
    return ds.rename({"tp": "precip"}) if new else ds


def same_layout(new):
    """The new values in the old dataset's variables and attributes (what appends and region
    writes bring)."""
    return new.rename({"precip": "tp"}).assign_attrs(version=1)


def xr_encoding(layout: str, ds) -> dict:
    enc = {"chunks": CHUNKS, **({"shards": SHARDS} if layout == "sharded" else {})}
    if layout != "blosc":
        enc["compressors"] = None
    return {name: dict(enc) for name in ("t2m", "tp", "precip") if name in ds}


def xr_states(scenario: str):
    old, new = dataset(), dataset(new=True)
    if scenario == "create":
        return [None, new]
    if scenario == "w":
        return [old, new]
    same = same_layout(new)
    if scenario == "append":
        return [
            old,
            xr.concat([old, same.isel(time=slice(0, 24)).assign_coords(time=np.arange(120, 144))], "time"),
        ]
    mixed = old.copy(deep=True)
    mixed["t2m"][24:96] = same["t2m"][24:96].values
    mixed["tp"][24:96] = same["tp"][24:96].values
    return [old, mixed]


def xr_seen(root: Path, engine: str):
    try:
        return xr.open_dataset(str(root), engine=engine).load()
    except InterruptedWriteError:
        return "refused"
    except Exception as e:
        if engine == "zarr3" and not isinstance(e, FileNotFoundError | KeyError):
            raise
        return "refused" if engine == "zarr" and root.exists() and any(root.iterdir()) else None


def xr_classify(seen, states) -> int:
    for i, s in enumerate(states):
        if (s is None and seen is None) or (s is not None and seen is not None and seen.identical(s)):
            return i
    raise AssertionError(f"neither old nor new: {seen}")


def make_old_xr(root: Path, scenario: str, layout: str) -> None:
    if scenario != "create":
        old = dataset()
        z3.to_zarr(old, str(root), mode="w", encoding=xr_encoding(layout, old))


def run_xr_child(root: Path, scenario: str, layout: str, kill_after: float | None):
    proc = subprocess.Popen(
        [sys.executable, "-c", XR_CHILD, str(root), scenario, layout, str(Path(__file__).parent)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    start = time.perf_counter()
    if kill_after is not None:
        time.sleep(kill_after)
        proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        assert out.strip() == "done", err
        return time.perf_counter() - start
    assert proc.returncode == -signal.SIGKILL, err
    return None


def check_xr_after_kill(root: Path, scenario: str) -> str:
    states = xr_states(scenario)
    seen = xr_seen(root, "zarr3")
    outcome = "refused" if isinstance(seen, str) else ("old", "new")[xr_classify(seen, states)]
    theirs = xr_seen(root, "zarr")
    if outcome != "refused" and not isinstance(theirs, str):
        assert xr_classify(theirs, states) == ("old", "new").index(outcome)
    z3.repair(str(root))
    after = xr_seen(root, "zarr3")
    assert not isinstance(after, str), "still refused after repair"
    final = ("old", "new")[xr_classify(after, states)]
    assert not root.exists() or not leftovers(root), leftovers(root)
    return outcome if outcome == "refused" else final


XR_CASES = [(s, lay) for s in ("create", "w", "append", "region") for lay in ("raw", "blosc", "sharded")]


@pytest.mark.slow
@pytest.mark.parametrize("scenario,layout", XR_CASES)
def test_to_zarr_killed_at_random_instants(tmp_path, scenario, layout):
    """to_zarr killed at five random instants of each case (12 cases: 60 kills): only the old
    state (no store at all, for a create), the new one, or a refusal that repair resolves."""
    rng = random.Random(f"xr-{scenario}-{layout}")
    probe = tmp_path / "probe"
    make_old_xr(probe, scenario, layout)
    took = run_xr_child(probe, scenario, layout, None)
    assert took is not None
    assert xr_classify(xr_seen(probe, "zarr3"), xr_states(scenario)) == 1
    for i in range(5):
        root = tmp_path / f"k{i}"
        make_old_xr(root, scenario, layout)
        if run_xr_child(root, scenario, layout, rng.uniform(0, took * 1.2)) is not None:
            assert xr_classify(xr_seen(root, "zarr3"), xr_states(scenario)) == 1
            continue
        check_xr_after_kill(root, scenario)


def test_to_zarr_mode_w_killed_inside_its_commit(tmp_path):
    """A mode="w" write killed part-way through putting its values in place: every reader
    refuses, then repair gives exactly the new dataset (the old one's variables are gone)."""
    make_old_xr(tmp_path, "w", "raw")
    child = XR_CHILD.replace('print("ready", flush=True)', 'print("ready", flush=True)\n' + KILL_HOOK)
    proc = subprocess.run(
        [sys.executable, "-c", child, str(tmp_path), "w", "raw", str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert xr_seen(tmp_path, "zarr3") == "refused"
    assert xr_seen(tmp_path, "zarr") == "refused"
    z3.repair(str(tmp_path))
    assert xr_seen(tmp_path, "zarr3").identical(dataset(new=True))
    assert not leftovers(tmp_path)


# Dies after the second directory of values is merged into place, inside the commit window.
KILL_HOOK = textwrap.dedent(
    """
    import os, signal
    from zarr3_backend.stores import LocalStore
    _merge, _n = LocalStore._merge_dir, [0]
    def _dying_merge(self, *args):
        _merge(self, *args)
        _n[0] += 1
        if _n[0] >= 2:
            os.kill(os.getpid(), signal.SIGKILL)
    LocalStore._merge_dir = _dying_merge
    """
)
