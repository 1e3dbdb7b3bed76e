"""The readings of the benchmark's results: which figures each table shows, and how runs are picked out of the
results. The report, its targets and its plots all read results through these, so each reads them the same way."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

Row = tuple[str, Callable[[dict[str, Any]], float]]


CONTROLLER_ROWS: list[Row] = [
    ("converge: wall s (Services, LWS, Progressing)", lambda r: r["converge"]["seconds"]),
    ("available: wall s (LWS Available -> Playground Available)", lambda r: r["available"]["seconds"]),
    ("total wall s", lambda r: r["converge"]["seconds"] + r["available"]["seconds"]),
    ("manager CPU s", lambda r: r["converge"]["cpu_seconds"] + r["available"]["cpu_seconds"]),
    ("manager peak RSS MB", lambda r: r["available"]["peak_rss_mb"]),
    ("manager API writes", lambda r: r["converge"]["writes"] + r["available"]["writes"]),
    (
        "control-plane CPU s",
        lambda r: r["converge"]["control_plane_cpu_seconds"] + r["available"]["control_plane_cpu_seconds"],
    ),
]


STEADY_ROWS: list[Row] = [
    ("steady: manager CPU % of one core", lambda r: r["steady"]["cpu_percent_of_core"]),
    ("steady: manager API requests", lambda r: sum(r["steady"]["requests"].values())),
    ("steady: manager API writes", lambda r: r["steady"]["writes"]),
    ("churn: re-converge wall s", lambda r: r["churn"]["seconds"]),
    ("churn: manager CPU s", lambda r: r["churn"]["cpu_seconds"]),
    ("churn: manager API writes", lambda r: r["churn"]["writes"]),
    ("churn: peak RSS MB (whole run)", lambda r: r["final_peak_rss_mb"]),
    ("whole run: manager full GCs (Python only)", lambda r: r["gc"]["full_collections"]),
    ("whole run: manager full-GC pause s (Python only)", lambda r: r["gc"]["full_collection_seconds"]),
]


RUNTIME_ROWS: list[Row] = [
    ("create burst: events/s reconciled", lambda r: r["create"]["events_per_second"]),
    ("create burst: lag after last write s", lambda r: r["create"]["lag_seconds"]),
    ("update burst: events/s reconciled", lambda r: r["update"]["events_per_second"]),
    ("update burst: lag after last write s", lambda r: r["update"]["lag_seconds"]),
    ("update burst: subject CPU s", lambda r: r["update"]["cpu_seconds"]),
    ("start-up, empty namespace: s to cache synced", lambda r: r["startup_seconds"]),
    ("cold start with K objects: s to all reconciled", lambda r: r["cold"]["seconds"]),
    ("cold start minus empty start-up: s for K objects", lambda r: r["cold"]["reconcile_seconds"]),
    ("cold start: subject CPU s", lambda r: r["cold"]["cpu_seconds"]),
    ("RSS with 0 objects MB", lambda r: r["baseline_rss_mb"]),
    ("RSS with K objects MB", lambda r: r["cold"]["rss_mb"]),
    ("memory per cached object bytes", lambda r: r["bytes_per_object"]),
]


def runs(results: dict[str, Any], scenario: str, **match: Any) -> list[dict[str, Any]]:
    return [e["result"] for e in results["runs"] if e["scenario"] == scenario and "result" in e
            and all(e.get(k) == v for k, v in match.items())]  # fmt: skip


def summary(values: list[float]) -> tuple[float, float, float] | None:
    return (statistics.median(values), min(values), max(values)) if values else None


def has_reading(get: Callable[[dict[str, Any]], float], run: dict[str, Any]) -> bool:
    """Whether `run` holds the reading `get` takes (a failed or partial run may not)."""
    try:
        get(run)
    except (KeyError, TypeError):
        return False
    return True


def ceiling_seconds(results: dict[str, Any], n: int) -> tuple[float, float, float] | None:
    return summary([r["seconds"] for r in runs(results, "limit", n=n)])


GATEWAY_ADDED = (("TTFB p50", "ttfb_p50_ms"), ("TTFB p99", "ttfb_p99_ms"), ("total p50", "total_p50_ms"),
                 ("total p99", "total_p99_ms"))  # fmt: skip


GATEWAY_TTFB = ("ttfb_p50_ms", "ttfb_p99_ms")


def gateway_levels(results: dict[str, Any]) -> dict[int, list[dict[str, Any]]]:
    """Every run's reading of each concurrency level of the gateway scenario, by concurrency."""
    levels: dict[int, list[dict[str, Any]]] = {}
    for r in runs(results, "gateway"):
        for level in r.get("levels", []):
            levels.setdefault(level["concurrency"], []).append(level)
    return levels


def paced_streams(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every run's paced-stream phase of the gateway scenario."""
    return [r["paced_streams"] for r in runs(results, "gateway") if "paced_streams" in r]


PICKER_ROWS: list[Row] = [
    ("key + pick, wall p50 ms", lambda r: r["paced"]["pick_p50_ms"]),
    ("key + pick, wall p99 ms", lambda r: r["paced"]["pick_p99_ms"]),
    ("key + pick, CPU p50 ms", lambda r: r["paced"]["pick_cpu_p50_ms"]),
    ("key + pick, CPU p99 ms", lambda r: r["paced"]["pick_cpu_p99_ms"]),
    ("requests/s achieved", lambda r: r["paced"]["achieved_rate"]),
    ("blocks per request (median)", lambda r: r["paced"]["blocks_median"]),
    ("busiest / idlest endpoint's requests", lambda r: r["paced"]["busiest_over_idlest"] or 0.0),
    ("prefix index after M distinct prompts MB", lambda r: r["memory"]["index_mb"]),
    ("prefix index after M distinct prompts, blocks", lambda r: r["memory"]["index_blocks"]),
    ("routing key of the largest body (worst of 4 shapes) ms", lambda r: max_key_ms(r)),
    ("scan of a 1 MiB vLLM metrics page ms", lambda r: r["worst"]["metrics_page_ms"]),
]


def max_key_ms(run: dict[str, Any]) -> float:
    """The slowest routing key among the picker scenario's worst inputs."""
    return max(float(value) for name, value in run["worst"].items() if name.startswith("key_"))


GROWTH_PER_OBJECT = (("wall ms", "wall_ms"), ("manager CPU ms", "cpu_ms"), ("API requests", "requests"),
                     ("API writes", "writes"), ("peak RSS above start-up KB", "rss_kb"))  # fmt: skip


def growth_runs(results: dict[str, Any], subject: str) -> dict[int, list[dict[str, Any]]]:
    """The growth scenario's runs of one subject, by N."""
    by_n: dict[int, list[dict[str, Any]]] = {}
    for e in results["runs"]:
        if e["scenario"] == "growth" and e.get("subject") == subject and "result" in e:
            by_n.setdefault(e["n"], []).append(e["result"])
    return dict(sorted(by_n.items()))
