"""``zarr3 migrate`` on Zarr v2 stores written by zarr-python: chunk bytes untouched, values read
back identically by zarr-python, tensorstore and this package; refusals; crash and rerun."""

from __future__ import annotations

import hashlib
import json
import os

import numcodecs
import numpy as np
import pytest
from click.testing import CliRunner

import zarr3_backend as z3
from zarr3_backend.cli import main
from zarr3_backend.cli.migrate import plan_migration
from zarr3_backend.stores import LocalStore

zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")

pytestmark = [pytest.mark.interop, pytest.mark.filterwarnings("ignore::UserWarning")]

V2_NAMES = {".zarray", ".zgroup", ".zattrs", ".zmetadata"}
META_NAMES = V2_NAMES | {"zarr.json"}


def chunk_hashes(root: str) -> dict[str, str]:
    """sha256 of every non-metadata file below ``root``, by relative path."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            if f not in META_NAMES:
                p = os.path.join(d, f)
                with open(p, "rb") as fh:
                    out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def metadata_files(root: str) -> set[str]:
    return {
        os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs if f in META_NAMES
    }


def values(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape))
    if dtype == "str":
        return np.array([f"s{i}" * (i % 4) for i in range(n)], dtype=object).reshape(shape)
    if np.dtype(dtype).kind == "b":
        return (np.arange(n) % 3 == 0).reshape(shape)
    return (np.arange(n) * 3 % 251).astype(dtype).reshape(shape)


# (dtype, compressor, filters, order, separator): every v3 mapping and numcodecs fallback
CASES = [
    ("<f8", numcodecs.Blosc(cname="zstd", clevel=3, shuffle=numcodecs.Blosc.SHUFFLE), None, "C", "."),
    ("<i4", numcodecs.Blosc(cname="lz4", shuffle=numcodecs.Blosc.AUTOSHUFFLE), None, "F", "/"),
    ("u1", numcodecs.Blosc(cname="lz4", shuffle=numcodecs.Blosc.BITSHUFFLE), None, "C", "/"),
    (">f4", numcodecs.GZip(level=4), None, "F", "."),
    (">i8", numcodecs.Zstd(level=2), None, "C", "/"),
    ("<u2", numcodecs.Zstd(level=1, checksum=True), [numcodecs.CRC32C()], "C", "."),
    ("<i2", numcodecs.Zlib(level=2), [numcodecs.Delta(dtype="<i2")], "C", "."),
    ("<f4", None, [numcodecs.Shuffle(elementsize=4)], "F", "/"),
    ("|b1", None, None, "C", "."),
    ("<c8", numcodecs.LZ4(), None, "C", "."),
    ("str", numcodecs.Zstd(level=1), [numcodecs.VLenUTF8()], "C", "/"),
]


def _case_id(case: tuple) -> str:
    dtype, comp, filters, order, sep = case
    name = comp.codec_id if comp is not None else "none"
    fil = "+".join(f.codec_id for f in filters or [])
    return f"{dtype}-{name}-{fil or 'nofilter'}-{order}-{'slash' if sep == '/' else 'dot'}"


def write_v2(root: str, case: tuple, consolidated: bool) -> dict[str, np.ndarray]:
    dtype, comp, filters, order, sep = case
    g = zarr.open_group(root, mode="w", zarr_format=2)
    expected = {}
    shape, chunks = (7, 11), (3, 4)
    kwargs = {
        "compressors": comp,
        "filters": filters,
        "order": order,
        "chunk_key_encoding": {"name": "v2", "separator": sep},
        "fill_value": None if dtype == "str" else 0,
    }
    a = g.create_array("a", shape=shape, chunks=chunks, dtype=str if dtype == "str" else dtype, **kwargs)
    data = values(dtype, shape)
    data[-1, -1] = data[0, 0]  # the last chunk partly equals the fill value: still written
    a[:] = data
    a.attrs["_ARRAY_DIMENSIONS"] = ["y", "x"]
    a.attrs["units"] = "m"
    expected["a"] = data
    sub = g.create_group("sub", attributes={"title": "inner"})
    b = sub.create_array("b", shape=(10,), chunks=(4,), dtype="<i4", compressors=numcodecs.GZip(1))
    b[:] = np.arange(10)
    b.attrs["_ARRAY_DIMENSIONS"] = ["t"]
    expected["sub/b"] = np.arange(10, dtype="<i4")
    if consolidated:
        zarr.consolidate_metadata(root)
    return expected


def tensorstore_reads(doc: dict) -> bool:
    """Whether tensorstore implements every codec and the data type of a v3 document."""
    names = {c["name"] for c in doc["codecs"]}
    return not any(n.startswith("numcodecs.") or n.startswith("vlen") for n in names)


def run(*args: str) -> object:
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("consolidated", [False, True], ids=["plain", "zmetadata"])
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_migrate_reads_identically(tmp_path, case, consolidated):
    root = str(tmp_path / "v2.zarr")
    expected = write_v2(root, case, consolidated)
    before = chunk_hashes(root)
    result = run("migrate", root)
    assert result.exit_code == 0, result.output + result.stderr
    assert chunk_hashes(root) == before  # chunk bytes untouched
    assert metadata_files(root) == {"zarr.json", "a/zarr.json", "sub/zarr.json", "sub/b/zarr.json"}
    doc = json.loads((tmp_path / "v2.zarr" / "a" / "zarr.json").read_text())
    assert doc["dimension_names"] == ["y", "x"]
    assert doc["attributes"] == {"units": "m"}
    assert doc["chunk_key_encoding"] == {"name": "v2", "configuration": {"separator": case[4]}}
    assert not any(k.startswith("zarr3_backend") for k in doc)
    root_doc = json.loads((tmp_path / "v2.zarr" / "zarr.json").read_text())
    assert ("consolidated_metadata" in root_doc) == consolidated
    if consolidated:
        assert set(root_doc["consolidated_metadata"]["metadata"]) == {"a", "sub", "sub/b"}

    zg = zarr.open_group(root, mode="r")
    assert zg.metadata.zarr_format == 3
    ours = z3.open_group(root, mode="r")
    for path, want in expected.items():
        got_zarr = zg[path][:]
        got_ours = ours[path][:]
        if want.dtype == object:
            assert [str(v) for v in got_zarr.ravel()] == list(want.ravel())
            assert list(got_ours.ravel()) == list(want.ravel())
        else:
            np.testing.assert_array_equal(got_zarr, want)
            np.testing.assert_array_equal(got_ours, want)
        adoc = json.loads((tmp_path / "v2.zarr" / path / "zarr.json").read_text())
        if tensorstore_reads(adoc):
            t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": f"{root}/{path}"}}).result()
            np.testing.assert_array_equal(t.read().result(), want)
    assert ours["a"].dimension_names == ("y", "x")


def test_standard_codecs_replace_numcodecs_names(tmp_path):
    root = str(tmp_path / "v2.zarr")
    z = zarr.create_array(
        root,
        shape=(8,),
        chunks=(4,),
        dtype="<f4",
        zarr_format=2,
        filters=[numcodecs.CRC32C()],
        compressors=numcodecs.Blosc(cname="zstd", shuffle=numcodecs.Blosc.AUTOSHUFFLE),
    )
    z[:] = np.arange(8)
    assert run("migrate", root).exit_code == 0
    codecs = json.loads((tmp_path / "v2.zarr" / "zarr.json").read_text())["codecs"]
    assert [c["name"] for c in codecs] == ["bytes", "crc32c", "blosc"]
    assert codecs[2]["configuration"] == {
        "cname": "zstd",
        "clevel": 5,
        "shuffle": "shuffle",
        "typesize": 4,
        "blocksize": 0,
    }


def test_dry_run_changes_nothing_and_lists_the_plan(tmp_path):
    root = str(tmp_path / "v2.zarr")
    write_v2(root, CASES[0], consolidated=True)
    before = metadata_files(root), chunk_hashes(root)
    result = run("migrate", root, "--dry-run", "--json")
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["dry_run"] is True and plan["consolidated"] is True
    assert list(plan["nodes"]) == ["a", "sub", "sub/b", "/"]  # the root last
    assert "a/.zarray" in plan["remove"]
    assert (metadata_files(root), chunk_hashes(root)) == before


def test_refuses_what_v3_cannot_express_before_writing(tmp_path):
    root = str(tmp_path / "v2.zarr")
    g = zarr.open_group(root, mode="w", zarr_format=2)
    g.create_array("ok", shape=(4,), chunks=(2,), dtype="<i4")[:] = 1
    mixed = np.dtype([("a", "<i4"), ("b", ">i4")])  # a record whose fields differ in byte order
    g.create_array("dt", shape=(4,), chunks=(2,), dtype=mixed)[:] = np.zeros(4, mixed)
    before = metadata_files(root)
    result = run("migrate", root)
    assert result.exit_code == 2
    assert "dt/.zarray" in result.stderr and "big-endian" in result.stderr
    assert metadata_files(root) == before  # nothing written, nothing removed


def test_refuses_big_endian_array_filter(tmp_path):
    root = str(tmp_path / "v2.zarr")
    z = zarr.create_array(
        root, shape=(9,), chunks=(4,), dtype=">i4", filters=[numcodecs.Delta(dtype=">i4")], zarr_format=2
    )
    z[:] = np.arange(9)
    result = run("migrate", root)
    assert result.exit_code == 2
    assert "numcodecs.delta" in result.stderr and "big-endian" in result.stderr
    assert metadata_files(root) == {".zarray", ".zattrs"}


def test_not_a_v2_store(tmp_path):
    result = run("migrate", str(tmp_path / "missing.zarr"))
    assert result.exit_code == 2
    assert "no Zarr v2 node" in result.stderr


@pytest.mark.parametrize("stage", ["documents_written", "half_removed"])
def test_rerun_after_a_crash_finishes(tmp_path, stage):
    root = str(tmp_path / "v2.zarr")
    expected = write_v2(root, CASES[1], consolidated=True)
    store = LocalStore(root)
    plan = plan_migration(store)
    for node in plan.nodes:  # the crash came after every zarr.json was written ...
        store.set(f"{node.path}/zarr.json" if node.path else "zarr.json", json.dumps(node.document).encode())
    if stage == "half_removed":  # ... or in the middle of removing the v2 documents
        store.erase_many(["a/.zarray", "a/.zattrs", ".zgroup"])
    result = run("migrate", root)
    assert result.exit_code == 0, result.stderr
    assert metadata_files(root) == {"zarr.json", "a/zarr.json", "sub/zarr.json", "sub/b/zarr.json"}
    root_doc = json.loads((tmp_path / "v2.zarr" / "zarr.json").read_text())
    assert set(root_doc["consolidated_metadata"]["metadata"]) == {"a", "sub", "sub/b"}
    zg = zarr.open_group(root, mode="r")
    for path, want in expected.items():
        np.testing.assert_array_equal(zg[path][:], want)
    assert "nothing to migrate" in run("migrate", root).output  # a third run has nothing to do


def test_refuses_a_subtree_of_a_v2_hierarchy(tmp_path):
    root = str(tmp_path / "v2.zarr")
    write_v2(root, CASES[0], consolidated=True)
    before = metadata_files(root)
    result = run("migrate", root, "--path", "sub")
    assert result.exit_code == 2 and "inside the Zarr v2 hierarchy" in result.stderr
    assert metadata_files(root) == before


def test_migrates_a_v2_hierarchy_below_a_v3_group(tmp_path):
    root = str(tmp_path / "mixed.zarr")
    z3.create_group(root, attributes={"kind": "v3 root"})
    expected = write_v2(str(tmp_path / "mixed.zarr" / "old"), CASES[2], consolidated=False)
    result = run("migrate", root, "--path", "old")
    assert result.exit_code == 0, result.stderr
    g = zarr.open_group(root, mode="r")
    for path, want in expected.items():
        np.testing.assert_array_equal(g[f"old/{path}"][:], want)
    assert z3.open_group(root, mode="r")["old"].zarr_format == 3


#: numcodecs configurations with a standard v3 codec (or none: crc32c with its checksum first)
NUMCODECS_CONFIGS = [
    {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2, "blocksize": 0},
    {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": -1, "blocksize": 0},
    {"id": "gzip", "level": 4},
    {"id": "zstd", "level": 2, "checksum": True},
    {"id": "crc32c"},
    {"id": "crc32c", "location": "end"},
    {"id": "crc32c", "location": "start"},
    {"id": "zlib", "level": 1},
]


@pytest.mark.parametrize("config", NUMCODECS_CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def test_migrate_and_create_array_map_numcodecs_by_one_rule(config):
    """``migrate`` (translated v2 codecs) and ``create_array`` (numcodecs objects) give the same
    v3 codec: a standard one where it writes the same bytes, and crc32c only with its checksum at
    the end, where the v3 crc32c codec puts it (they disagreed: create_array took a
    checksum-first crc32c for the standard codec)."""
    from zarr3_backend.cli.migrate import standard_codec
    from zarr3_backend.core.codec_specs import coerce_codec

    translated = {
        "name": f"numcodecs.{config['id']}",
        "configuration": {k: v for k, v in config.items() if k != "id"},
    }
    by_migrate = standard_codec(translated, "a/.zarray")
    assert coerce_codec(numcodecs.get_codec(dict(config))) == by_migrate
    standard = config["id"] in ("blosc", "gzip", "zstd") or (
        config["id"] == "crc32c" and config.get("location", "end") == "end"
    )
    assert by_migrate["name"] == (config["id"] if standard else f"numcodecs.{config['id']}")


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_checksum_first_crc32c_is_kept_where_it_was_asked(tmp_path, zarr_format):
    """A numcodecs crc32c with ``location="start"`` writes its checksum first and says so in the
    metadata; zarr-python reads the values back."""
    root = str(tmp_path / "c.zarr")
    codec = numcodecs.CRC32C(location="start")
    a = z3.create_array(
        root, shape=(8,), chunks=(4,), dtype="<i4", compressors=[codec], zarr_format=zarr_format
    )
    a[:] = np.arange(8)
    chunk = os.path.join(root, "0" if zarr_format == 2 else "c/0")
    with open(chunk, "rb") as f:
        stored = f.read()
    np.testing.assert_array_equal(np.frombuffer(codec.decode(stored), "<i4"), np.arange(4))
    with open(os.path.join(root, ".zarray" if zarr_format == 2 else "zarr.json")) as f:
        doc = json.load(f)
    if zarr_format == 2:
        assert doc["compressor"] == {"id": "crc32c", "location": "start"}
    else:
        assert doc["codecs"][-1] == {"name": "numcodecs.crc32c", "configuration": {"location": "start"}}
    np.testing.assert_array_equal(zarr.open_array(root, mode="r")[:], np.arange(8))
