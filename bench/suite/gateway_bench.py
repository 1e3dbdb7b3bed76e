"""Scenario 8, the gateway's own cost: latency it adds to a chat completion, and memory per open stream. No control
plane: three processes on loopback.

- the engine (`gateway_engine.py`): a fast fake OpenAI engine, aiohttp, answering at once (a stream of a few
  small SSE events, or a small JSON completion);
- the gateway (`gateway_launcher.py`): `llmaz.gateway.server.Gateway` as `python -m llmaz.gateway` builds it,
  over static informers holding one Playground whose `-lb` EndpointSlice points at the engine;
- the load generator (`bench/go-gwload`, Go): closed-loop requests from `concurrency` workers, in blocks that
  alternate between the engine called directly and the same engine through the gateway (ABBA), each request's
  time to first body byte (TTFB) and total time recorded.

Phase 1, latency, for each concurrency level: BLOCKS blocks per subject of REQUESTS requests each (half streams,
half plain completions). Per subject and kind, p50 and p99 over every sample of the level; "added" is the
gateway's percentile minus the direct one. The gateway's CPU over the level (it is idle during direct blocks)
divided by the requests it served is its CPU per request.

Phase 2, memory, on a freshly started gateway: after a few warm-up requests, K streams are opened through it and
held open by the engine (one event sent, then it waits); the gateway's RSS (VmRSS) is read with none, K/2 and K
open, and again after they are closed. KiB per stream = (RSS with K - RSS with none) / K.

Phase 3, paced streams, at production concurrency, proxies side by side (`gateway_proxies.py`): the engine is
`bench/go-enginesim` (Go, one core), whose tokens come at a fixed pace (30 a second) and whose every chunk carries
the time it was written. Each proxy in turn, started fresh: llmaz-gateway (one process; two on one port last),
Envoy alone (the floor), Envoy + llmaz's Endpoint Picker with the request body BUFFERED and FULL_DUPLEX_STREAMED,
and Envoy with two workers + EPP. For each, go-gwload (`-mode stream`) keeps `concurrency` streams open (100 of 256
tokens: ~3,000 chunks a second), their starts spread evenly over one stream's duration, in ABBA blocks against the
engine called directly, and records per stream its TTFB and total time and per chunk its delay (read minus
written). "Added" is the proxy minus its direct blocks, per percentile; each process's CPU over the proxy's turn
(idle in the direct blocks) over the chunks relayed is its CPU per chunk. Then the EPP's decision time at 300
requests a second and its memory with streams open and with its prefix index filled; the goals
(`gateway_goals.py`) are judged on this run's figures.

Every gateway gets BENCH_GATEWAY_FLAGS (`gateway_launcher.py`).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llmaz_dev.envtest._process import free_loopback_ports
from suite import gateway_goals as goals
from suite.gateway_proxies import EppLoad, StreamLoad, epp_phases, stream_phase, wait_http
from suite.gateway_streams import hold_streams
from suite.settings import BENCH_DIR, REPO
from suite.subjects import Subject

ENGINE = BENCH_DIR / "suite" / "gateway_engine.py"
LAUNCHER = BENCH_DIR / "suite" / "gateway_launcher.py"
MODEL = "bench-model"  # what the launcher's Playground serves (gateway_launcher.MODEL)
CHAT = "/v1/chat/completions"
SUBJECTS = ("direct", "gateway")
KINDS = ("stream", "plain")  # go-gwload's kind 0 and 1
MB = 1024 * 1024


def _subject(name: str, script: Path, args: list[str], log_dir: Path) -> Subject:
    return Subject(name, [sys.executable, str(script), *args], {"PYTHONPATH": str(REPO / "src")},
                   log_dir / f"{name}.log")  # fmt: skip


def _gateway(name: str, port: int, engine_port: int, flags: Sequence[str], log_dir: Path) -> Subject:
    return _subject(name, LAUNCHER, ["--port", str(port), "--engine-port", str(engine_port), "--", *flags], log_dir)


def _quantiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return (values[0], values[0]) if values else (float("nan"), float("nan"))
    q = statistics.quantiles(values, n=100)
    return q[49], q[98]


def _percentiles(blocks: list[dict[str, Any]], kind: int) -> dict[str, float]:
    ttfb = [t / 1e3 for b in blocks for k, t in zip(b["kind"], b["ttfb_us"], strict=True) if k == kind]
    total = [t / 1e3 for b in blocks for k, t in zip(b["kind"], b["total_us"], strict=True) if k == kind]
    (ttfb50, ttfb99), (total50, total99) = _quantiles(ttfb), _quantiles(total)
    return {"ttfb_p50_ms": ttfb50, "ttfb_p99_ms": ttfb99, "total_p50_ms": total50, "total_p99_ms": total99,
            "samples": len(ttfb)}  # fmt: skip


def _added(direct: dict[str, float], gateway: dict[str, float]) -> dict[str, float]:
    return {key: gateway[key] - direct[key] for key in ("ttfb_p50_ms", "ttfb_p99_ms", "total_p50_ms", "total_p99_ms")}


def analyse(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """Percentiles per subject and kind over every block of a level, the added figures, and the same per ABBA pair
    of blocks (the k-th block of each subject) for the spread within the run."""
    by_subject = {s: [b for b in blocks if b["subject"] == s] for s in SUBJECTS}
    result: dict[str, Any] = {}
    for index, kind in enumerate(KINDS):
        direct, gateway = (_percentiles(by_subject[s], index) for s in SUBJECTS)
        pairs = [_added(_percentiles([d], index), _percentiles([g], index))
                 for d, g in zip(by_subject["direct"], by_subject["gateway"], strict=True)]  # fmt: skip
        result[kind] = {"direct": direct, "gateway": gateway, "added": _added(direct, gateway), "pairs": pairs}
    for s in SUBJECTS:
        seconds = sum(b["seconds"] for b in by_subject[s])
        done = sum(len(b["kind"]) for b in by_subject[s])
        result.setdefault("requests", {})[s] = done
        result.setdefault("errors", {})[s] = sum(b["errors"] for b in by_subject[s])
        result.setdefault("requests_per_second", {})[s] = done / seconds if seconds else 0.0
    return result


def latency_level(
    loader: Path, engine: Subject, gateway: Subject, urls: dict[str, str], concurrency: int, requests: int,
    blocks: int, block_seconds: float,
) -> dict[str, Any]:  # fmt: skip
    argv = [str(loader), "-direct", urls["direct"], "-gateway", urls["gateway"], "-model", MODEL,
            "-concurrency", str(concurrency), "-requests", str(requests), "-blocks", str(blocks),
            "-block-seconds", str(block_seconds)]  # fmt: skip
    machine_load = os.getloadavg()[0]
    before = {"gateway": gateway.usage().cpu_seconds, "engine": engine.usage().cpu_seconds}
    # stderr passes through: one progress line per block.
    proc = subprocess.run(argv, stdout=subprocess.PIPE, text=True, timeout=2 * blocks * (block_seconds + 30) + 60,
                          check=False)  # fmt: skip
    cpu = {"gateway": gateway.usage().cpu_seconds - before["gateway"],
           "engine": engine.usage().cpu_seconds - before["engine"]}  # fmt: skip
    gateway.check_running()
    if proc.returncode != 0:
        raise RuntimeError(f"go-gwload failed ({proc.returncode}) at concurrency {concurrency}")
    result = analyse(json.loads(proc.stdout)["blocks"])
    served = result["requests"]["gateway"] + result["errors"]["gateway"] + 2 * concurrency * blocks  # + warm-ups
    result.update(concurrency=concurrency, load_1m=machine_load, cpu_seconds=cpu,
                  gateway_cpu_us_per_request=cpu["gateway"] / served * 1e6)  # fmt: skip
    return result


def fast_engine_phases(
    loader: Path, levels: tuple[int, ...], requests: int, blocks: int, streams: int, log_dir: Path,
    block_seconds: float, flags: Sequence[str],
) -> dict[str, Any]:  # fmt: skip
    """Phases 1 and 2, against the Python engine that answers at once; a phase with no levels or no streams is
    skipped."""
    engine_port, gateway_port = free_loopback_ports(2)
    urls = {"direct": f"http://127.0.0.1:{engine_port}", "gateway": f"http://127.0.0.1:{gateway_port}"}
    engine = _subject("gateway-engine", ENGINE, ["--port", str(engine_port)], log_dir)
    gateway = _gateway("gateway", gateway_port, engine_port, flags, log_dir)
    result: dict[str, Any] = {"levels": []}
    try:
        engine.start()
        wait_http(engine, urls["direct"] + "/healthz")
        if levels:
            gateway.start()
            wait_http(gateway, urls["gateway"] + "/v1/models")
            result["levels"] = [latency_level(loader, engine, gateway, urls, c, requests, blocks, block_seconds)
                                for c in levels]  # fmt: skip
            gateway.stop()  # a fresh gateway for the memory phase: no heap grown by the latency phase
        if streams:
            gateway.start()
            wait_http(gateway, urls["gateway"] + "/v1/models")
            result["memory"] = asyncio.run(hold_streams(urls["gateway"] + CHAT, gateway.process.pid, streams))
            gateway.check_running()
    finally:
        gateway.stop()
        engine.stop()
    return result


def run_once(
    loader: Path, levels: tuple[int, ...], requests: int, blocks: int, streams: int, log_dir: Path,
    block_seconds: float, flags: Sequence[str] = (), simulator: Path | None = None,
    stream_load: StreamLoad | None = None, epp_load: EppLoad | None = None,
    subjects: Sequence[str] = goals.SUBJECTS,
) -> dict[str, Any]:  # fmt: skip
    result: dict[str, Any] = {"requests_per_block": requests, "blocks_per_subject": blocks,
                              "gateway_flags": list(flags)}  # fmt: skip
    if levels or streams:
        result |= fast_engine_phases(loader, levels, requests, blocks, streams, log_dir, block_seconds, flags)
    if simulator is not None and stream_load is not None and stream_load.concurrency > 0 and subjects:
        result["paced_streams"] = stream_phase(loader, simulator, stream_load, flags, log_dir, subjects)
    if epp_load is not None:
        result["epp"] = epp_phases(epp_load, flags, log_dir)
    paced = result.get("paced_streams", {}).get("subjects", {})
    decision = result.get("epp", {}).get("decision")
    result["goals"] = [g.as_dict() for g in goals.evaluate(paced, decision)]
    return result
