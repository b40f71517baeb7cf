from zarr218 import zarr218  # noqa: F401  (the zarr-python 2.18 oracle fixture, tests/zarr218.py)
