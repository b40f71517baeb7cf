"""``python -m benchmarks``: run the benchmark suite (see ``benchmarks/run.py``)."""

from .run import main

if __name__ == "__main__":
    main()
