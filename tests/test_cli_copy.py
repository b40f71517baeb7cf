"""``zarr3 copy``: layouts, rechunking and resharding, resuming, v2 sources, schedulers, errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import zarr3_backend as z3
from zarr3_backend.cli import main
from zarr3_backend.cli.copy import copy_hierarchy
from zarr3_backend.stores import MemoryStore


def run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def src(tmp_path) -> str:
    path = str(tmp_path / "src.zarr")
    g = z3.open_group(path, mode="w", attributes={"title": "source"})
    t = g.create_array(
        "t",
        shape=(100, 60),
        dtype="f4",
        chunks=(10, 10),
        fill_value=np.nan,
        dimension_names=("y", "x"),
        attributes={"units": "K"},
    )
    data = np.arange(6000, dtype="f4").reshape(100, 60)
    data[0, 0] = np.nan
    data[90:, :] = np.nan  # the last chunk row equals the fill value: not stored
    t[:] = data
    g.create_group("sub", attributes={"level": 1}).create_array("b", shape=(9,), dtype="i4", chunks=(3,))[
        :
    ] = np.arange(9)
    return path


def by_path(result) -> dict[str, dict]:
    assert result.exit_code == 0, result.output
    return {r["path"]: r for r in json.loads(result.stdout)}


def test_copy_keeps_everything(tmp_path, src):
    dst = str(tmp_path / "dst.zarr")
    out = by_path(run("copy", src, dst, "--json"))
    assert out["t"] == {"path": "t", "units": 60, "written": 54, "skipped": 0, "empty": 6}
    assert out["sub/b"]["units"] == 3
    s, d = z3.open_group(src, mode="r"), z3.open_group(dst, mode="r")
    np.testing.assert_array_equal(d["t"][:], s["t"][:])
    np.testing.assert_array_equal(d["sub/b"][:], np.arange(9))
    assert d["t"].metadata.to_json() == s["t"].metadata.to_json()
    assert dict(d.attrs) == {"title": "source"} and dict(d["sub"].attrs) == {"level": 1}
    assert not Path(dst, "t", "c", "9").exists()  # fill-value units stay unwritten


def test_copy_reshards_rechunks_and_recodes(tmp_path, src):
    dst = str(tmp_path / "dst.zarr")
    codecs = '[{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 1}}]'
    out = by_path(
        run(
            "copy",
            src,
            dst,
            "--path",
            "t",
            "--chunks",
            "5,5",
            "--shards",
            "50,30",
            "--codecs",
            codecs,
            "--json",
        )
    )
    assert out["t"]["units"] == 4
    a = z3.open_array(dst, path="t")
    assert (a.chunks, a.shards) == ((5, 5), (50, 30))
    inner = a.codecs[0]["configuration"]["codecs"]
    assert [c["name"] for c in inner] == ["bytes", "gzip"]
    np.testing.assert_array_equal(a[:], z3.open_array(src, path="t")[:])
    assert sorted(os.listdir(Path(dst, "t", "c"))) == ["0", "1"]  # shards, not chunks
    ts = pytest.importorskip("tensorstore")
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": f"{dst}/t"}}).result()
    np.testing.assert_array_equal(t.read().result(), a[:])
    # and back to unsharded
    dst2 = str(tmp_path / "dst2.zarr")
    by_path(run("copy", dst, dst2, "--path", "t", "--shards", "none", "--json"))
    b = z3.open_array(dst2, path="t")
    assert b.shards is None and b.chunks == (5, 5)
    np.testing.assert_array_equal(b[:], a[:])


def test_copy_resumes(tmp_path, src):
    dst = str(tmp_path / "dst.zarr")
    by_path(run("copy", src, dst, "--json"))
    os.remove(Path(dst, "t", "c", "3", "2"))  # never written (interrupted)
    Path(dst, "t", "c", "4", "2").write_bytes(b"torn")  # unreadable
    chunk = Path(dst, "sub", "b", "c", "1")
    other = z3.open_array(dst, path="sub/b", mode="r+")
    other[3:6] = -1  # readable but different
    mtime = Path(dst, "t", "c", "0", "0").stat().st_mtime_ns
    out = by_path(run("copy", src, dst, "--json"))
    assert out["t"] == {"path": "t", "units": 60, "written": 2, "skipped": 52, "empty": 6}
    assert out["sub/b"] == {"path": "sub/b", "units": 3, "written": 1, "skipped": 2, "empty": 0}
    assert Path(dst, "t", "c", "0", "0").stat().st_mtime_ns == mtime  # skipped units untouched
    assert chunk.exists()
    np.testing.assert_array_equal(z3.open_array(dst, path="t")[:], z3.open_array(src, path="t")[:])
    np.testing.assert_array_equal(z3.open_array(dst, path="sub/b")[:], np.arange(9))
    out = by_path(run("copy", src, dst, "--json"))
    assert out["t"]["written"] == 0 and out["sub/b"]["written"] == 0


def test_copy_v2_source(tmp_path):
    zarr = pytest.importorskip("zarr")
    numcodecs = pytest.importorskip("numcodecs")
    path = str(tmp_path / "v2.zarr")
    a = zarr.create_array(
        path,
        shape=(20, 7),
        chunks=(6, 7),
        dtype="<i8",
        zarr_format=2,
        compressors=numcodecs.Blosc(cname="lz4"),
        order="F",
        attributes={"_ARRAY_DIMENSIONS": ["t", "k"]},
    )
    a[:] = np.arange(140).reshape(20, 7)
    dst = str(tmp_path / "v3.zarr")
    by_path(run("copy", path, dst, "--shards", "12,7", "--json"))
    b = z3.open_array(dst)
    assert b.zarr_format == 3 and b.dimension_names == ("t", "k") and b.shards == (12, 7)
    assert "_ARRAY_DIMENSIONS" not in b.attrs
    names = [c["name"] for c in b.codecs[0]["configuration"]["codecs"]]
    assert names == ["transpose", "bytes", "blosc"]
    np.testing.assert_array_equal(b[:], np.arange(140).reshape(20, 7))
    np.testing.assert_array_equal(zarr.open_array(dst, mode="r")[:], np.arange(140).reshape(20, 7))


@pytest.mark.parametrize("scheduler", ["synchronous", "processes"])
def test_copy_local_schedulers(tmp_path, src, scheduler):
    dst = str(tmp_path / "dst.zarr")
    out = by_path(
        run("copy", src, dst, "--path", "t", "--shards", "20,60", "--scheduler", scheduler, "--json")
    )
    assert (out["t"]["written"], out["t"]["empty"]) == (5, 0)
    np.testing.assert_array_equal(z3.open_array(dst, path="t")[:], z3.open_array(src, path="t")[:])


@pytest.mark.distributed
def test_copy_distributed_scheduler(tmp_path, src):
    distributed = pytest.importorskip("distributed")
    dst = str(tmp_path / "dst.zarr")
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
    ) as cluster:
        out = by_path(run("copy", src, dst, "--scheduler", cluster.scheduler_address, "--json"))
    assert (out["t"]["written"], out["t"]["empty"], out["sub/b"]["written"]) == (54, 6, 3)
    np.testing.assert_array_equal(z3.open_array(dst, path="t")[:], z3.open_array(src, path="t")[:])


def test_copy_refusals(tmp_path, src):
    dst = tmp_path / "dst.zarr"
    result = run("copy", src, dst, "--shards", "20,60")  # sub/b is 1-d
    assert result.exit_code == 2 and "'sub/b'" in result.stderr and "--shards" in result.stderr
    assert not dst.exists()  # refused before anything was written
    assert run("copy", src, dst, "--codecs", "{not json").exit_code == 2
    result = run("copy", src, dst, "--codecs", '[{"name": "zstd"}]')
    assert result.exit_code == 2 and "array->bytes" in result.stderr
    result = run("copy", src, dst, "--chunks", "none")
    assert result.exit_code == 2 and "--chunks" in result.stderr
    result = run("copy", src, dst, "--chunks", "a,b")
    assert result.exit_code == 2
    result = run("copy", tmp_path / "missing.zarr", dst)
    assert result.exit_code == 2 and "GroupNotFoundError" in result.stderr


def test_copy_refuses_other_existing_layout(tmp_path, src):
    dst = str(tmp_path / "dst.zarr")
    by_path(run("copy", src, dst, "--path", "t", "--json"))
    result = run("copy", src, dst, "--path", "t", "--shards", "20,60")
    assert result.exit_code == 2 and "--overwrite" in result.stderr
    out = by_path(run("copy", src, dst, "--path", "t", "--shards", "20,60", "--overwrite", "--json"))
    assert out["t"]["units"] == 5 and z3.open_array(dst, path="t").shards == (20, 60)


def test_copy_text_strings_and_0d_with_progress(tmp_path):
    src = str(tmp_path / "s.zarr")
    g = z3.open_group(src, mode="w")
    words = np.array([f"w{i}" * (i % 3) for i in range(10)], dtype=object)
    g.create_array("words", shape=(10,), dtype=str, chunks=(3,))[:] = words
    g.create_array("scalar", shape=(), dtype="f8")[...] = 3.5
    dst = str(tmp_path / "d.zarr")
    result = run("copy", src, dst, "--shards", "none", "--progress")
    assert result.exit_code == 0, result.output
    assert "100% Completed" in result.output
    # the last chunk holds only "" (the fill value): not stored
    assert (
        "words: 4 unit(s), 3 written, 0 skipped (already there), 1 empty (fill value only)" in result.output
    )
    d = z3.open_group(dst, mode="r")
    assert list(d["words"][:]) == list(words)
    assert d["scalar"][...] == 3.5


def test_copy_refuses_a_codec_out_of_place_before_writing(tmp_path, src):
    """--codecs is split by the one rule the xarray layout uses (array -> array codecs, one
    array -> bytes codec, bytes -> bytes codecs); a codec after the serializer that is not
    bytes -> bytes, a second serializer or a bad setting is refused naming it, before any
    write (it used to be moved silently ahead of the serializer)."""
    dst = tmp_path / "dst.zarr"
    transposed = '[{"name": "bytes"}, {"name": "transpose", "configuration": {"order": [1, 0]}}]'
    result = run("copy", src, dst, "--codecs", transposed)
    assert result.exit_code == 2 and "'transpose'" in result.stderr and "--codecs" in result.stderr
    two = '[{"name": "bytes"}, {"name": "vlen-utf8"}]'
    result = run("copy", src, dst, "--codecs", two)
    assert result.exit_code == 2 and "'vlen-utf8'" in result.stderr
    result = run(
        "copy", src, dst, "--codecs", '[{"name": "bytes"}, {"name": "gzip", "configuration": {"level": "x"}}]'
    )
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    for before in (
        '[{"name": "gzip"}, {"name": "bytes"}]',
        '[{"name": "gzip"}, {"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes"}]',
    ):  # bytes -> bytes first
        result = run("copy", src, dst, "--codecs", before)
        assert result.exit_code == 2 and "'gzip' must come after" in result.stderr
    assert not dst.exists()
    ok = '[{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes"}, {"name": "gzip"}]'
    assert run("copy", src, dst, "--path", "t", "--codecs", ok).exit_code == 0
    t = z3.open_array(str(dst), path="t")
    assert [c["name"] for c in t.codecs] == ["transpose", "bytes", "gzip"]
    np.testing.assert_array_equal(t[...], z3.open_array(src, path="t")[...])


class _CountingExists(MemoryStore):
    """A MemoryStore counting the existence checks of chunk keys (a HEAD each on object stores)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.asked: list[str] = []

    def exists(self, key):
        if "/c/" in key:
            self.asked.append(key)
        return super().exists(key)


def test_a_fresh_destination_spends_no_request_asking_for_units_a_resumed_one_checks_each():
    src = MemoryStore()
    z3.create_array(src, "t", shape=(8, 6), dtype="i4", chunks=(2, 3))[...] = np.arange(48).reshape(8, 6)
    dst = _CountingExists()
    (first,) = copy_hierarchy(src, dst, shards=(4, 6))
    assert first.written == first.units == 2 and dst.asked == []
    (again,) = copy_hierarchy(src, dst, shards=(4, 6))  # resumed: each unit compared, none written
    assert again.skipped == 2 and again.written == 0 and len(dst.asked) == 2
    np.testing.assert_array_equal(z3.open_array(dst, "t")[...], np.arange(48).reshape(8, 6))
