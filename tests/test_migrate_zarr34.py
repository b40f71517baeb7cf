"""``zarr3 migrate`` on Zarr v2 stores written by zarr-python 3.4 (``zarr_format=2``; the
``zarr34`` fixture of tests/zarr218.py): the cases and checks of tests/test_migrate_zarr218.py
(imported, not copied), on stores written by the other major version of zarr-python. Chunk bytes
stay unchanged and every array reads back as zarr-python 2.18 reads the 3.4-written store, by
this package, the installed zarr-python 3, zarr-python 3.4 and tensorstore; refusals are clean;
with and without ``.zmetadata``."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pytest
from test_migrate_zarr218 import (
    CASES,
    GZIP,
    REFUSED,
    ZARR_PYTHON_GAPS,
    Migrated,
    array,
    assert_gap_migrates_exactly,
    assert_migrated_keeping_every_chunk_byte,
    assert_non_finite_attributes_become_strict_json,
    assert_refused_before_writing,
    assert_same,
    assert_stale_zmetadata_is_rebuilt,
    assert_values_read_back,
    run_cli,
)

import zarr3_backend as z3

zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")

pytestmark = [pytest.mark.slow, pytest.mark.interop, pytest.mark.filterwarnings("ignore::UserWarning")]

#: Cases of tests/test_migrate_zarr218.py that zarr-python 3.4 cannot write as Zarr v2, with the
#: reason (its own data type model decides what it writes; these have no zarr 3.4 data type).
NOT_WRITTEN_BY_ZARR34: dict[str, str] = {
    "subarray_struct": "3.4's structured type refuses sub-array fields",
    "vlen_array": "no zarr 3.4 data type for the numcodecs vlen-array object codec",
    "json_object_codec": "no zarr 3.4 data type for the numcodecs json2 object codec",
}

#: Checksums zarr 2.18's numcodecs lacks (crc32c needs an optional package there), so zarr 3.4
#: is their reference reader: name -> array spec.
CRC32C_CASES: dict[str, dict[str, Any]] = {
    # numcodecs crc32c puts its checksum at the end by default: byte-for-byte the v3 crc32c codec
    "crc32c_filter": array("<u2", {"id": "zstd", "level": 1}, [{"id": "crc32c"}]),
    "crc32c_end_F_slash": array("<f4", None, [{"id": "crc32c", "location": "end"}], order="F", sep="/"),
    "crc32c_compressor": array("<i8", {"id": "crc32c"}, sep="/"),
    # ... and at the start when asked: no v3 codec writes that, it stays numcodecs.crc32c
    "crc32c_start": array("<i4", GZIP, [{"id": "crc32c", "location": "start"}]),
}
ZARR34_CASES = {name: spec for name, spec in CASES.items() if name not in NOT_WRITTEN_BY_ZARR34}
ZARR34_REFUSED = [name for name in REFUSED if name not in NOT_WRITTEN_BY_ZARR34]


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "zmetadata"])
def migrated(request, zarr218, zarr34, tmp_path_factory) -> Migrated:
    root = str(tmp_path_factory.mktemp("v2by34") / "store.zarr")
    return Migrated(zarr34, zarr218, zarr34, root, ZARR34_CASES, request.param)


def test_migrate_succeeds_keeping_every_chunk_byte(migrated):
    assert_migrated_keeping_every_chunk_byte(migrated)


@pytest.mark.parametrize("name", list(ZARR34_CASES))
def test_values_read_back_as_before_migration(migrated, name):
    assert_values_read_back(migrated, name)


@pytest.fixture(scope="module")
def migrated_crc32c(zarr34, tmp_path_factory) -> Migrated:
    root = str(tmp_path_factory.mktemp("v2crc34") / "store.zarr")
    return Migrated(zarr34, zarr34, zarr34, root, CRC32C_CASES, consolidated=True)


@pytest.mark.parametrize("name", list(CRC32C_CASES))
def test_crc32c_maps_to_the_v3_codec_only_at_the_end(migrated_crc32c, name):
    """Where numcodecs crc32c writes the v3 crc32c codec's bytes (checksum last) it becomes that
    codec; with its checksum first it stays ``numcodecs.crc32c`` with its location. Either way
    the values read back as written."""
    assert_same(migrated_crc32c.expected[migrated_crc32c.paths[name]], CRC32C_CASES[name]["data"], "zarr 3.4")
    assert_values_read_back(migrated_crc32c, name)
    with open(os.path.join(migrated_crc32c.root, migrated_crc32c.paths[name], "zarr.json")) as f:
        codecs = [(c["name"], c.get("configuration")) for c in json.load(f)["codecs"]]
    if name == "crc32c_start":
        assert ("numcodecs.crc32c", {"location": "start"}) in codecs
        assert not any(n == "crc32c" for n, _ in codecs)
    else:
        assert ("crc32c", None) in codecs


@pytest.fixture(scope="module")
def migrated_gaps(zarr218, zarr34, tmp_path_factory) -> Migrated:
    root = str(tmp_path_factory.mktemp("v2gaps34") / "store.zarr")
    cases = {name: spec for name, (spec, _, _) in ZARR_PYTHON_GAPS.items()}
    return Migrated(zarr34, zarr218, zarr34, root, cases, consolidated=True)


@pytest.mark.parametrize("name", list(ZARR_PYTHON_GAPS))
def test_types_zarr_python_3_1_cannot_read_migrate_exactly(migrated_gaps, name):
    assert_gap_migrates_exactly(migrated_gaps, name)


@pytest.mark.parametrize("case", ZARR34_REFUSED)
def test_what_v3_cannot_express_is_refused_before_writing(zarr34, tmp_path, case):
    assert_refused_before_writing(zarr34, str(tmp_path / "r.zarr"), case)


def test_root_array_with_fill_value_zero_text(zarr218, zarr34, tmp_path):
    """zarr 3.4 writes the default fill value 0 of a text array as the text ``"0"`` (2.18: the
    empty text); a chunk it left out reads back as that text after migration."""
    root = str(tmp_path / "t.zarr")
    data = np.array([["0"] * 4] * 3 + [["a", "bc", "", "d"]] * 4, dtype="<U2")
    zarr34.write(root, array("<U2", GZIP, fill=0, shape=data.shape, data=data, write_empty_chunks=False))
    with open(os.path.join(root, ".zarray")) as f:
        assert json.load(f)["fill_value"] == "0"  # what zarr 3.4 wrote
    assert not os.path.exists(os.path.join(root, "0.0"))  # all fill value: not written
    want = zarr218.read(root)[""]
    result = run_cli("migrate", root)
    assert result.exit_code == 0, result.stderr
    assert_same(z3.open_array(root, mode="r")[...], want, "zarr3_backend")
    assert_same(zarr.open_array(root, mode="r")[...], want, f"zarr {zarr.__version__}")
    assert_same(zarr34.read(root)[""], want, "zarr 3.4")


def test_stale_zmetadata_is_rebuilt_from_the_nodes(zarr218, zarr34, tmp_path):
    assert_stale_zmetadata_is_rebuilt(zarr34, zarr218, zarr34, str(tmp_path / "s.zarr"))


def test_non_finite_attributes_are_written_as_strict_json(zarr218, zarr34, tmp_path):
    assert_non_finite_attributes_become_strict_json(zarr34, zarr218, str(tmp_path / "n.zarr"))
