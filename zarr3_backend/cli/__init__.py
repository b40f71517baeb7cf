"""The ``zarr3`` command line (also ``python -m zarr3_backend``): info, tree, migrate, copy, check.

The top layer: it uses the public API below it and adds no format logic of its own.
"""

from __future__ import annotations

import click

from .check import check
from .copy import copy
from .info import info
from .migrate import migrate
from .tree import tree


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="zarr3_backend")
def main() -> None:
    """Look inside, migrate, copy and check Zarr stores (v3 and v2)."""


main.add_command(info)
main.add_command(tree)
main.add_command(migrate)
main.add_command(check)
main.add_command(copy)

__all__ = ["main"]
