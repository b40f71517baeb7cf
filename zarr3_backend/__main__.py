"""``python -m zarr3_backend``: the ``zarr3`` command line."""

from .cli import main

if __name__ == "__main__":
    main(prog_name="zarr3")
