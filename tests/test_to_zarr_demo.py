"""The main job end to end: the README demo and the climatology notebook, run as users run them."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import xarray as xr

from zarr3_backend import demo

ROOT = pathlib.Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


def test_synthetic_climate_and_its_encoding_line_up_with_shards():
    ds = demo.synthetic_climate(years=1, resolution=10.0, days_per_shard=16)
    enc = demo.encoding_for(ds, 16)
    shard = enc["t2m"]["shards"]
    assert ds.t2m.data.chunks[0][:-1] == (shard[0],) * (len(ds.t2m.data.chunks[0]) - 1)
    assert ds.t2m.data.chunks[1:] == ((ds.sizes["lat"],), (ds.sizes["lon"],))
    assert all(s % c == 0 for s, c in zip(shard, enc["t2m"]["chunks"], strict=True))


def test_demo_runs_writes_and_recovers_the_seasonal_cycle(tmp_path, capsys):
    out = tmp_path / "climate.zarr"
    assert demo.main(["--years", "1", "--resolution", "10", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "100% Completed" in text  # the progress bar
    assert "one task each" in text and "as built" in text
    back = xr.open_dataset(out, engine="zarr3")
    assert back.t2m.dims == ("time", "lat", "lon") and back.sizes["time"] == 365
    clim = demo.climatology(back).compute()
    assert int(clim.t2m.sel(lat=slice(45, 90)).mean(("lat", "lon")).idxmax()) in (6, 7, 8)
    np.testing.assert_allclose(float(clim.tp.mean()), 0.72, rtol=0.1)  # gamma(0.6, 2) wet 60% of days


def test_climatology_notebook_executes(tmp_path):
    import nbclient
    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / "climatology.ipynb", as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the plots were drawn
