"""`make bench`: every scenario, subjects alternating between repetitions, results in bench/results/.

    .venv/bin/python bench/run.py            # full run (BENCH_* variables: see suite/settings.py, README)
    BENCH_QUICK=1 .venv/bin/python bench/run.py
    BENCH_SCENARIOS=runtime .venv/bin/python bench/run.py
    .venv/bin/python bench/run.py --report-only   # summary and plots again from results/raw.json

Writes results/raw.json (every run, updated after each one), results/summary.md and results/*.png, and
prints the summary. A run that fails is recorded with its error and the suite goes on.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from suite import (
    admission_bench,
    autoscale_bench,
    controllers_bench,
    gateway_bench,
    gateway_proxies,
    golang,
    growth_bench,
    limit_bench,
    llmd_epp,
    memory_bench,
    picker_bench,
    report,
    routing_bench,
    runtime_bench,
    serving_bench,
    tenancy_bench,
)
from suite.settings import Settings
from suite.subjects import GO_CERT_DIR
from suite.templates import load_templates


class Suite:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.log_dir = settings.results_dir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.raw_path = settings.results_dir / "raw.json"
        self.results: dict[str, Any] = {
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
            "settings": {k: str(v) for k, v in dataclasses.asdict(settings).items()},
            "runs": [],
        }

    def save(self) -> None:
        self.raw_path.write_text(json.dumps(self.results, indent=1))

    def record(self, scenario: str, labels: dict[str, Any], run: Callable[[], dict[str, Any]]) -> None:
        print(f"[bench] {scenario} {labels} ...", flush=True)
        started = time.monotonic()
        entry: dict[str, Any] = {"scenario": scenario, **labels}
        try:
            entry["result"] = run()
        except Exception as err:
            entry["error"] = f"{type(err).__name__}: {err}"
            traceback.print_exc()
        entry["elapsed"] = time.monotonic() - started
        print(f"[bench]   done in {entry['elapsed']:.0f}s{' (FAILED)' if 'error' in entry else ''}", flush=True)
        self.results["runs"].append(entry)
        self.save()

    def order(self, rep: int) -> tuple[str, ...]:
        subjects = self.settings.subjects
        return subjects if rep % 2 == 0 else tuple(reversed(subjects))


def go_subjects(suite: Suite) -> tuple[golang.GoLlmaz | None, Path | None]:
    cache = suite.settings.cache_dir
    info: dict[str, Any] = {}
    llmaz_go: golang.GoLlmaz | None = None
    noop: Path | None = None
    try:
        llmaz_go = golang.llmaz_manager(cache)
        info["llmaz"] = {
            "version": llmaz_go.version, "origin": llmaz_go.origin, "binary": str(llmaz_go.binary),
            "skipped": llmaz_go.notes,
        }  # fmt: skip
    except golang.GoUnavailableError as err:
        info["llmaz_error"] = str(err)
    try:
        noop = golang.go_noop(cache)
        info["noop"] = str(noop)
    except golang.GoUnavailableError as err:
        info["noop_error"] = str(err)
    suite.results["go"] = info
    return llmaz_go, noop


def controllers(suite: Suite, go: golang.GoLlmaz | None) -> None:
    s = suite.settings
    for n in s.sizes:
        for rep in range(s.repeats):
            for name in suite.order(rep):
                if name == "go" and go is None:
                    continue
                run = partial(controllers_bench.run_once, s, name, n, n == max(s.sizes),
                              go.binary if go else None, go.crd_dir if go else None, suite.log_dir)  # fmt: skip
                suite.record("controllers", {"subject": name, "n": n, "rep": rep}, run)


def runtime(suite: Suite, noop: Path | None) -> None:
    s = suite.settings
    for rep in range(s.repeats):
        for name in suite.order(rep):
            if name == "go" and noop is None:
                continue
            run = partial(runtime_bench.run_once, name, s.runtime_objects, noop, suite.log_dir, s.timeout)
            suite.record("runtime", {"subject": name, "k": s.runtime_objects, "rep": rep}, run)


def admission(suite: Suite, go: golang.GoLlmaz | None) -> None:
    s = suite.settings
    rates = list(s.admission_rates)
    try:
        loader = golang.go_load(s.cache_dir)
    except golang.GoUnavailableError as err:
        suite.results["go"]["load_error"] = str(err)
        return
    runners: dict[str, Callable[[], list[dict[str, Any]]]] = {
        "python": lambda: admission_bench.python_run(loader, rates, s.admission_seconds)
    }
    if go is not None:
        runners["go"] = lambda: admission_bench.go_run(loader, go.binary, go.crd_dir, rates, s.admission_seconds,
                                                       suite.log_dir)  # fmt: skip
    for rep in range(s.repeats):
        for name in suite.order(rep):
            if name in runners:
                suite.record("admission", {"subject": name, "rep": rep}, partial(_rates, runners[name]))


def _rates(runner: Callable[[], list[dict[str, Any]]]) -> dict[str, Any]:
    return {"rates": runner()}


def limit(suite: Suite) -> None:
    s = suite.settings
    templates = load_templates(s.results_dir / "templates.json")
    if templates is None:
        controllers_bench.run_once(s, "python", 1, False, None, None, suite.log_dir)
        templates = load_templates(s.results_dir / "templates.json")
    assert templates is not None
    for n in s.sizes:
        for rep in range(s.repeats):
            suite.record("limit", {"subject": "raw", "n": n, "rep": rep}, partial(limit_bench.run_once, templates, n))


def loader(suite: Suite) -> None:
    s = suite.settings
    for rep in range(s.repeats):
        run = partial(serving_bench.loader_run, s.loader_megabytes, suite.log_dir)
        suite.record("loader", {"subject": "python", "rep": rep}, run)


def serving(suite: Suite) -> None:
    s = suite.settings
    suite.record("serving", {"subject": "python"}, partial(serving_bench.serving_run, s.repeats, suite.log_dir))


def routing(suite: Suite) -> None:
    s = suite.settings
    ladder = routing_bench.Ladder(s.trace_unloaded_rate, s.trace_rates, s.trace_step_seconds)
    llmd = llmd_epp.llmd_binary(os.environ, s.cache_dir)  # llm-d's EPP as one more strategy when it is built
    run = partial(
        routing_bench.run_once,
        suite.log_dir,
        s.repeats,
        workloads=s.serving_workloads,
        ladder=ladder,
        llmd=llmd,
        strategies=s.serving_strategies,
    )
    suite.record("routing", {"subject": "python"}, run)


def autoscale(suite: Suite) -> None:
    s = suite.settings
    staircase = autoscale_bench.Staircase(
        s.autoscale_streams, s.autoscale_warm_seconds, s.autoscale_step_seconds, s.autoscale_idle_seconds
    )
    suite.record("autoscale", {"subject": "python"}, partial(autoscale_bench.run_once, staircase, suite.log_dir))


def tenancy(suite: Suite) -> None:
    s = suite.settings
    if len(s.tenancy_fair_streams) != 2:
        raise SystemExit(f"BENCH_TENANCY_FAIR_STREAMS must be two stream counts, got {s.tenancy_fair_streams}")
    plan = tenancy_bench.Plan(
        seconds=s.tenancy_seconds,
        rate=s.tenancy_rate,
        batch_streams=s.tenancy_batch_streams,
        fair_streams=(s.tenancy_fair_streams[0], s.tenancy_fair_streams[1]),
        warmup=min(10.0, s.tenancy_seconds / 4),
        tpm=s.tenancy_tpm,
    )
    suite.record("tenancy", {"subject": "python"}, partial(tenancy_bench.run_once, plan, suite.log_dir))


def memory(suite: Suite) -> None:
    s = suite.settings
    for rep in range(s.repeats):
        run = partial(memory_bench.run_once, s.memory_objects, suite.log_dir, s.max_concurrent_reconciles)
        suite.record("memory", {"subject": "python", "k": s.memory_objects, "rep": rep}, run)


def gateway(suite: Suite) -> None:
    s = suite.settings
    try:
        loader = golang.go_gwload(s.cache_dir)
    except golang.GoUnavailableError as err:
        suite.results.setdefault("go", {})["gwload_error"] = str(err)
        print(f"[bench] gateway: no load generator: {err}", flush=True)
        return
    simulator: Path | None = None
    if s.gateway_stream_concurrency > 0:
        try:
            simulator = golang.go_enginesim(s.cache_dir)
        except golang.GoUnavailableError as err:
            suite.results.setdefault("go", {})["enginesim_error"] = str(err)
            print(f"[bench] gateway: no engine simulator, no paced streams: {err}", flush=True)
    stream_load = gateway_proxies.StreamLoad(
        s.gateway_stream_concurrency, s.gateway_stream_tps, s.gateway_stream_tokens, s.gateway_stream_seconds,
        s.gateway_stream_blocks,
    )  # fmt: skip
    epp_load = gateway_proxies.EppLoad(s.gateway_epp_rate, s.gateway_epp_seconds, s.gateway_epp_streams,
                                     s.gateway_epp_prefixes)  # fmt: skip
    for rep in range(s.repeats):
        run = partial(gateway_bench.run_once, loader, s.gateway_concurrency, s.gateway_requests, s.gateway_blocks,
                      s.gateway_streams, suite.log_dir, s.gateway_block_seconds, s.gateway_flags, simulator,
                      stream_load, epp_load, s.gateway_stream_subjects)  # fmt: skip
        suite.record("gateway", {"subject": "python", "rep": rep}, run)


def picker(suite: Suite) -> None:
    s = suite.settings
    for rep in range(s.repeats):
        run = partial(picker_bench.run_once, s.picker_rate, s.picker_seconds, s.picker_conversations,
                      s.picker_prompts)  # fmt: skip
        suite.record("picker", {"subject": "python", "rep": rep}, run)


def growth(suite: Suite, go: golang.GoLlmaz | None) -> None:
    s = suite.settings
    for n in s.growth_sizes:
        for name in s.growth_subjects:
            if name == "go" and go is None:
                continue
            run = partial(growth_bench.run_once, s, name, n, go.binary if go else None, go.crd_dir if go else None,
                          suite.log_dir)  # fmt: skip
            suite.record("growth", {"subject": name, "n": n}, run)


def main() -> None:
    settings = Settings.from_env()
    if "--report-only" in sys.argv:  # redraw summary.md and the plots from an earlier (or running) raw.json
        print(report.write(json.loads((settings.results_dir / "raw.json").read_text()), settings.results_dir))
        return
    suite = Suite(settings)
    created_cert_dir = not GO_CERT_DIR.exists()
    needs_go = {"controllers", "runtime", "admission"} & set(settings.scenarios) or (
        "growth" in settings.scenarios and "go" in settings.growth_subjects
    )
    go, noop = go_subjects(suite) if needs_go else (None, None)
    try:
        if "controllers" in settings.scenarios:
            controllers(suite, go)
        if "runtime" in settings.scenarios:
            runtime(suite, noop)
        if "admission" in settings.scenarios:
            admission(suite, go)
        if "limit" in settings.scenarios:
            limit(suite)
        if "loader" in settings.scenarios:
            loader(suite)
        if "serving" in settings.scenarios:
            serving(suite)
        if "routing" in settings.scenarios:
            routing(suite)
        if "memory" in settings.scenarios:
            memory(suite)
        if "gateway" in settings.scenarios:
            gateway(suite)
        if "growth" in settings.scenarios:
            growth(suite, go)
        if "picker" in settings.scenarios:
            picker(suite)
        if "autoscale" in settings.scenarios:
            autoscale(suite)
        if "tenancy" in settings.scenarios:
            tenancy(suite)
    finally:
        suite.save()
        if created_cert_dir:
            shutil.rmtree(GO_CERT_DIR.parent, ignore_errors=True)
    print(report.write(suite.results, settings.results_dir))


if __name__ == "__main__":
    main()
