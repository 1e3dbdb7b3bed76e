"""Benchmark sizes, repetitions and durations, read once from the environment.

Every knob has a full-run default and a quick-run default (`BENCH_QUICK=1`, a smoke run of a few minutes);
an explicit variable wins over both.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from suite import gateway_goals

BENCH_DIR = Path(__file__).resolve().parents[1]
REPO = BENCH_DIR.parent
ALL_SCENARIOS = (
    "controllers", "runtime", "admission", "limit", "loader", "serving", "routing", "memory", "gateway", "growth",
    "picker", "autoscale", "tenancy",
)  # fmt: skip
# Scenario 12's workloads, in the order they run (suite/routing_bench.py: WORKLOADS, then the trace).
ROUTING_WORKLOADS = ("shared-prefix", "multi-turn", "unique", "saturation", "trace")


def _cache_dir() -> Path:
    return Path(os.environ.get("LLMAZ_CACHE", Path.home() / ".cache" / "llmaz"))


def _ints(name: str, default: str) -> tuple[int, ...]:
    return tuple(int(v) for v in os.environ.get(name, default).replace(",", " ").split())


def _int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def _comma_names(name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    """Comma-separated names (they may hold spaces, unlike `_names`'), each one of `default`'s."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    names = tuple(n.strip() for n in raw.split(",") if n.strip())
    unknown = [n for n in names if n not in default]
    if unknown:
        raise ValueError(f"{name}: unknown {', '.join(unknown)}; choose from {', '.join(default)}")
    return names


def _float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def _floats(name: str, default: str) -> tuple[float, ...]:
    return tuple(float(v) for v in os.environ.get(name, default).replace(",", " ").split())


def _names(name: str, choices: tuple[str, ...]) -> tuple[str, ...]:
    chosen = tuple(os.environ.get(name, " ".join(choices)).replace(",", " ").split())
    unknown = sorted(set(chosen) - set(choices))
    if unknown:
        raise SystemExit(f"unknown {name} {unknown}; choose from {choices}")
    return tuple(c for c in choices if c in chosen)


def _comma_list(name: str) -> tuple[str, ...] | None:
    """The comma-separated names of `name`, None when it is not set."""
    raw = os.environ.get(name)
    if raw is None:
        return None
    listed = tuple(part.strip() for part in raw.split(",") if part.strip())
    if not listed:
        raise SystemExit(f"{name} names nothing; give a comma-separated list, or leave it unset for all")
    return listed


def _ladder(unloaded: float, rates: tuple[float, ...], seconds: float) -> tuple[float, tuple[float, ...], float]:
    if unloaded <= 0:
        raise SystemExit(f"BENCH_TRACE_UNLOADED_RATE must be above 0 requests/s, got {unloaded:g}")
    if not rates or any(b <= a for a, b in zip((unloaded, *rates), rates, strict=False)):
        raise SystemExit(
            f"BENCH_TRACE_RATES must rise step by step above BENCH_TRACE_UNLOADED_RATE ({unloaded:g}), got "
            f"{' '.join(f'{r:g}' for r in rates) or 'none'}: list them in increasing order, e.g. `2 3 4 6 8 11 16`"
        )
    if seconds <= 0:
        raise SystemExit(f"BENCH_TRACE_STEP_SECONDS must be above 0, got {seconds:g}")
    return unloaded, rates, seconds


@dataclass(frozen=True, slots=True)
class Settings:
    quick: bool
    sizes: tuple[int, ...]
    """BENCH_SIZES: Playground counts for the convergence scenario (full: 100 1000; quick: 20 100)."""
    repeats: int
    """BENCH_REPEATS: runs per subject and size, alternating subjects (full: 3; quick: 1)."""
    steady_seconds: float
    """BENCH_STEADY_SECONDS: idle window after convergence at the largest size (full: 60; quick: 15)."""
    runtime_objects: int
    """BENCH_RUNTIME_OBJECTS: ConfigMaps for the runtime scenario (full: 10000; quick: 2000)."""
    admission_rates: tuple[int, ...]
    """BENCH_ADMISSION_RATES: requests per second (100 500)."""
    admission_seconds: float
    """BENCH_ADMISSION_SECONDS: seconds per rate (full: 10; quick: 3)."""
    timeout: float
    """BENCH_TIMEOUT: seconds a phase may take before the run is recorded as timed out (full: 900)."""
    scenarios: tuple[str, ...]
    """BENCH_SCENARIOS: subset of controllers, runtime, admission, limit, loader, serving, routing, memory, gateway,
    growth, picker, autoscale, tenancy (default: all; serving, routing, autoscale and tenancy need root and the node
    tier's binaries and images)."""
    subjects: tuple[str, ...]
    """BENCH_SUBJECTS: subset of python, go (default: both)."""
    loader_megabytes: int
    """BENCH_LOADER_MB: size of the object the loader scenario downloads (full: 512; quick: 64)."""
    memory_objects: int
    """BENCH_MEMORY_OBJECTS: K unrelated Services, HPAs and LWS each for the memory scenario (full: 10000;
    quick: 1000)."""
    gateway_concurrency: tuple[int, ...]
    """BENCH_GATEWAY_CONCURRENCY: requests in flight for the gateway latency phase (1 50 200)."""
    gateway_requests: int
    """BENCH_GATEWAY_REQUESTS: timed requests per block of the gateway latency phase (full: 5000; quick: 1000)."""
    gateway_blocks: int
    """BENCH_GATEWAY_BLOCKS: blocks per subject (direct, gateway) and concurrency level (full: 4; quick: 2)."""
    gateway_block_seconds: float
    """BENCH_GATEWAY_BLOCK_SECONDS: longest a block may run before it stops short of its requests (60)."""
    gateway_streams: int
    """BENCH_GATEWAY_STREAMS: streams held open through the gateway for its memory per stream (full: 500; quick:
    100)."""
    gateway_stream_concurrency: int
    """BENCH_GATEWAY_STREAM_CONCURRENCY: streams in flight for the gateway's paced-stream phase, against
    go-enginesim (100; 0 skips the phase)."""
    gateway_stream_tps: float
    """BENCH_GATEWAY_STREAM_TPS: tokens per second of each simulated stream (30)."""
    gateway_stream_tokens: int
    """BENCH_GATEWAY_STREAM_TOKENS: tokens per simulated stream (256)."""
    gateway_stream_seconds: float
    """BENCH_GATEWAY_STREAM_SECONDS: how long each block of the paced-stream phase starts streams (full: 15;
    quick: 6)."""
    gateway_stream_blocks: int
    """BENCH_GATEWAY_STREAM_BLOCKS: blocks per subject (direct, the proxy) and proxy in the paced-stream phase
    (full: 2; quick: 1)."""
    gateway_stream_subjects: tuple[str, ...]
    """BENCH_GATEWAY_STREAM_SUBJECTS: the proxies of the paced-stream phase, comma-separated (default: all of
    `gateway_goals.SUBJECTS`; empty skips the phase)."""
    gateway_epp_rate: float
    """BENCH_GATEWAY_EPP_RATE: plain requests a second through Envoy + EPP for the EPP's decision time (300; 0
    skips it)."""
    gateway_epp_seconds: float
    """BENCH_GATEWAY_EPP_SECONDS: how long the decision-time phase sends (full: 10; quick: 5)."""
    gateway_epp_streams: int
    """BENCH_GATEWAY_EPP_STREAMS: streams held open through Envoy + EPP for the EPP's memory (full: 500; quick:
    100; 0 skips it)."""
    gateway_epp_prefixes: int
    """BENCH_GATEWAY_EPP_PREFIXES: prompt blocks indexed by a prefix-aware EPP for its memory (100000; 0 skips
    it)."""
    gateway_flags: tuple[str, ...]
    """BENCH_GATEWAY_FLAGS: extra llmaz-gateway flags for every gateway the scenario starts, split as a shell
    would, e.g. `--upstream-retries 0` (default: none, the command's defaults)."""
    growth_sizes: tuple[int, ...]
    """BENCH_GROWTH_SIZES: Playground counts for the growth scenario (full: 100 1000 10000; quick: 20 200)."""
    growth_subjects: tuple[str, ...]
    """BENCH_GROWTH_SUBJECTS: subset of python, go for the growth scenario (default: python; Go's run at 10,000
    takes about twice ours, and only ours has the cold start)."""
    picker_rate: float
    """BENCH_PICKER_RATE: requests per second fed to the picker (300)."""
    picker_seconds: float
    """BENCH_PICKER_SECONDS: seconds of paced picks (full: 10; quick: 3)."""
    picker_conversations: int
    """BENCH_PICKER_CONVERSATIONS: conversations the paced requests continue (300)."""
    picker_prompts: int
    """BENCH_PICKER_PROMPTS: distinct prompts for the picker's memory (100000)."""
    autoscale_streams: int
    """BENCH_AUTOSCALE_STREAMS: concurrent streams of the autoscale scenario's step (8: 4 replicas at 2 each)."""
    autoscale_warm_seconds: float
    """BENCH_AUTOSCALE_WARM_SECONDS: seconds of 1 stream before the step (full: 60; quick: 20)."""
    autoscale_step_seconds: float
    """BENCH_AUTOSCALE_STEP_SECONDS: seconds the step's streams are held (full: 120; quick: 60)."""
    autoscale_idle_seconds: float
    """BENCH_AUTOSCALE_IDLE_SECONDS: longest wait after the step for minReplicas again (180)."""
    tenancy_seconds: float
    """BENCH_TENANCY_SECONDS: seconds of load of each tenancy part (full: 60; quick: 30)."""
    tenancy_batch_streams: int
    """BENCH_TENANCY_BATCH_STREAMS: the batch tenant's streams beside the interactive one (32)."""
    tenancy_rate: float
    """BENCH_TENANCY_RATE: the interactive tenant's requests per second (1)."""
    tenancy_fair_streams: tuple[int, ...]
    """BENCH_TENANCY_FAIR_STREAMS: the two equal tenants' streams (16 4: offered load 4:1)."""
    tenancy_tpm: int
    """BENCH_TENANCY_TPM: the budgeted key's tokens per minute (1200)."""
    manager_args: tuple[str, ...]
    """BENCH_MANAGER_ARGS: extra flags for our manager in scenarios 1 and 9, e.g. `--kube-api-qps 0` (default:
    none, the defaults users get)."""
    serving_workloads: tuple[str, ...]
    """BENCH_SERVING_WORKLOADS: scenario 12's workloads, a subset of shared-prefix, multi-turn, unique, saturation,
    trace (default: all)."""
    serving_strategies: tuple[str, ...] | None
    """BENCH_SERVING_STRATEGIES: scenario 12's strategies, comma-separated (their names have spaces), a subset of
    kube-proxy, least-outstanding, prefix-aware, prefix-aware x2, envoy+epp, llm-d EPP (default: all, llm-d EPP
    when its binary is there)."""
    trace_unloaded_rate: float
    """BENCH_TRACE_UNLOADED_RATE: requests/s of the trace workload's unloaded step (1)."""
    trace_rates: tuple[float, ...]
    """BENCH_TRACE_RATES: the trace workload's ladder of offered requests/s, increasing (2 3 4 6 8 11 16)."""
    trace_step_seconds: float
    """BENCH_TRACE_STEP_SECONDS: seconds of arrivals per rate step of the trace workload (full: 40; quick: 20)."""
    max_concurrent_reconciles: int
    """BENCH_MCR: --max-concurrent-reconciles for our manager (the Go manager has no flag: 1 worker)."""
    results_dir: Path
    cache_dir: Path

    @classmethod
    def from_env(cls) -> Settings:
        quick = os.environ.get("BENCH_QUICK", "") not in ("", "0", "false")
        scenarios = tuple(os.environ.get("BENCH_SCENARIOS", " ".join(ALL_SCENARIOS)).replace(",", " ").split())
        unknown = set(scenarios) - set(ALL_SCENARIOS)
        if unknown:
            raise SystemExit(f"unknown BENCH_SCENARIOS {sorted(unknown)}; choose from {ALL_SCENARIOS}")
        unloaded, rates, step_seconds = _ladder(
            _float("BENCH_TRACE_UNLOADED_RATE", 1.0),
            _floats("BENCH_TRACE_RATES", "2 3 4 6 8 11 16"),
            _float("BENCH_TRACE_STEP_SECONDS", 20 if quick else 40),
        )
        return cls(
            quick=quick,
            sizes=_ints("BENCH_SIZES", "20 100" if quick else "100 1000"),
            repeats=_int("BENCH_REPEATS", 1 if quick else 3),
            steady_seconds=_float("BENCH_STEADY_SECONDS", 15 if quick else 60),
            runtime_objects=_int("BENCH_RUNTIME_OBJECTS", 2000 if quick else 10000),
            admission_rates=_ints("BENCH_ADMISSION_RATES", "100 500"),
            admission_seconds=_float("BENCH_ADMISSION_SECONDS", 3 if quick else 10),
            timeout=_float("BENCH_TIMEOUT", 300 if quick else 900),
            scenarios=scenarios,
            subjects=tuple(os.environ.get("BENCH_SUBJECTS", "python go").replace(",", " ").split()),
            loader_megabytes=_int("BENCH_LOADER_MB", 64 if quick else 512),
            memory_objects=_int("BENCH_MEMORY_OBJECTS", 1000 if quick else 10000),
            gateway_concurrency=_ints("BENCH_GATEWAY_CONCURRENCY", "1 50 200"),
            gateway_requests=_int("BENCH_GATEWAY_REQUESTS", 1000 if quick else 5000),
            gateway_blocks=_int("BENCH_GATEWAY_BLOCKS", 2 if quick else 4),
            gateway_block_seconds=_float("BENCH_GATEWAY_BLOCK_SECONDS", 60),
            gateway_streams=_int("BENCH_GATEWAY_STREAMS", 100 if quick else 500),
            gateway_stream_concurrency=_int("BENCH_GATEWAY_STREAM_CONCURRENCY", 100),
            gateway_stream_tps=_float("BENCH_GATEWAY_STREAM_TPS", 30),
            gateway_stream_tokens=_int("BENCH_GATEWAY_STREAM_TOKENS", 256),
            gateway_stream_seconds=_float("BENCH_GATEWAY_STREAM_SECONDS", 6 if quick else 15),
            gateway_stream_blocks=_int("BENCH_GATEWAY_STREAM_BLOCKS", 1 if quick else 2),
            gateway_stream_subjects=_comma_names("BENCH_GATEWAY_STREAM_SUBJECTS", gateway_goals.SUBJECTS),
            gateway_epp_rate=_float("BENCH_GATEWAY_EPP_RATE", 300),
            gateway_epp_seconds=_float("BENCH_GATEWAY_EPP_SECONDS", 5 if quick else 10),
            gateway_epp_streams=_int("BENCH_GATEWAY_EPP_STREAMS", 100 if quick else 500),
            gateway_epp_prefixes=_int("BENCH_GATEWAY_EPP_PREFIXES", 100000),
            gateway_flags=tuple(shlex.split(os.environ.get("BENCH_GATEWAY_FLAGS", ""))),
            growth_sizes=_ints("BENCH_GROWTH_SIZES", "20 200" if quick else "100 1000 10000"),
            growth_subjects=tuple(os.environ.get("BENCH_GROWTH_SUBJECTS", "python").replace(",", " ").split()),
            picker_rate=_float("BENCH_PICKER_RATE", 300),
            picker_seconds=_float("BENCH_PICKER_SECONDS", 3 if quick else 10),
            picker_conversations=_int("BENCH_PICKER_CONVERSATIONS", 300),
            picker_prompts=_int("BENCH_PICKER_PROMPTS", 100_000),
            autoscale_streams=_int("BENCH_AUTOSCALE_STREAMS", 8),
            autoscale_warm_seconds=_float("BENCH_AUTOSCALE_WARM_SECONDS", 20 if quick else 60),
            autoscale_step_seconds=_float("BENCH_AUTOSCALE_STEP_SECONDS", 60 if quick else 120),
            autoscale_idle_seconds=_float("BENCH_AUTOSCALE_IDLE_SECONDS", 180),
            tenancy_seconds=_float("BENCH_TENANCY_SECONDS", 30 if quick else 60),
            tenancy_batch_streams=_int("BENCH_TENANCY_BATCH_STREAMS", 32),
            tenancy_rate=_float("BENCH_TENANCY_RATE", 1),
            tenancy_fair_streams=_ints("BENCH_TENANCY_FAIR_STREAMS", "16 4"),
            tenancy_tpm=_int("BENCH_TENANCY_TPM", 1200),
            manager_args=tuple(shlex.split(os.environ.get("BENCH_MANAGER_ARGS", ""))),
            serving_workloads=_names("BENCH_SERVING_WORKLOADS", ROUTING_WORKLOADS),
            serving_strategies=_comma_list("BENCH_SERVING_STRATEGIES"),
            trace_unloaded_rate=unloaded,
            trace_rates=rates,
            trace_step_seconds=step_seconds,
            max_concurrent_reconciles=_int("BENCH_MCR", 1),
            results_dir=Path(os.environ.get("BENCH_RESULTS", BENCH_DIR / "results")),
            cache_dir=_cache_dir(),
        )
