"""The report: Markdown tables of medians (with min-max spread) and Python/Go ratios, the targets, and plots.

Every figure is the median over the repetitions of a scenario; the spread in brackets is min-max. Ratios
are Python median / Go median (below 1 means ours is faster or smaller).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from suite import plots, targets
from suite.readings import (
    CONTROLLER_ROWS,
    GATEWAY_ADDED,
    GATEWAY_STREAM_READINGS,
    GATEWAY_TTFB,
    GROWTH_PER_OBJECT,
    PICKER_ROWS,
    RUNTIME_ROWS,
    STEADY_ROWS,
    Row,
    ceiling_seconds,
    gateway_levels,
    growth_runs,
    has_reading,
    paced_streams,
    runs,
    summary,
)


def cell(stat: tuple[float, float, float] | None) -> str:
    if stat is None:
        return "n/a"
    med, lo, hi = stat
    digits = 0 if abs(med) >= 100 else 2
    return f"{med:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f})" if lo != hi else f"{med:.{digits}f}"


def ratio(py: tuple[float, float, float] | None, go: tuple[float, float, float] | None) -> str:
    return f"{py[0] / go[0]:.2f}" if py and go and go[0] else "n/a"


def compare(rows: list[Row], py_runs: list[dict[str, Any]], go_runs: list[dict[str, Any]]) -> list[str]:
    lines = ["| metric | Python | Go | Python/Go |", "|---|---|---|---|"]
    for label, get in rows:
        py = summary([get(r) for r in py_runs if has_reading(get, r)])
        go = summary([get(r) for r in go_runs if has_reading(get, r)])
        lines.append(f"| {label} | {cell(py)} | {cell(go)} | {ratio(py, go)} |")
    return lines


def controllers_section(results: dict[str, Any]) -> list[str]:
    sizes = sorted({e["n"] for e in results["runs"] if e["scenario"] == "controllers"})
    lines: list[str] = []
    for n in sizes:
        py, go = runs(results, "controllers", subject="python", n=n), runs(results, "controllers", subject="go", n=n)
        lines += ["", f"### Convergence, N = {n} (runs: Python {len(py)}, Go {len(go)})", ""]
        rows = CONTROLLER_ROWS + ([] if n != max(sizes) else STEADY_ROWS)
        lines += compare(rows, py, go)
        ceiling = ceiling_seconds(results, n)
        if ceiling:
            total = CONTROLLER_ROWS[2][1]
            fractions = [f"{name}: {ceiling[0] / statistics.median([total(r) for r in rs]):.2f}"
                         for name, rs in (("Python", py), ("Go", go)) if rs]  # fmt: skip
            lines += ["", f"Ceiling (raw client, same writes): {cell(ceiling)} s; ceiling / total wall time: "
                      + ", ".join(fractions) + " (1.0 = as fast as the API server allows)."]  # fmt: skip
    return lines


def runtime_section(results: dict[str, Any]) -> list[str]:
    py, go = runs(results, "runtime", subject="python"), runs(results, "runtime", subject="go")
    if not py and not go:
        return []
    k = next(e["k"] for e in results["runs"] if e["scenario"] == "runtime")
    return ["", f"### Runtime alone, no-op reconciler, K = {k} ConfigMaps (runs: Python {len(py)}, Go {len(go)})",
            "", *compare(RUNTIME_ROWS, py, go)]  # fmt: skip


def admission_section(results: dict[str, Any]) -> list[str]:
    lines = ["| subject | rate/s | requests | p50 ms | p99 ms | max ms | errors | server CPU s | load 1m |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    found = False
    for subject in ("python", "go"):
        all_rows = [row for r in runs(results, "admission", subject=subject) for row in r["rates"]]
        for rate in sorted({row["rate"] for row in all_rows}):
            rows = [row for row in all_rows if row["rate"] == rate]
            found = True
            stat = {key: summary([row[key] for row in rows if key in row]) for key in
                    ("requests", "p50_ms", "p99_ms", "max_ms", "errors", "server_cpu_seconds", "load_1m")}  # fmt: skip
            lines.append(f"| {subject} | {rate} | " + " | ".join(cell(v) for v in stat.values()) + " |")
    title = "### Admission latency (loopback HTTPS, open loop, load from bench/go-load)"
    return ["", title, "", *lines] if found else []


def limit_section(results: dict[str, Any]) -> list[str]:
    sizes = sorted({e["n"] for e in results["runs"] if e["scenario"] == "limit"})
    lines = ["| N | wall s | writes/s | control-plane CPU s | driver CPU s | failures |", "|---|---|---|---|---|---|"]
    for n in sizes:
        rs = runs(results, "limit", n=n)
        keys = ("seconds", "writes_per_second", "control_plane_cpu_seconds", "driver_cpu_seconds", "failures")
        lines.append(f"| {n} | " + " | ".join(cell(summary([r[k] for r in rs])) for k in keys) + " |")
    return ["", "### The limit: raw client, 8 writes per Playground, no controller", "", *lines] if sizes else []


def loader_section(results: dict[str, Any]) -> list[str]:
    rs = runs(results, "loader")
    if not rs:
        return []
    keys = ("loader_mb_per_s", "boto3_mb_per_s", "ratio")
    lines = ["| MB | loader MB/s | boto3 MB/s | loader/boto3 (goal >= 0.8) |", "|---|---|---|---|"]
    lines.append(f"| {rs[0]['megabytes']} | " + " | ".join(cell(summary([r[k] for r in rs])) for k in keys) + " |")
    return ["", "### Model loader download throughput (local S3-compatible store, best of two each)", "", *lines]


def serving_section(results: dict[str, Any]) -> list[str]:
    rs = runs(results, "serving")
    if not rs:
        return []
    phases = [p for r in rs for p in r["phases"]]
    names = list(dict.fromkeys(name for p in phases for name in p))  # the wake is missing where it failed
    lines = ["| phase (seconds after apply) | median (min-max) |", "|---|---|"]
    lines += [f"| {name} | {cell(summary([p[name] for p in phases if name in p]))} |" for name in names]
    lines += [f"| wake failed | {error} |" for r in rs for error in r.get("wake_errors", [])]
    up = cell(summary([r["node_up_seconds"] for r in rs]))
    installed = cell(summary([r["installed_seconds"] for r in rs]))
    title = (
        f"### Time to first token of the tiny model on the real node (node up {up} s, llmaz installed {installed} s)"
    )
    return ["", title, "", *lines]


def routing_section(results: dict[str, Any]) -> list[str]:
    from suite import routing_bench

    return [
        line
        for r in runs(results, "routing")
        for line in ("", "### Routing on the real node: what each strategy makes the engines prefill", "",
                     routing_bench.report(r))
    ]  # fmt: skip


def autoscale_section(results: dict[str, Any]) -> list[str]:
    from suite import autoscale_bench

    return [
        line
        for r in runs(results, "autoscale")
        for line in ("", "### Autoscaling on the real node: a staircase of streams through the gateway", "",
                     autoscale_bench.report(r))
    ]  # fmt: skip


def tenancy_section(results: dict[str, Any]) -> list[str]:
    from suite import tenancy_bench

    return [
        line
        for r in runs(results, "tenancy")
        for line in ("", "### Tenancy on the real node: priority, fairness and budgets under flow control", "",
                     tenancy_bench.report(r))
    ]  # fmt: skip


def memory_section(results: dict[str, Any]) -> list[str]:
    rs = runs(results, "memory")
    if not rs:
        return []
    rows: list[Row] = [
        ("RSS, no unrelated objects MB", lambda r: r["none"]["rss_mb"]),
        ("RSS, 3K unrelated objects MB", lambda r: r["unrelated"]["rss_mb"]),
        ("RSS ratio (goal <= 1.10)", lambda r: r["rss_ratio"]),
        ("peak RSS, no unrelated objects MB", lambda r: r["none"]["peak_rss_mb"]),
        ("peak RSS, 3K unrelated objects MB", lambda r: r["unrelated"]["peak_rss_mb"]),
        ("peak RSS ratio", lambda r: r["peak_rss_ratio"]),
        ("start to caches synced, none s", lambda r: r["none"]["synced_seconds"]),
        ("start to caches synced, 3K unrelated s", lambda r: r["unrelated"]["synced_seconds"]),
        ("creating the 3K objects s", lambda r: r["create_seconds"]),
    ]
    lines = ["| reading | median (min-max) |", "|---|---|"]
    lines += [f"| {label} | {cell(summary([get(r) for r in rs]))} |" for label, get in rows]
    title = f"### Memory in a large cluster: K = {rs[0]['k']} unrelated Services, HPAs and LWS each (Python)"
    return ["", title, "", *lines]


def gateway_section(results: dict[str, Any]) -> list[str]:
    rs = runs(results, "gateway")
    if not rs:
        return []
    lines = [*_gateway_fast_engine(rs, gateway_levels(results)), *_gateway_paced_streams(results)]
    flags = {" ".join(r.get("gateway_flags", [])) for r in rs}
    if flags != {""}:
        lines += ["", "Gateway flags (BENCH_GATEWAY_FLAGS): " + "; ".join(f"`{f}`" if f else "none" for f in flags)]
    return lines


def _gateway_fast_engine(rs: list[dict[str, Any]], levels: dict[int, list[dict[str, Any]]]) -> list[str]:
    lines: list[str] = []
    if levels:
        columns = [f"{label} added ms" for label, _ in GATEWAY_ADDED]
        columns += ["direct TTFB p50 / p99 ms", "gateway TTFB p50 / p99 ms"]
        added = ["| concurrency | answer | " + " | ".join(columns) + " |", "|---" * (len(columns) + 2) + "|"]
        load = ["| concurrency | requests/s direct | requests/s gateway | gateway CPU us per request | errors | "
                "load 1m |", "|---|---|---|---|---|---|"]  # fmt: skip
        for c, ls in sorted(levels.items()):
            for kind in ("stream", "plain"):
                cells = [cell(summary([lv[kind]["added"][key] for lv in ls])) for _, key in GATEWAY_ADDED]
                absolute = [" / ".join(cell(summary([lv[kind][s][key] for lv in ls])) for key in GATEWAY_TTFB)
                            for s in ("direct", "gateway")]  # fmt: skip
                added.append(f"| {c} | {kind} | " + " | ".join([*cells, *absolute]) + " |")
            rates = [cell(summary([lv["requests_per_second"][s] for lv in ls])) for s in ("direct", "gateway")]
            cpu = cell(summary([lv["gateway_cpu_us_per_request"] for lv in ls]))
            errors = sum(lv["errors"][s] for lv in ls for s in ("direct", "gateway"))
            load.append(
                f"| {c} | {rates[0]} | {rates[1]} | {cpu} | {errors} | {cell(summary([lv['load_1m'] for lv in ls]))} |"
            )
        blocks = f"{rs[0]['blocks_per_subject']} blocks x {rs[0]['requests_per_block']} requests per subject and level"
        lines += ["", f"### Gateway: latency added to a fast fake engine, closed loop (runs: {len(rs)}; {blocks})", "",
                  *added, "", *load]  # fmt: skip
    with_memory = [r for r in rs if "memory" in r]
    if with_memory:
        memory_rows: list[Row] = [
            ("gateway RSS, no stream open MB", lambda r: r["memory"]["rss_before_mb"]),
            ("gateway RSS, K streams open MB", lambda r: r["memory"]["rss_open_mb"]),
            ("KiB per open stream", lambda r: r["memory"]["kib_per_stream"]),
            ("KiB per open stream, second half (K/2 -> K)", lambda r: r["memory"]["kib_per_stream_second_half"]),
            ("gateway RSS after closing them MB", lambda r: r["memory"]["rss_closed_mb"]),
            ("gateway open files added by the K streams",
             lambda r: r["memory"]["fds_open"] - r["memory"]["fds_before"]),
        ]  # fmt: skip
        memory = ["| reading | median (min-max) |", "|---|---|"]
        memory += [f"| {label} | {cell(summary([get(r) for r in with_memory]))} |" for label, get in memory_rows]
        lines += ["", f"### Gateway: memory per open stream, K = {with_memory[0]['memory']['streams']} "
                  f"(runs: {len(with_memory)})", "", *memory]  # fmt: skip
    return lines


def _gateway_paced_streams(results: dict[str, Any]) -> list[str]:
    ps = paced_streams(results)
    if not ps:
        return []
    first = ps[0]

    def row(label: str, get: Callable[[dict[str, Any]], float]) -> str:
        return f"| {label} | {cell(summary([get(p) for p in ps]))} |"

    percentiles = ["| reading | direct p50 / p99 / p99.9 ms | gateway p50 / p99 / p99.9 ms | added p50 ms | "
                   "added p99 ms | added p99.9 ms |", "|---|---|---|---|---|---|"]  # fmt: skip
    for label, key in GATEWAY_STREAM_READINGS:
        absolute = [" / ".join(cell(summary([p[s][key][pct] for p in ps])) for pct in ("p50", "p99", "p999"))
                    for s in ("direct", "gateway")]  # fmt: skip
        added = [cell(summary([p["added"][key][pct] for p in ps])) for pct in ("p50", "p99", "p999")]
        percentiles.append(f"| {label} | " + " | ".join([*absolute, *added]) + " |")
    costs = ["| reading | median (min-max) |", "|---|---|",
             row("chunks relayed per second (gateway blocks)", lambda p: p["chunks_per_second"]["gateway"]),
             row("chunks relayed per second of gateway CPU", lambda p: p["chunks_per_gateway_cpu_second"]),
             row("gateway CPU while relaying, % of a core", lambda p: 100 * p["gateway_core_while_relaying"]),
             row("gateway RSS at the end MB", lambda p: p["gateway_rss_mb"]),
             row("gateway peak RSS MB", lambda p: p["gateway_peak_rss_mb"]),
             row("go-enginesim CPU, % of a core (GOMAXPROCS=1)", lambda p: 100 * p["simulator_core"]),
             row("go-gwload CPU, % of a core", lambda p: 100 * p["loader_core"]),
             row("streams direct", lambda p: p["streams"]["direct"]),
             row("streams through the gateway", lambda p: p["streams"]["gateway"]),
             row("errors", lambda p: p["errors"]["direct"] + p["errors"]["gateway"]),
             row("load 1m before", lambda p: p["load_1m"])]  # fmt: skip
    title = (
        f"### Gateway: paced streams from go-enginesim, {first['concurrency']} in flight x "
        f"{first['tokens_per_second']:g} tokens/s, {first['tokens']} tokens each (runs: {len(ps)}; "
        f"{first['blocks_per_subject']} blocks x {first['seconds']:g} s per subject)"
    )
    return ["", title, "", *percentiles, "", *costs]


def picker_section(results: dict[str, Any]) -> list[str]:
    rs = runs(results, "picker")
    if not rs:
        return []
    rows = ["| reading | median (min-max) |", "|---|---|"]
    rows += [f"| {label} | {cell(summary([get(r) for r in rs]))} |" for label, get in PICKER_ROWS]
    paced, prompts = rs[0]["paced"]["requests"], rs[0]["memory"]["prompts"]
    return ["", f"### Picker: prefix-aware, 8 endpoints, {paced} paced chat requests, M = {prompts} "
            f"(runs: {len(rs)})", "", *rows]  # fmt: skip


def growth_section(results: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for subject in ("python", "go"):
        by_n = growth_runs(results, subject)
        if not by_n:
            continue
        columns = ["N", "runs", "total wall s", *(f"{label} / Playground" for label, _ in GROWTH_PER_OBJECT)]
        table = ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
        for n, rs in by_n.items():
            total = cell(summary([r["converge"]["seconds"] + r["available"]["seconds"] for r in rs]))
            per = [cell(summary([r["per_object"][key] for r in rs])) for _, key in GROWTH_PER_OBJECT]
            table.append(f"| {n} | {len(rs)} | {total} | " + " | ".join(per) + " |")
        lines += ["", f"### Growth: cost per Playground as N grows ({subject})", "", *table]
        cold = {n: [r["cold"] for r in rs if "cold" in r] for n, rs in by_n.items()}
        if any(cold.values()):
            rows = ["| N | s to every object reconciled | ms / Playground | manager CPU s | writes | RSS above "
                    "start-up KB / Playground |", "|---|---|---|---|---|---|"]  # fmt: skip
            for n, cs in cold.items():
                if cs:
                    values = [summary([c["seconds"] for c in cs]), summary([1000 * c["seconds"] / n for c in cs]),
                              summary([c["cpu_seconds"] for c in cs]), summary([c["writes"] for c in cs]),
                              summary([c["rss_kb_per_object"] for c in cs])]  # fmt: skip
                    rows.append(f"| {n} | " + " | ".join(cell(v) for v in values) + " |")
            lines += ["", f"### Cold start over N converged Playgrounds ({subject}): list, cache fill, one reconcile "
                      "each", "", *rows]  # fmt: skip
    return lines


def failures_section(results: dict[str, Any]) -> list[str]:
    failed = [e for e in results["runs"] if "error" in e]
    if not failed:
        return []
    return ["", "### Failed runs", "", *(f"- {e['scenario']} {e.get('subject')} n={e.get('n', e.get('k', '-'))} "
                                         f"rep={e.get('rep')}: {e['error'][:300]}" for e in failed)]  # fmt: skip


def go_section(results: dict[str, Any]) -> list[str]:
    go = results.get("go", {})
    llmaz = go.get("llmaz")
    if llmaz:
        skipped = "".join(f"\n  - skipped {' '.join(note.split())[:300]}" for note in llmaz.get("skipped", []))
        origin = f", built from {llmaz['origin']}" if llmaz.get("origin") else ""
        return [f"- Go llmaz manager: {llmaz['version']}{origin}{skipped}"]
    return [f"- Go llmaz manager: unavailable: {go.get('llmaz_error', 'not built')[:400]}"]


def write(results: dict[str, Any], out: Path) -> str:
    header = ["# llmaz benchmark results", "", f"- started {results['started']}, machine {results['machine']}",
              *go_section(results)]  # fmt: skip
    body = [*controllers_section(results), *runtime_section(results), *admission_section(results),
            *limit_section(results), *loader_section(results), *serving_section(results), *routing_section(results),
            *memory_section(results), *gateway_section(results), *growth_section(results), *picker_section(results),
            *autoscale_section(results), *tenancy_section(results), *targets.section(results),
            *failures_section(results)]  # fmt: skip
    text = "\n".join([*header, *body]) + "\n"
    (out / "summary.md").write_text(text)
    images = plots.draw(results, out)
    return text + "".join(f"\nplot: {p}" for p in images)
