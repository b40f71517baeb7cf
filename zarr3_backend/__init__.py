"""zarr3_backend: read and write Zarr v3 from numpy, dask and xarray, without zarr-python."""
