"""Smoke tests of the benchmark suite (``python -m benchmarks``) on a tiny size, for our library.

No timing assertions: only that the runner produces a well-formed table and JSON, that every
result it reports was checked against the source, and that a wrong result is caught.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from benchmarks import adapters, data, envs, run
from benchmarks.config import SIZES, WORKLOADS, WORKLOADS_BY_ID, Case
from benchmarks.report import add_ratios, markdown_table, text_table
from benchmarks.worker import run_case

TINY = SIZES["tiny"]
FAST = [w.id for w in WORKLOADS if not w.distributed]


def _run(tmp_path, *extra):
    out = tmp_path / "results"
    md = tmp_path / "table.md"
    argv = [
        "--size",
        "tiny",
        "--libs",
        "z3",
        "--repeat",
        "1",
        "--workdir",
        str(tmp_path / "work"),
        "--out",
        str(out),
        "--markdown",
        str(md),
        "--python",
        "current",
        *extra,
    ]
    report = run.main(argv)
    files = list(out.glob("tiny-*.json"))
    assert len(files) == 1
    return report, json.loads(files[0].read_text()), md.read_text()


def test_suite_runs_every_workload_for_z3(tmp_path, capsys):
    report, on_disk, md = _run(tmp_path, "--inprocess", "--workloads", ",".join(FAST))
    assert on_disk["results"] == json.loads(json.dumps(report["results"]))
    rows = on_disk["results"]
    expected = {
        (w.id, lib)
        for w in WORKLOADS
        if not w.distributed
        for lib in w.libs
        if lib in ("z3", "numpy", "file")
    }
    assert {(r["workload"], r["lib"]) for r in rows} == expected
    for r in rows:
        assert r["ok"], r
        assert r["value"] > 0 and len(r["wall_s"]) == 1 and r["cpu_cores"] >= 0
        assert r["best"] >= r["value"] and r["cpu_per_unit"] >= 0
        assert len(r["minor_faults"]) == 1 and r["faults_per_unit"] >= 0
        assert r["unit"] == ("reads/s" if r["workload"].startswith("e_") else "GB/s")
    meta = on_disk["meta"]
    assert meta["size"] == "tiny" and meta["versions"]["zarr3_backend"] != "not installed"
    assert meta["eviction_check"]["cold_s"] > 0
    printed = capsys.readouterr().out
    for w in FAST:
        assert w in printed and w in md
    assert md.count("\n") == len(rows) + 2  # header, rule, one line per case


def test_subprocess_worker_reports_memory(tmp_path):
    _, on_disk, _ = _run(tmp_path, "--workloads", "c_read_raw_cold", "--no-reference")
    (row,) = on_disk["results"]
    assert row["ok"], row
    assert row["lib"] == "z3" and row["peak_rss_mib"] >= row["baseline_rss_mib"] > 0
    assert row["mem_ratio"] > 0


@pytest.mark.slow
@pytest.mark.distributed
def test_distributed_to_zarr(tmp_path):
    _, on_disk, _ = _run(tmp_path, "--workloads", "h_to_zarr_distributed", "--no-reference")
    (row,) = on_disk["results"]
    assert row["ok"], row


def test_wrong_read_result_is_caught(tmp_path, monkeypatch):
    workdir = tmp_path / "work"
    data.ensure_source(workdir, TINY)
    data.ensure_fixtures(workdir, TINY, {"raw"})
    real_read = adapters.Z3Adapter.read

    def corrupt(self, path, name=""):
        out = real_read(self, path, name)
        out[1, 2, 3] += 1
        return out

    monkeypatch.setattr(adapters.Z3Adapter, "read", corrupt)
    row = run_case(Case("c_read_raw_warm", "z3", "tiny", str(workdir), 1))
    assert not row["ok"] and "WRONG RESULT" in row["error"] and "fixture_raw.zarr" in row["error"]
    assert "FAILED" in text_table([row])


def test_missing_library_is_skipped_not_failed(tmp_path, monkeypatch):
    def missing(lib):
        raise ImportError(f"No module named {lib!r}")

    monkeypatch.setattr(adapters, "get_adapter", missing)
    data.ensure_source(tmp_path, TINY)
    row = run_case(Case("a_write_raw", "tensorstore", "tiny", str(tmp_path), 1))
    assert row == {**row, "ok": False, "skipped": True}
    assert "tensorstore" in row["error"]
    assert "skipped" in markdown_table([row])


def test_ratios_are_to_the_fastest_anchor():
    rows = [
        {"workload": "a_write_raw", "lib": "zarr", "unit": "GB/s", "ok": True, "value": 2.0},
        {"workload": "a_write_raw", "lib": "tensorstore", "unit": "GB/s", "ok": True, "value": 4.0},
        {"workload": "a_write_raw", "lib": "zarrs", "unit": "GB/s", "ok": False, "error": "x"},
        {"workload": "a_write_raw", "lib": "z3", "unit": "GB/s", "ok": True, "value": 3.0},
    ]
    best = add_ratios(rows)
    assert best == {"a_write_raw": {"best_anchor": "tensorstore", "best_value": 4.0}}
    assert [r["ratio"] for r in rows] == [0.5, 1.0, None, 0.75]


def test_source_is_deterministic_and_compressible():
    a, b = data.make_source(TINY), data.make_source(TINY)
    assert a.dtype == np.float32 and a.shape == TINY.shape and np.array_equal(a, b)
    assert len(np.unique(a)) > 500  # not trivially compressible
    assert np.all(a * 16 == np.round(a * 16))  # quantised: blosc's byte shuffle has work to do


def test_evict_and_warm_touch_every_file(tmp_path):
    root = tmp_path / "store"
    (root / "c" / "0").mkdir(parents=True)
    for name in ("zarr.json", "c/0/0", "c/0/1"):
        (root / name).write_bytes(os.urandom(1000))
    assert data.evict(root) == 3
    data.warm(root)
    assert data.evict(root / "zarr.json") == 1


def test_env_python_choice(tmp_path):
    import sys

    assert envs.resolve_python("current") == sys.executable
    assert envs.python_version(sys.executable) == sys.version_info[:2]
    assert envs.python_version(str(tmp_path / "no-such-python")) is None
    with pytest.raises(SystemExit, match="does not run"):
        envs.resolve_python(str(tmp_path / "no-such-python"))
    found = envs.find_python(minimum=sys.version_info[:2])
    assert found is not None and found[1] >= sys.version_info[:2]
    versions = envs.versions_in(sys.executable, ("numpy", "no-such-package-here"))
    assert versions["numpy"] == np.__version__ and versions["no-such-package-here"] == "not installed"


def test_library_order_rotates_between_workloads_and_the_table_does_not(tmp_path):
    args = run.parse_args(["--libs", "z3,zarr,tensorstore", "--no-reference"])
    cases = run.select(args)
    firsts = {}
    for wid, lib in cases:
        firsts.setdefault(wid, lib)
    assert len(set(firsts.values())) > 1  # not always the same library first
    per_workload = {}
    for wid, lib in cases:
        per_workload.setdefault(wid, []).append(lib)
    for wid, libs in per_workload.items():  # every chosen library still runs exactly once
        expected = [x for x in WORKLOADS_BY_ID[wid].libs if x in ("z3", "zarr", "tensorstore")]
        assert sorted(libs) == sorted(expected)
