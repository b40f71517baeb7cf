from zarr218 import zarr34, zarr218  # noqa: F401  (zarr-python 2.18 and 3.4 oracle fixtures, tests/zarr218.py)
