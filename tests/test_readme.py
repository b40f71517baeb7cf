"""The README's Python examples run as written (so the front page never lies).

Blocks fenced as ```python run; blocks that need a network (object storage) are fenced ```py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples():
    assert len(python_blocks()) >= 2


@pytest.mark.slow
def test_readme_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in python_blocks():
        exec(compile(block, str(README), "exec"), namespace)  # blocks share names, as a reader's session
    assert (tmp_path / "data.zarr" / "t2m" / "zarr.json").exists()
    assert (tmp_path / "copy.zarr" / "t2m" / "zarr.json").exists()
