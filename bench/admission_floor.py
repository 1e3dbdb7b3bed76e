"""How much of admission latency is the HTTP and TLS stack: our webhook server against two servers that do nothing.

    .venv/bin/python bench/admission_floor.py [--rates 100 500] [--seconds 8]

Three servers, each in its own process, over HTTPS on loopback with the same self-signed certificate, under the
load of scenario 5 (`go-load`: the same review mix, open loop, 16 keep-alive connections):

- **webhooks**: `WebhookServer` with llmaz's eight webhooks, as `bench/admission.py` runs it;
- **aiohttp**: an aiohttp application whose one handler reads the body and answers a fixed review, served as the
  webhook server is served (TLS in asyncio, no access log);
- **asyncio**: an `asyncio.Protocol` over the same TLS that finds each request's end by its Content-Length and
  writes a fixed answer: no HTTP framework at all.

Servers run in the order webhooks, aiohttp, asyncio, asyncio, aiohttp, webhooks (ABBA), so a drift in the shared
machine's load falls on each. Per server and rate: client-side p50 and p99, and the server's CPU per request.
Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import ssl
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import admission
from aiohttp import web
from suite import golang, procstat
from suite.admission_bench import load, write_requests
from suite.settings import Settings

from llmaz.certs import ensure_self_signed

ANSWER = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"0","allowed":true}}'


def _tls(cert_dir: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_dir / "tls.crt", cert_dir / "tls.key")
    return context


def serve_webhooks(port: int, cert_dir: Path) -> None:
    admission.serve(port, cert_dir)


def serve_aiohttp(port: int, cert_dir: Path) -> None:
    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=ANSWER, content_type="application/json")

    app = web.Application()
    app.router.add_post("/{path:.*}", answer)
    web.run_app(app, host="127.0.0.1", port=port, ssl_context=_tls(cert_dir), access_log=None, print=None)


class FixedAnswer(asyncio.Protocol):
    """HTTP/1.1 reduced to what the load sends: a head, a Content-Length body, keep-alive."""

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (head_end := self.buffer.find(b"\r\n\r\n")) >= 0:
            length = 0
            for line in self.buffer[:head_end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            end = head_end + 4 + length
            if len(self.buffer) < end:
                return
            self.buffer = self.buffer[end:]
            assert self.transport is not None
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(ANSWER)
            self.transport.write(head + ANSWER)


def serve_asyncio(port: int, cert_dir: Path) -> None:
    async def run() -> None:
        server = await asyncio.get_running_loop().create_server(FixedAnswer, "127.0.0.1", port, ssl=_tls(cert_dir))
        await server.serve_forever()

    asyncio.run(run())


SERVERS: dict[str, Callable[[int, Path], None]] = {
    "webhooks": serve_webhooks,
    "aiohttp": serve_aiohttp,
    "asyncio": serve_asyncio,
}
ORDER = ("webhooks", "aiohttp", "asyncio", "asyncio", "aiohttp", "webhooks")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rates", type=int, nargs="+", default=[100, 500])
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    loader = golang.go_load(Settings.from_env().cache_dir)
    columns = ("server", 9), ("rate/s", 7), ("p50 ms", 7), ("p99 ms", 7), ("CPU ms/request", 15), ("errors", 7)
    print(" ".join(f"{title:>{width}}" for title, width in columns), f"{'load 1m':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        cert_dir = Path(tmp)
        ensure_self_signed(cert_dir, ["localhost"], ["127.0.0.1"])
        reviews = cert_dir / "reviews.json"
        write_requests(reviews)
        for name in ORDER:
            port = _free_port()
            process = multiprocessing.Process(target=SERVERS[name], args=(port, cert_dir), daemon=True)
            process.start()
            assert process.pid is not None
            try:
                admission.wait_listening(port)
                load(loader, reviews, port, 50, 1)  # warm up connections and code paths
                for rate in args.rates:
                    machine_load = os.getloadavg()[0]
                    cpu = procstat.usage(process.pid).cpu_seconds
                    latencies, errors = load(loader, reviews, port, rate, args.seconds)
                    used = procstat.usage(process.pid).cpu_seconds - cpu
                    q = statistics.quantiles(latencies, n=100)
                    cpu_per_request = used / len(latencies) * 1e3
                    print(f"{name:>9} {rate:>7} {q[49] * 1e3:>7.2f} {q[98] * 1e3:>7.2f} {cpu_per_request:>15.2f} "
                          f"{errors:>7} {machine_load:>8.2f}", flush=True)  # fmt: skip
            finally:
                process.terminate()
                process.join()


if __name__ == "__main__":
    main()
