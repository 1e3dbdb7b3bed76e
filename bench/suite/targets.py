"""The performance goals, checked against the medians: not tests (numbers depend on the machine), a reading aid
for the report. Ratios are Python / Go unless a row says otherwise."""

from __future__ import annotations

import statistics
from typing import Any

from suite.gateway_goals import GATEWAY, Goal
from suite.readings import (
    CONTROLLER_ROWS,
    GATEWAY_ADDED,
    GROWTH_PER_OBJECT,
    PICKER_ROWS,
    RUNTIME_ROWS,
    STEADY_ROWS,
    ceiling_seconds,
    gateway_levels,
    growth_runs,
    has_reading,
    paced_streams,
    runs,
)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _ratio(results: dict[str, Any], scenario: str, get: Any, **match: Any) -> float | None:
    py = _median([get(r) for r in runs(results, scenario, subject="python", **match) if has_reading(get, r)])
    go = _median([get(r) for r in runs(results, scenario, subject="go", **match) if has_reading(get, r)])
    return py / go if py is not None and go else None


def _check(label: str, value: float | None, limit: float, unit: str = "", at_least: bool = False) -> str:
    sign = ">=" if at_least else "<="
    if value is None:
        return f"| {label} | {sign} {limit}{unit} | n/a | not measured |"
    passed = value >= limit if at_least else value <= limit
    return f"| {label} | {sign} {limit}{unit} | {value:.2f}{unit} | {'PASS' if passed else 'FAIL'} |"


def _ceiling_fraction(results: dict[str, Any], n: int) -> float | None:
    ceiling = ceiling_seconds(results, n)
    total = CONTROLLER_ROWS[2][1]
    wall = _median([total(r) for r in runs(results, "controllers", subject="python", n=n)])
    return ceiling[0] / wall if ceiling and wall else None


def _admission_ratio(results: dict[str, Any], rate: int, key: str) -> float | None:
    def median_of(subject: str) -> float | None:
        return _median([row[key] for r in runs(results, "admission", subject=subject) for row in r["rates"]
                        if row["rate"] == rate])  # fmt: skip

    py, go = median_of("python"), median_of("go")
    return py / go if py is not None and go else None


def _growth_checks(results: dict[str, Any]) -> list[str]:
    """Per-object cost at the largest N over that at 1,000 (or the smallest N above it)."""
    by_n = growth_runs(results, "python")
    sizes = sorted(by_n)
    if len(sizes) < 2:
        return []
    base = next((n for n in sizes if n >= 1000), sizes[0])
    top = sizes[-1]
    if top == base:
        base = sizes[-2]
    rows = []
    for label, key in GROWTH_PER_OBJECT:
        low = _median([r["per_object"][key] for r in by_n[base]])
        high = _median([r["per_object"][key] for r in by_n[top]])
        value = high / low if low and high is not None and low > 0 else None
        rows.append(_check(f"growth: {label} per Playground, N = {top} / N = {base}", value, 1.5))
    cold = [r["cold"]["writes"] for r in by_n[top] if "cold" in r]
    rows.append(_check(f"cold start over N = {top} converged Playgrounds: writes", _median(cold), 0))
    return rows


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


# The picker's goal: what prefix-aware routing adds per request (the key and the pick), at the 99th percentile.
PICKER_P99_MS = 1.0
# The largest bodies are read only up to the key's bound: a read in full takes seconds. A 1 MiB engine metrics page
# is scanned well within one scrape interval (0.25 s).
WORST_KEY_MS = 100.0
METRICS_PAGE_MS = 100.0


def _picker_checks(results: dict[str, Any]) -> list[str]:
    rs = runs(results, "picker")
    if not rs:
        return []
    wall, cpu = PICKER_ROWS[1][1], PICKER_ROWS[3][1]
    return [
        _check("picker: key + pick p99, wall", _median([wall(r) for r in rs]), PICKER_P99_MS, " ms"),
        _check("picker: key + pick p99, CPU", _median([cpu(r) for r in rs]), PICKER_P99_MS, " ms"),
        *[
            _check(label, _median([get(r) for r in rs if "worst" in r]), limit, " ms")
            for (label, get), limit in zip(PICKER_ROWS[-2:], (WORST_KEY_MS, METRICS_PAGE_MS), strict=True)
        ],
    ]


def _paced_stream_checks(results: dict[str, Any]) -> list[str]:
    """The added p99 of each chunk's delay and of TTFB through llmaz-gateway with paced streams; then the proxy
    comparison's goals (`gateway_goals`) as the latest run found them (ratios within one run)."""
    ps = [p for p in paced_streams(results) if GATEWAY in p["subjects"]]
    rows = []
    if ps:
        load = f"{ps[0]['concurrency']} streams x {ps[0]['tokens_per_second']:g} tokens/s"
        rows = [_check(f"gateway added p99, {label}, {load}",
                       statistics.median([p["subjects"][GATEWAY]["added"][key]["p99"] for p in ps]),
                       GATEWAY_ADDED_P99_MS, " ms")
                for label, key in (("chunk delay", "chunk_delay"), ("TTFB", "ttfb"))]  # fmt: skip
    latest = [r["goals"] for r in runs(results, "gateway") if r.get("goals")]
    if latest:
        rows += [Goal(**g).row() for g in latest[-1]]
    return rows


def section(results: dict[str, Any]) -> list[str]:
    sizes = [e["n"] for e in results["runs"] if e["scenario"] == "controllers"]
    n = max(sizes) if sizes else 0
    steady = [r["steady"] for r in runs(results, "controllers", subject="python", n=n) if "steady" in r]
    memory = [r["rss_ratio"] for r in runs(results, "memory")]
    churn_cpu, churn_writes = STEADY_ROWS[4][1], STEADY_ROWS[5][1]
    per_cached_object = RUNTIME_ROWS[11][1]
    admission = [_check(f"admission {key[:3]} at {rate}/s, Python/Go", _admission_ratio(results, rate, key), 1.0)
                 for rate in (100, 500) for key in ("p50_ms", "p99_ms")]  # fmt: skip
    return [
        "",
        f"### Targets (N = {n}; PASS/FAIL against the medians of this run)",
        "",
        "| goal | target | measured (median) | |",
        "|---|---|---|---|",
        _check("convergence wall time, Python/Go", _ratio(results, "controllers", CONTROLLER_ROWS[2][1], n=n), 1.0),
        _check("convergence: ceiling / total wall time (Python)", _ceiling_fraction(results, n), 0.8, at_least=True),
        _check("manager CPU, Python/Go", _ratio(results, "controllers", CONTROLLER_ROWS[3][1], n=n), 1.0),
        _check("peak RSS, Python/Go", _ratio(results, "controllers", CONTROLLER_ROWS[4][1], n=n), 1.3),
        _check("churn: manager CPU, Python/Go", _ratio(results, "controllers", churn_cpu, n=n), 1.0),
        _check("churn: manager API writes, Python/Go", _ratio(results, "controllers", churn_writes, n=n), 1.0),
        _check("steady state: writes", _median([s["writes"] for s in steady]), 0),
        _check("steady state: CPU", _median([s["cpu_percent_of_core"] for s in steady]), 1.0, "% of a core"),
        _check("runtime: memory per cached object, Python/Go", _ratio(results, "runtime", per_cached_object), 1.5),
        *admission,
        _check("RSS with 3K unrelated objects / with none", _median(memory), 1.1),
        *_growth_checks(results),
        *_gateway_checks(results),
        *_picker_checks(results),
        *_paced_stream_checks(results),
    ]
