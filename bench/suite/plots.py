"""PNG plots of the results (matplotlib, headless). Each function draws one figure and returns its path."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from suite.readings import CONTROLLER_ROWS, GROWTH_PER_OBJECT, RUNTIME_ROWS, growth_runs, runs

COLORS = {"python": "tab:blue", "go": "tab:orange"}


def timeline(results: dict[str, Any], out: Path) -> Path | None:
    sizes = [e["n"] for e in results["runs"] if e["scenario"] == "controllers" and "result" in e]
    if not sizes:
        return None
    n = max(sizes)
    fig, ax = plt.subplots(figsize=(9, 5))
    for subject, color in COLORS.items():
        found = runs(results, "controllers", subject=subject, n=n)
        if not found:
            continue
        lines = found[0]["timelines"]
        for key, style in (("playground_progressing", "--"), ("playground_available", "-")):
            points = lines.get(key, [])
            ax.step([t for t, _ in points], [v for _, v in points], style, color=color, where="post",
                    label=f"{subject}: {key.split('_')[1]}")  # fmt: skip
    ax.set(xlabel="seconds since the first create", ylabel="Playgrounds", title=f"Convergence, N = {n} (first run)")
    ax.legend()
    return _save(fig, out / "convergence_timeline.png")


def bars(title: str, labels: list[str], series: dict[str, list[list[float]]], path: Path) -> Path:
    fig, axes = plt.subplots(1, len(labels), figsize=(4 * len(labels), 4))
    for ax, (i, label) in zip(list(axes) if len(labels) > 1 else [axes], enumerate(labels), strict=True):
        for j, (subject, values) in enumerate(series.items()):
            if not values[i]:
                continue
            med = statistics.median(values[i])
            err = [[med - min(values[i])], [max(values[i]) - med]]
            ax.bar(j, med, yerr=err, color=COLORS.get(subject.split()[0], "grey"), capsize=4)
        ax.set_xticks(range(len(series)), list(series), fontsize=8)
        ax.set_title(label, fontsize=9)
    fig.suptitle(title)
    return _save(fig, path)


def controller_bars(results: dict[str, Any], out: Path) -> Path | None:
    rows = [CONTROLLER_ROWS[2], CONTROLLER_ROWS[3], CONTROLLER_ROWS[4]]
    sizes = sorted({e["n"] for e in results["runs"] if e["scenario"] == "controllers"})
    series = {f"{s} N={n}": [[get(r) for r in runs(results, "controllers", subject=s, n=n)] for _, get in rows]
              for n in sizes for s in ("python", "go")}  # fmt: skip
    if not sizes:
        return None
    return bars("Convergence (median, min-max)", [label for label, _ in rows], series, out / "convergence.png")


def runtime_bars(results: dict[str, Any], out: Path) -> Path | None:
    rows = [RUNTIME_ROWS[0], RUNTIME_ROWS[2], RUNTIME_ROWS[7], RUNTIME_ROWS[11]]
    series = {s: [[get(r) for r in runs(results, "runtime", subject=s)] for _, get in rows] for s in ("python", "go")}
    if not any(any(v) for v in series.values()):
        return None
    return bars("Runtime alone (median, min-max)", [label for label, _ in rows], series, out / "runtime.png")


def admission_bars(results: dict[str, Any], out: Path) -> Path | None:
    rates = sorted({row["rate"] for e in runs(results, "admission") for row in e["rates"]})
    labels = [f"{q} at {rate}/s" for rate in rates for q in ("p50_ms", "p99_ms")]
    series = {s: [[row[q] for r in runs(results, "admission", subject=s) for row in r["rates"] if row["rate"] == rate]
                  for rate in rates for q in ("p50_ms", "p99_ms")] for s in ("python", "go")}  # fmt: skip
    if not rates:
        return None
    return bars("Admission latency, ms (median, min-max)", labels, series, out / "admission.png")


def growth(results: dict[str, Any], out: Path) -> Path | None:
    """Cost per Playground against N, log-log: flat lines are linear total cost."""
    series = {s: growth_runs(results, s) for s in ("python", "go")}
    if not any(series.values()):
        return None
    fig, axes = plt.subplots(1, len(GROWTH_PER_OBJECT), figsize=(3.6 * len(GROWTH_PER_OBJECT), 3.8))
    sizes = sorted({n for by_n in series.values() for n in by_n})
    for ax, (label, key) in zip(axes, GROWTH_PER_OBJECT, strict=True):
        values: list[float] = []
        for subject, by_n in series.items():
            points = [(n, statistics.median([r["per_object"][key] for r in rs])) for n, rs in by_n.items()]
            points = [(n, v) for n, v in points if v > 0]
            values += [v for _, v in points]
            if points:
                ax.plot([n for n, _ in points], [v for _, v in points], "o-", color=COLORS[subject], label=subject)
        ax.set(xscale="log", yscale="log", xlabel="N Playgrounds", title=f"{label} per Playground")
        # A decade of room below and above, so that noise does not look like growth.
        if values:
            ax.set_ylim(min(values) / 10, max(values) * 10)
        ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
        ax.minorticks_off()
        ax.title.set_fontsize(9)
        ax.legend(fontsize=8)
    fig.suptitle("Growth: cost per Playground against N (log-log; flat = linear)")
    return _save(fig, out / "growth.png")


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def draw(results: dict[str, Any], out: Path) -> list[Path]:
    from suite import autoscale_bench, routing_bench

    drawn = [f(results, out) for f in (timeline, controller_bars, runtime_bars, admission_bars, growth)]
    routing = [p for r in runs(results, "routing") for p in routing_bench.plot(r, out)]
    autoscale = [autoscale_bench.plot(r, out) for r in runs(results, "autoscale")]
    return [p for p in drawn if p is not None] + routing + autoscale
