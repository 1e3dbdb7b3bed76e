"""The `vllm` BackendRuntime's preStop hook, run with /bin/sh against pages shaped like vLLM v0.30.0's `/metrics`:
current vLLM writes one gauge line per engine (label `engine`), several for a data-parallel server, and the hook
waits until their sums of running and waiting requests are both 0."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from .factories import backend

ENGINE_URL = "http://localhost:8080/metrics"
PID1_STDOUT = "/proc/1/fd/1"
STOPPING = "no requests in flight, stopping"


def page(running: tuple[float, ...], waiting: tuple[float, ...]) -> str:
    """A metrics page of vLLM v0.30.0 with one line per engine of each gauge."""
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        *(f'vllm:num_requests_running{{engine="{i}",model_name="m"}} {v}' for i, v in enumerate(running)),
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
        "# TYPE vllm:num_requests_waiting gauge",
        *(f'vllm:num_requests_waiting{{engine="{i}",model_name="m"}} {v}' for i, v in enumerate(waiting)),
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25',
    ]
    return "\n".join(lines) + "\n"


IDLE_TWO_ENGINES = page((0.0, 0.0), (0.0, 0.0))


@dataclass
class MetricsServer:
    """Serves `pages` in turn on loopback, the last one from then on, counting the scrapes."""

    pages: list[str] = field(default_factory=list)
    scrapes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_page(self) -> str:
        with self.lock:
            body = self.pages[min(self.scrapes, len(self.pages) - 1)]
            self.scrapes += 1
            return body


@pytest.fixture
def metrics() -> Iterator[tuple[MetricsServer, str]]:
    state = MetricsServer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = state.next_page().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def run_hook(url: str) -> list[str]:
    """The hook's lines, run against `url` and writing to its own stdout rather than PID 1's."""
    lifecycle = backend("vllm").spec.lifecycle
    assert lifecycle is not None
    command = list(lifecycle["preStop"]["exec"]["command"])
    assert command[:2] == ["/bin/sh", "-c"]
    script = command[2]
    assert script.count(ENGINE_URL) == 2
    assert script.count(PID1_STDOUT) == 2
    command[2] = script.replace(ENGINE_URL, url).replace(PID1_STDOUT, "/dev/stdout")
    done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.splitlines()


@pytest.mark.parametrize(
    ("pages", "lines"),
    [
        ([IDLE_TWO_ENGINES], [STOPPING]),
        ([page((0.0,), (0.0,))], [STOPPING]),
        (
            [page((0.0, 1.0), (2.0, 0.0)), IDLE_TWO_ENGINES],
            ["waiting for requests to drain: running=1 waiting=2", STOPPING],
        ),
    ],
    ids=["two idle engines", "one idle engine", "a busy engine beside an idle one, then both idle"],
)
def test_the_hook_stops_once_every_engine_is_idle(
    metrics: tuple[MetricsServer, str], pages: list[str], lines: list[str]
) -> None:
    server, url = metrics
    server.pages = pages

    assert run_hook(url) == lines
    assert server.scrapes == len(pages)


def test_the_hook_stops_when_the_server_is_already_gone() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/metrics"

    assert run_hook(closed) == []
