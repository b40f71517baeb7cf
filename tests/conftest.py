from collections.abc import Iterator

import pytest
from servers import MotoS3
from zarr218 import zarr34, zarr218  # noqa: F401  (zarr-python 2.18 and 3.4 oracle fixtures, tests/zarr218.py)


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoS3]:
    """moto's S3 server on 127.0.0.1, one per test module (``servers.MotoS3``)."""
    server = MotoS3().start()
    yield server
    server.stop()
