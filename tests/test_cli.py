"""The ``zarr3`` command line: info, tree, check (and the entry points); failures and exit codes."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import crc32c
import numpy as np
import pytest
from click.testing import CliRunner

import zarr3_backend as z3
from zarr3_backend._owner import host_tag
from zarr3_backend.cli import main

# the package's `check` attribute is the click command: take the module itself
check_module = importlib.import_module("zarr3_backend.cli.check")

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def store_path(tmp_path) -> str:
    """A hierarchy with a sharded array (half written), a plain array and a nested group."""
    path = str(tmp_path / "s.zarr")
    g = z3.open_group(path, mode="w")
    t = g.create_array(
        "t", shape=(10, 20), dtype="f4", chunks=(5, 5), shards=(10, 10), dimension_names=("y", "x")
    )
    t[:5] = np.arange(100, dtype="f4").reshape(5, 20)
    b = g.create_group("sub").create_array(
        "b", shape=(9,), dtype="i4", chunks=(3,), compressors=[{"name": "crc32c"}]
    )
    b[:] = np.arange(9)
    return path


# ---- info ------------------------------------------------------------------------------------
def test_array_info_property(store_path):
    a = z3.open_array(store_path, path="t")
    info = a.info
    assert info.shape == (10, 20) and info.chunk_shape == (5, 5) and info.shard_shape == (10, 10)
    assert info.order == "C" and info.read_only is True and info.store_type == "LocalStore"
    assert info.serializer["name"] == "bytes" and [c["name"] for c in info.compressors] == ["zstd"]
    assert info.nbytes == 800
    text = str(info)
    assert "Shard shape     : (10, 10)" in text and "No. bytes       : 800" in text


def test_group_info_property(store_path):
    info = z3.open_group(store_path, mode="r").info
    assert (info.n_arrays, info.n_groups, info.zarr_format) == (1, 1, 3)
    assert "No. members  : 2" in info.to_text()


def test_info_command_measures_storage(store_path):
    result = run("info", store_path, "--path", "t", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    s = doc["storage"]
    assert doc["type"] == "Array" and doc["dimension_names"] == ["y", "x"]
    assert s["units_present"] == 2 and s["units_total"] == 2  # both shards hold rows 0-4
    assert s["inner_chunks_present"] == 4 and s["inner_chunks_total"] == 8
    on_disk = sum(
        os.path.getsize(os.path.join(d, f))
        for d, _, fs in os.walk(os.path.join(store_path, "t", "c"))
        for f in fs
    )
    assert s["stored_bytes"] == on_disk
    assert s["compression_ratio"] == pytest.approx(800 / on_disk)
    text = run("info", store_path, "--path", "t").output
    assert "Inner chunks present : 4/8" in text and "Shards present       : 2/2" in text


def test_info_quick_and_group(store_path):
    result = run("info", store_path, "--path", "sub/b", "--quick", "--json")
    assert json.loads(result.stdout)["storage"] is None
    result = run("info", store_path)
    assert result.exit_code == 0 and "Type         : Group" in result.output


def test_info_missing_node_exit_code(tmp_path, store_path):
    result = run("info", tmp_path / "nothing.zarr")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: GroupNotFoundError")
    result = run("info", store_path, "--path", "nope")
    assert result.exit_code == 2 and "nope" in result.stderr


def test_info_bad_metadata_exit_code(store_path):
    Path(store_path, "t", "zarr.json").write_text("{not json")
    result = run("info", store_path, "--path", "t")
    assert result.exit_code == 2 and "t/zarr.json" in result.stderr and "Traceback" not in result.output


# ---- tree ------------------------------------------------------------------------------------
def test_tree_text(store_path):
    result = run("tree", store_path)
    assert result.exit_code == 0
    assert result.output.splitlines() == [
        "/",
        "  sub/",
        "    b (9,) int32 chunks=(3,) codecs=[bytes, crc32c]",
        "  t (10, 20) float32 chunks=(5, 5) shards=(10, 10) codecs=[sharding[bytes, zstd]] dims=('y', 'x')",
    ]


def test_tree_json(store_path):
    doc = json.loads(run("tree", store_path, "--json").stdout)
    assert list(doc) == ["/", "sub", "sub/b", "t"]
    assert doc["t"]["shards"] == [10, 10] and doc["t"]["codecs"][0]["name"] == "sharding_indexed"
    assert doc["sub"] == {"type": "group", "zarr_format": 3}


# ---- check -----------------------------------------------------------------------------------
def test_check_clean_store(store_path):
    result = run("check", store_path)
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith("2 array(s), 5 stored unit(s) checked: ok")


def _flip(path: str, at: int = 0) -> None:
    data = bytearray(Path(path).read_bytes())
    data[at] ^= 0xFF
    Path(path).write_bytes(bytes(data))


def test_check_names_each_bad_key(store_path):
    _flip(os.path.join(store_path, "sub", "b", "c", "1"))  # chunk checksum
    shard = Path(store_path, "t", "c", "0", "1")
    shard.write_bytes(shard.read_bytes()[:-10])  # truncated shard index
    _flip(os.path.join(store_path, "t", "c", "0", "0"), at=3)  # inner chunk bytes (zstd frame)
    result = run("check", store_path, "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    bad = {b["key"]: b["error"] for b in report["bad"]}
    assert set(bad) == {"sub/b/c/1", "t/c/0/1", "t/c/0/0"}
    assert "ChecksumError" in bad["sub/b/c/1"]
    assert "shard index" in bad["t/c/0/1"]
    text = run("check", store_path).output
    assert "BAD      sub/b/c/1: ChecksumError" in text and "problems found" in text


def test_check_orphans_temp_files_and_write_records(store_path):
    Path(store_path, "t", "c", "7").write_bytes(b"outside the grid")
    Path(store_path, "stray.bin").write_bytes(b"x")
    Path(store_path, ".z3-txn", "w1").mkdir(parents=True)
    Path(store_path, ".z3-txn", "w1", "manifest.json").write_text("{}")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    # named as LocalStore names them: .z3tmp-<host tag>.<owner token>.<random>
    dead_name = f".z3tmp-{host_tag()}.{int(dead.stdout)}-x-x.0a1b"  # a writer that has exited
    live_name = f".z3tmp-{host_tag()}.{os.getpid()}-x-x.0a1c"  # this process: alive
    Path(store_path, "sub", "b", "c", dead_name).write_bytes(b"partial")
    Path(store_path, "t", live_name).write_bytes(b"partial")
    result = run("check", store_path, "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["bad"] == []
    assert report["orphans"] == ["stray.bin", "t/c/7"]
    assert report["in_flight"] == ["w1"]
    assert report["temporary"] == [
        {"key": f"sub/b/c/{dead_name}", "writer_dead": True},
        {"key": f"t/{live_name}", "writer_dead": False},
    ]
    # --repair removes only the dead writer's temporary file; orphans and chunks stay
    result = run("check", store_path, "--repair", "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert f"sub/b/c/{dead_name}" in report["repaired"]
    assert not Path(store_path, "sub", "b", "c", dead_name).exists()
    assert Path(store_path, "t", live_name).exists()
    assert Path(store_path, "stray.bin").exists() and Path(store_path, "t", "c", "7").exists()
    np.testing.assert_array_equal(z3.open_array(store_path, path="sub/b")[:], np.arange(9))


def test_check_repair_clean_after_removing_leftovers(store_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    Path(store_path, "t", f".z3tmp-{host_tag()}.{int(dead.stdout)}-x-x.01").write_bytes(b"partial")
    result = run("check", store_path, "--repair")
    assert result.exit_code == 0, result.output
    assert "REPAIRED t/.z3tmp-" in result.output and result.output.strip().endswith("ok")


def test_temp_file_names_are_read_by_the_stores_own_rule(tmp_path):
    """What check reports is what LocalStore writes: a real temporary name of this live process,
    a dead writer's, another host's, and an older name without a writer."""
    from zarr3_backend.cli.check import TempFile
    from zarr3_backend.stores.local import _temp_name

    mine = TempFile(f"a/{_temp_name()}")
    assert mine.owner is not None and not mine.writer_dead
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    assert TempFile(f"a/.z3tmp-{host_tag()}.{int(gone.stdout)}-1-x.9f").writer_dead
    assert not TempFile(f"a/.z3tmp-{host_tag('elsewhere')}.{int(gone.stdout)}-1-x.9f").writer_dead
    old = TempFile("a/.z3tmp-0123456789abcdef")
    assert old.owner is None and not old.writer_dead


def test_check_v2_store(tmp_path):
    zarr = pytest.importorskip("zarr")
    path = str(tmp_path / "v2.zarr")
    a = zarr.create_array(path, shape=(6,), chunks=(2,), dtype="i2", zarr_format=2)
    a[:] = np.arange(6)
    Path(path, "junk").write_bytes(b"x")
    result = run("check", path, "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 1 and report["units_checked"] == 3 and report["orphans"] == ["junk"]


def test_check_missing_store_exit_code(tmp_path):
    result = run("check", tmp_path / "none.zarr")
    assert result.exit_code == 2 and "GroupNotFoundError" in result.stderr


# ---- entry points ----------------------------------------------------------------------------
def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def zarr3_script(tmp_path: Path) -> str:
    """The installed ``zarr3`` script; where this checkout is not installed, the wrapper pip
    writes for the ``[project.scripts]`` entry point of pyproject.toml."""
    installed = shutil.which("zarr3", path=sysconfig.get_path("scripts"))
    if installed:
        return installed
    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["zarr3"]
    module, func = target.split(":")
    script = tmp_path / "zarr3"
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {func}\nsys.exit({func}())\n")
    script.chmod(0o755)
    return str(script)


def test_zarr3_script_subprocess(tmp_path, store_path):
    script = zarr3_script(tmp_path)
    out = subprocess.run(
        [script, "tree", store_path, "--json"], capture_output=True, text=True, env=_env(), check=False
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["t"]["shape"] == [10, 20]
    _flip(os.path.join(store_path, "sub", "b", "c", "2"))
    out = subprocess.run(
        [script, "check", store_path], capture_output=True, text=True, env=_env(), check=False
    )
    assert out.returncode == 1 and "BAD      sub/b/c/2" in out.stdout


def test_python_dash_m(store_path):
    out = subprocess.run(
        [sys.executable, "-m", "zarr3_backend", "info", store_path, "--path", "sub/b", "--quick"],
        capture_output=True,
        text=True,
        env=_env(),
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "Shape       : (9,)" in out.stdout
    out = subprocess.run(
        [sys.executable, "-m", "zarr3_backend", "bogus"],
        capture_output=True,
        text=True,
        env=_env(),
        check=False,
    )
    assert out.returncode == 2 and "No such command" in out.stderr


def test_check_one_array_by_path(store_path):
    _flip(os.path.join(store_path, "sub", "b", "c", "0"))
    result = run("check", store_path, "--path", "t", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["units_checked"] == 2
    result = run("check", store_path, "--path", "sub/b", "--json")
    assert result.exit_code == 1 and [b["key"] for b in json.loads(result.stdout)["bad"]] == ["sub/b/c/0"]


def test_info_and_tree_of_a_v2_array(tmp_path):
    zarr = pytest.importorskip("zarr")
    numcodecs = pytest.importorskip("numcodecs")
    path = str(tmp_path / "v2.zarr")
    g = zarr.open_group(path, mode="w", zarr_format=2)
    a = g.create_array("f", shape=(4, 6), chunks=(2, 3), dtype=">f8", order="F", compressors=numcodecs.Zstd())
    a[:] = 1.5
    info = json.loads(run("info", path, "--path", "f", "--json").stdout)
    assert (info["zarr_format"], info["order"], info["read_only"]) == (2, "F", True)
    assert info["storage"]["units_present"] == 4 and info["storage"]["other_keys"] == []
    assert (
        run("tree", path).output.splitlines()[1]
        == "  f (4, 6) float64 chunks=(2, 3) codecs=[transpose, bytes, numcodecs.zstd] (v2)"
    )


def _dead_write(store_path, with_manifest: bool) -> str:
    """The records a killed writer leaves: a staged chunk, and maybe its manifest."""
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    txn = f"1-{int(gone.stdout)}-1-x-{host_tag()}-abcd1234"  # as core.commit.new_txn_id names it
    base = Path(store_path, ".z3-txn", txn)
    (base / "data" / "sub" / "b" / "c").mkdir(parents=True)
    # a whole chunk of sub/b (crc32c over 3 int32 values 7, 8, 9)
    chunk = np.array([7, 8, 9], dtype="<i4").tobytes()
    (base / "data" / "sub" / "b" / "c" / "0").write_bytes(chunk + crc32c.crc32c(chunk).to_bytes(4, "little"))
    if with_manifest:
        manifest = {"id": txn, "owner": {}, "documents": {}, "erase_prefixes": [], "guard": []}
        (base / "manifest.json").write_text(json.dumps(manifest))
    return txn


@pytest.mark.parametrize("with_manifest", [False, True])
def test_check_reports_and_repairs_dead_writes(store_path, with_manifest):
    txn = _dead_write(store_path, with_manifest)
    result = run("check", store_path)
    assert result.exit_code == 1 and f"IN-FLIGHT .z3-txn/{txn}" in result.stdout
    result = run("check", store_path, "--repair", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["repaired"] == [f"write {txn}"]
    assert not Path(store_path, ".z3-txn", txn).exists()
    # rolled forward (with a manifest) or dropped (without one)
    expected = [7, 8, 9] if with_manifest else [0, 1, 2]
    assert z3.open_array(store_path, "sub/b")[:3].tolist() == expected
    assert run("check", store_path).exit_code == 0


def test_json_output_is_strict_json_with_non_finite_numbers_spelled_out(tmp_path):
    import click
    from click.testing import CliRunner

    from zarr3_backend.cli._common import emit_json

    @click.command()
    def show():
        emit_json({"a": float("nan"), "b": [float("inf"), -float("inf"), 1.5]})

    out = CliRunner().invoke(show).output
    assert json.loads(out) == {"a": "NaN", "b": ["Infinity", "-Infinity", 1.5]}


def test_check_lists_the_store_once_however_many_arrays():
    """``zarr3 check`` of a group lists the store's keys once (a listing is many requests on
    object stores), plus the root's members, not once more per array."""
    from zarr3_backend.cli.check import scan
    from zarr3_backend.stores import MemoryStore

    class CountingLists(MemoryStore):
        listings = 0

        def list_prefix(self, prefix):
            type(self).listings += 1
            return super().list_prefix(prefix)

    store = CountingLists()
    g = z3.create_group(store)
    for name in ("a", "ab", "b"):
        g.create_array(name, shape=(6,), dtype="i4", chunks=(2,))[...] = np.arange(6)
    CountingLists.listings = 0
    report = scan(store, "", show_progress=False)
    assert report.ok and report.arrays == 3 and report.units == 9 and report.orphans == []
    assert CountingLists.listings == 2  # every key; the root's members (list_dir)
    for name in ("c", "d", "e"):
        g.create_array(name, shape=(6,), dtype="i4", chunks=(2,))[...] = np.arange(6)
    CountingLists.listings = 0
    assert scan(store, "", show_progress=False).arrays == 6
    assert CountingLists.listings == 2
