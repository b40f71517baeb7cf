"""Compare several runs: ``python -m benchmarks.summarize results/a.json results/b.json ...``.

On a shared machine one run's medians move with other people's load; this prints, per workload,
zarr3_backend's ratio to the fastest anchor in each run and the median over runs, plus the CPU
cost per GB (or per read) of every library, which load moves far less than wall time.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from .config import LIBS, WORKLOADS


def summarize(paths: list[str], lib: str = "z3") -> str:
    """A Markdown table: ratio of ``lib`` per run, median ratio, and median CPU per unit per lib."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    head = ["workload", *(f"run {i + 1}" for i in range(len(runs))), "median ratio"]
    head += [f"CPU/unit {x}" for x in LIBS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w in WORKLOADS:
        rows = [[r for r in run["results"] if r["workload"] == w.id] for run in runs]
        ratios = [next((r.get("ratio") for r in rs if r["lib"] == lib and r.get("ok")), None) for rs in rows]
        if not any(x is not None for x in ratios):
            continue
        known = [x for x in ratios if x is not None]
        cells = [
            w.id,
            *("-" if x is None else f"{x:.2f}x" for x in ratios),
            f"{statistics.median(known):.2f}x",
        ]
        for other in LIBS:
            cpu = [
                r["cpu_per_unit"] for rs in rows for r in rs if r["lib"] == other and r.get("cpu_per_unit")
            ]
            cells.append(f"{statistics.median(cpu):.3g}" if cpu else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summarize(sys.argv[1:]))
