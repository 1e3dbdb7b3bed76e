"""The issue's goals, checked against the medians: not pass/fail tests, a reading aid for the report."""

from __future__ import annotations

import statistics
from typing import Any

from suite.report import CONTROLLER_ROWS, GATEWAY_ADDED, gateway_levels, runs


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _controller_ratio(results: dict[str, Any], n: int, row: int) -> float | None:
    get = CONTROLLER_ROWS[row][1]
    py = _median([get(r) for r in runs(results, "controllers", subject="python", n=n)])
    go = _median([get(r) for r in runs(results, "controllers", subject="go", n=n)])
    return py / go if py is not None and go else None


def _check(label: str, value: float | None, limit: float, unit: str = "") -> str:
    if value is None:
        return f"| {label} | <= {limit}{unit} | n/a | not measured |"
    return f"| {label} | <= {limit}{unit} | {value:.2f}{unit} | {'met' if value <= limit else 'MISSED'} |"


# The goals for the latency the gateway adds, at every concurrency level measured.
GATEWAY_ADDED_P50_MS = 1.0
GATEWAY_ADDED_P99_MS = 3.0


def _gateway_checks(results: dict[str, Any]) -> list[str]:
    """Per concurrency level and percentile, the worst added figure of TTFB and total time, streams and plain
    answers (each the median over runs)."""
    rows = []
    for c, levels in sorted(gateway_levels(results).items()):
        for pct, limit in (("p50", GATEWAY_ADDED_P50_MS), ("p99", GATEWAY_ADDED_P99_MS)):
            worst = max(
                (statistics.median([lv[kind]["added"][key] for lv in levels]), f"{kind} {label}")
                for kind in ("stream", "plain")
                for label, key in GATEWAY_ADDED
                if label.endswith(pct)
            )
            rows.append(_check(f"gateway added {pct}, concurrency {c} (worst: {worst[1]})", worst[0], limit, " ms"))
    return rows


def section(results: dict[str, Any]) -> list[str]:
    sizes = [e["n"] for e in results["runs"] if e["scenario"] == "controllers"]
    n = max(sizes) if sizes else 0
    steady = [r["steady"] for r in runs(results, "controllers", subject="python", n=n) if "steady" in r]
    p99s = [row["p99_ms"] for r in runs(results, "admission", subject="python") for row in r["rates"]
            if row["rate"] == 500]  # fmt: skip
    memory = [r["rss_ratio"] for r in runs(results, "memory")]
    return [
        "",
        f"### Targets (N = {n})",
        "",
        "| goal | target | measured (median) | |",
        "|---|---|---|---|",
        _check("convergence wall time, Python/Go", _controller_ratio(results, n, 2), 1.0),
        _check("manager CPU, Python/Go", _controller_ratio(results, n, 3), 1.5),
        _check("peak RSS, Python/Go", _controller_ratio(results, n, 4), 2.0),
        _check("steady state: writes", _median([s["writes"] for s in steady]), 0),
        _check("steady state: CPU", _median([s["cpu_percent_of_core"] for s in steady]), 1.0, "% of a core"),
        _check("admission p99 at 500/s", _median(p99s), 10.0, " ms"),
        _check("RSS with 3K unrelated objects / with none", _median(memory), 1.1),
        *_gateway_checks(results),
    ]
