"""Admission latency of the llmaz webhooks over HTTPS on loopback, at fixed request rates (open loop).

    python bench/admission.py [--rates 100 500] [--seconds 10]

The server (all eight webhooks, TLS with a self-signed certificate) runs in its own process; the client sends
a mix of mutating and validating OpenModel and Playground reviews at each rate and reports p50/p99/max latency
as seen by the client, and any errors. Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import socket
import ssl
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import structlog

from llmaz.certs import ensure_self_signed
from llmaz.runtime.webhook import WebhookServer
from llmaz.webhooks import StaticLookup, webhooks

OPENMODEL = {
    "apiVersion": "llmaz.io/v1alpha1",
    "kind": "OpenModel",
    "metadata": {"name": "qwen2-0-5b"},
    "spec": {"familyName": "qwen2", "source": {"modelHub": {"modelID": "Qwen/Qwen2-0.5B-Instruct"}}},
}
PLAYGROUND = {"apiVersion": "inference.llmaz.io/v1alpha1", "kind": "Playground",
              "metadata": {"name": "qwen", "namespace": "default"}, "spec": {"modelClaim": {"modelName": "qwen2-0-5b"},
              "backendRuntimeConfig": {"resources": {"limits": {"cpu": 4}, "requests": {"cpu": 2}}}}}  # fmt: skip
CASES = [
    ("/mutate-llmaz-io-v1alpha1-openmodel", "llmaz.io", "OpenModel", OPENMODEL),
    ("/validate-llmaz-io-v1alpha1-openmodel", "llmaz.io", "OpenModel", OPENMODEL),
    ("/mutate-inference-llmaz-io-v1alpha1-playground", "inference.llmaz.io", "Playground", PLAYGROUND),
    ("/validate-inference-llmaz-io-v1alpha1-playground", "inference.llmaz.io", "Playground", PLAYGROUND),
]


def review(uid: int, group: str, kind: str, obj: dict[str, Any]) -> bytes:
    request = {"uid": str(uid), "kind": {"group": group, "version": "v1alpha1", "kind": kind},
               "operation": "CREATE", "name": obj["metadata"]["name"], "object": obj}  # fmt: skip
    return orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})


def serve(port: int, cert_dir: Path) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    lookup = StaticLookup(backends={"vllm": ["default"]}, models={"qwen2-0-5b"})
    server = WebhookServer(webhooks(lookup), host="127.0.0.1", port=port, cert_dir=cert_dir)
    asyncio.run(server.run())


async def load(port: int, rate: float, seconds: float) -> tuple[list[float], int]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    latencies: list[float] = []
    errors = 0
    # Few keep-alive connections, as the API server keeps: the cost measured is admission, not handshakes.
    connector = aiohttp.TCPConnector(ssl=context, limit=16)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(i: int) -> None:
            nonlocal errors
            path, group, kind, obj = CASES[i % len(CASES)]
            started = time.perf_counter()
            try:
                async with session.post(f"https://127.0.0.1:{port}{path}", data=review(i, group, kind, obj),
                                        headers={"Content-Type": "application/json"}) as resp:  # fmt: skip
                    body = await resp.json()
                    if resp.status != 200 or not body["response"]["allowed"]:
                        errors += 1
            except (aiohttp.ClientError, OSError):
                errors += 1
            latencies.append(time.perf_counter() - started)

        tasks = []
        start = time.perf_counter()
        for i in range(int(rate * seconds)):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
    return latencies, errors


def wait_listening(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit("webhook server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[100.0, 500.0])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        ensure_self_signed(Path(tmp), ["localhost"], ["127.0.0.1"])
        process = multiprocessing.Process(target=serve, args=(port, Path(tmp)), daemon=True)
        process.start()
        try:
            wait_listening(port)
            asyncio.run(load(port, 50, 1))  # warm up connections and code paths
            print(f"{'rate/s':>8} {'requests':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'errors':>7}")
            for rate in args.rates:
                latencies, errors = asyncio.run(load(port, rate, args.seconds))
                q = statistics.quantiles(latencies, n=100)
                print(f"{rate:>8.0f} {len(latencies):>9} {q[49] * 1e3:>8.2f} {q[98] * 1e3:>8.2f} "
                      f"{max(latencies) * 1e3:>8.2f} {errors:>7}")  # fmt: skip
        finally:
            process.terminate()
            process.join()


if __name__ == "__main__":
    main()
