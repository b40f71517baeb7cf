"""Ratios to the fastest anchor and the result table (plain text and Markdown)."""

from __future__ import annotations

from collections.abc import Sequence

from .config import ANCHORS, WORKLOADS_BY_ID

COLUMNS = (
    "workload",
    "lib",
    "median",
    "best",
    "unit",
    "vs best anchor",
    "CPU cores",
    "CPU s/GB (ms/read)",
    "faults/MiB (/read)",
    "peak RSS Δ MiB",
    "server CPU s",
    "check",
)


def add_ratios(results: list[dict]) -> dict[str, dict]:
    """Set ``ratio`` (value / fastest anchor's value, same workload) on every row; return per
    workload ``{"best_anchor": lib, "best_value": v}``."""
    best: dict[str, dict] = {}
    for r in results:
        if r.get("ok") and r["lib"] in ANCHORS:
            b = best.get(r["workload"])
            if b is None or r["value"] > b["best_value"]:
                best[r["workload"]] = {"best_anchor": r["lib"], "best_value": r["value"]}
    for r in results:
        b = best.get(r["workload"])
        r["ratio"] = r["value"] / b["best_value"] if r.get("ok") and b else None
    return best


def _row(r: dict) -> list[str]:
    if not r.get("ok"):
        status = "skipped" if r.get("skipped") else "FAILED"
        error = f"{status}: {r.get('error', '')}"[:70]
        return [r["workload"], r["lib"], "-", "-", r["unit"], "-", "-", "-", "-", "-", "-", error]
    ratio = "" if r.get("ratio") is None else f"{r['ratio']:.2f}x"
    mem = f"{r['peak_delta_mib']:.0f}"
    if r.get("mem_ratio") is not None:
        mem += f" ({r['mem_ratio']:.2f}x out)"
    best = _num(r.get("best", r["value"]))
    cpu = f"{r['cpu_cores']:.2f}"
    per = f"{r['cpu_per_unit']:.3g}" if r.get("cpu_per_unit") is not None else ""
    faults = f"{r['faults_per_unit']:.3g}" if r.get("faults_per_unit") is not None else ""
    server = _server_cpu(r)
    return [
        r["workload"],
        r["lib"],
        _num(r["value"]),
        best,
        r["unit"],
        ratio,
        cpu,
        per,
        faults,
        mem,
        server,
        "ok",
    ]


def _server_cpu(r: dict) -> str:
    """The remote group's latency server: CPU seconds per repetition, median [min-max]; "" elsewhere."""
    cpus = r.get("server_cpu_s")
    if not cpus:
        return ""
    return f"{r['median_server_cpu_s']:.3f} [{min(cpus):.3f}-{max(cpus):.3f}]"


def _num(v: float) -> str:
    return f"{v:.0f}" if v >= 100 else f"{v:.3g}"


def text_table(results: Sequence[dict]) -> str:
    """A fixed-width table, one row per case."""
    rows = [list(COLUMNS), *(_row(r) for r in results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = []
    for k, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(results: Sequence[dict]) -> str:
    """The same table in Markdown, with each workload's title."""
    header = "| " + " | ".join(COLUMNS) + " |"
    lines = [header, "|" + "---|" * len(COLUMNS)]
    last = None
    for r in results:
        cells = _row(r)
        if r["workload"] != last:
            cells[0] = f"{r['workload']}: {WORKLOADS_BY_ID[r['workload']].title}"
            last = r["workload"]
        else:
            cells[0] = ""
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)
