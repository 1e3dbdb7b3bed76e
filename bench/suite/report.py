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
    names = [n for n in first["subjects"] if all(n in p["subjects"] for p in ps)]

    def med(name: str, *path: str) -> str:
        values = []
        for p in ps:
            value: Any = p["subjects"][name]
            for key in path:
                value = value[key]
            values.append(float(value))
        return cell(summary(values))

    def pcts(name: str, which: str, reading: str, keys: tuple[str, ...] = ("p50", "p99", "p999")) -> str:
        return " / ".join(med(name, which, reading, k) for k in keys)

    rows = ["| subject | chunk delay p50 / p99 / p99.9 ms | its direct blocks' chunk delay ms | added chunk delay "
            "p99 ms | TTFB p50 / p99 ms | CPU per chunk us, by process | streams | failed | chunks intact |",
            "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name in names:
        roles = [k for k in first["subjects"][name]["cpu_us_per_chunk"] if k != "total"]
        cpu = ", ".join(f"{role} {med(name, 'cpu_us_per_chunk', role)}" for role in roles)
        if len(roles) > 1:
            cpu += f"; together {med(name, 'cpu_us_per_chunk', 'total')}"
        failed = sum(p["subjects"][name]["errors"] + p["subjects"][name]["direct_errors"] for p in ps)
        intact = "yes" if all(p["subjects"][name]["intact"] for p in ps) else "no"
        ttfb = pcts(name, "percentiles", "ttfb", ("p50", "p99"))
        rows.append(f"| {name} | {pcts(name, 'percentiles', 'chunk_delay')} | {pcts(name, 'direct', 'chunk_delay')} "
                    f"| {med(name, 'added', 'chunk_delay', 'p99')} | {ttfb} | {cpu} | {med(name, 'streams')} "
                    f"| {failed} | {intact} |")  # fmt: skip
    title = (
        f"### Gateway: paced streams from go-enginesim, {first['concurrency']} in flight x "
        f"{first['tokens_per_second']:g} tokens/s, {first['tokens']} tokens each (runs: {len(ps)}; "
        f"{first['blocks_per_subject']} blocks x {first['seconds']:g} s per subject and proxy, ABBA with direct)"
    )
    return ["", title, "", *rows, *_gateway_epp(results)]


def _gateway_epp(results: dict[str, Any]) -> list[str]:
    es = [r["epp"] for r in runs(results, "gateway") if "epp" in r]
    if not es:
        return []

    def row(label: str, key: str, get: Callable[[dict[str, Any]], float]) -> str:
        return f"| {label} | {cell(summary([get(e[key]) for e in es if key in e]))} |"

    lines = ["| reading (Envoy 1 worker + EPP, BUFFERED, prefix-aware) | median (min-max) |", "|---|---|"]
    if any("decision" in e for e in es):
        lines += [row("requests/s sent (open loop)", "decision", lambda d: d["achieved_rate"]),
                  row("EPP decision p50 ms (histogram)", "decision", lambda d: d["p50_ms"]),
                  row("EPP decision p99 ms (histogram)", "decision", lambda d: d["p99_ms"]),
                  row("decisions within 2 ms %", "decision", lambda d: 100 * d["share_within_bound"]),
                  row("client latency p99 ms", "decision", lambda d: d["client_p99_ms"]),
                  row("EPP CPU per request us", "decision", lambda d: d["cpu_us_per_request"]["epp"]),
                  row("Envoy CPU per request us", "decision", lambda d: d["cpu_us_per_request"]["envoy"]),
                  row("failed requests", "decision", lambda d: d["failed"])]  # fmt: skip
    if any("streams" in e for e in es):
        lines += [row("EPP RSS, no stream open MB", "streams", lambda m: m["rss_before_mb"]),
                  row("EPP RSS, K streams open MB", "streams", lambda m: m["rss_open_mb"]),
                  row("EPP KiB per open stream", "streams", lambda m: m["kib_per_stream"])]  # fmt: skip
    if any("held" in e for e in es):
        lines += [row("EPP RSS, no request held MB", "held", lambda m: m["rss_before_mb"]),
                  row("EPP RSS, K requests held (a model not ready) MB", "held", lambda m: m["rss_held_mb"]),
                  row("EPP KiB per held request", "held", lambda m: m["kib_per_request"])]  # fmt: skip
    if any("prefixes" in e for e in es):
        lines += [row("EPP RSS, prefix index empty MB", "prefixes", lambda m: m["rss_before_mb"]),
                  row("EPP RSS, prefix index filled MB", "prefixes", lambda m: m["rss_full_mb"]),
                  row("prompt blocks indexed", "prefixes", lambda m: m["blocks_indexed"]),
                  row("bytes per indexed block", "prefixes", lambda m: m["bytes_per_block"])]  # fmt: skip
    streams = next((e["streams"]["streams"] for e in es if "streams" in e), 0)
    return ["", f"### Gateway: the endpoint picker (runs: {len(es)}; K = {streams})", "", *lines]


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
