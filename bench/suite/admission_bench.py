"""Scenario 5, admission latency: `bench/admission.py` (open-loop load over loopback HTTPS at fixed rates,
a mix of OpenModel and Playground mutating/validating reviews) against our webhook server, and the same load
against the Go llmaz manager's webhook server.

The Go manager's webhook server listens on all interfaces at :9443 (no flag changes that), so it runs in a
private network namespace (`unshare -rn`: only a loopback interface) together with its own control plane
and the load generator; nothing listens outside loopback. Its certificate comes from its own rotator, copied
into its cert dir as a kubelet would.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import admission

from llmaz.certs import ensure_self_signed
from suite import procstat
from suite.cluster import BenchCluster
from suite.subjects import manager, start_manager

GO_WEBHOOK_PORT = 9443
OPENMODEL_PATH = "/apis/llmaz.io/v1alpha1/openmodels"


async def load(port: int, rate: float, seconds: float) -> tuple[list[float], int]:
    """`admission.load`, except that the answer's Content-Type is not checked: controller-runtime's webhook
    server sends none (Go then sniffs text/plain), and the API server does not look at it either."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    latencies: list[float] = []
    errors = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=16)) as session:

        async def one(i: int) -> None:
            nonlocal errors
            path, group, kind, obj = admission.CASES[i % len(admission.CASES)]
            started = time.perf_counter()
            try:
                async with session.post(f"https://127.0.0.1:{port}{path}", data=admission.review(i, group, kind, obj),
                                        headers={"Content-Type": "application/json"}) as resp:  # fmt: skip
                    body = orjson.loads(await resp.read())
                    errors += resp.status != 200 or not body["response"]["allowed"]
            except (aiohttp.ClientError, OSError, orjson.JSONDecodeError, KeyError):
                errors += 1
            latencies.append(time.perf_counter() - started)

        start, tasks = time.perf_counter(), []
        for i in range(int(rate * seconds)):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
    return latencies, errors


def measure(port: int, pid: int, rates: list[int], seconds: float) -> list[dict[str, Any]]:
    admission.wait_listening(port)
    asyncio.run(load(port, 50, 1))  # warm up connections and code paths
    rows = []
    for rate in rates:
        cpu = procstat.usage(pid).cpu_seconds
        latencies, errors = asyncio.run(load(port, rate, seconds))
        q = statistics.quantiles(latencies, n=100)
        rows.append({"rate": rate, "requests": len(latencies), "p50_ms": q[49] * 1e3, "p99_ms": q[98] * 1e3,
                     "max_ms": max(latencies) * 1e3, "errors": errors,
                     "server_cpu_seconds": procstat.usage(pid).cpu_seconds - cpu})  # fmt: skip
    return rows


def python_run(rates: list[int], seconds: float) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        ensure_self_signed(Path(tmp), ["localhost"], ["127.0.0.1"])
        process = multiprocessing.Process(target=admission.serve, args=(port, Path(tmp)), daemon=True)
        process.start()
        try:
            assert process.pid is not None
            return measure(port, process.pid, rates, seconds)
        finally:
            process.terminate()
            process.join()


def go_run(go_binary: Path, go_crds: Path, rates: list[int], seconds: float, log_dir: Path) -> list[dict[str, Any]]:
    argv = ["unshare", "-rn", sys.executable, __file__, "--go-binary", str(go_binary), "--go-crds", str(go_crds),
            "--log-dir", str(log_dir), "--seconds", str(seconds), "--rates", *map(str, rates)]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"Go webhook run failed ({proc.returncode}): {proc.stderr[-1500:]}")
    rows: list[dict[str, Any]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return rows


def _go_inside(args: argparse.Namespace) -> None:
    """In the private network namespace: control plane, Go manager with webhooks, load."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    with BenchCluster("go", Path(args.go_crds)) as cluster:
        subject = manager("go", cluster, Path(args.log_dir), Path(args.go_binary), 1, webhooks=True)
        try:
            start_manager(subject, cluster)
            cluster.plane.admin_client().request("POST", OPENMODEL_PATH, admission.OPENMODEL)
            rows = measure(GO_WEBHOOK_PORT, subject.process.pid, args.rates, args.seconds)
        finally:
            subject.stop()
    print(json.dumps(rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--go-binary", required=True)
    parser.add_argument("--go-crds", required=True)
    parser.add_argument("--log-dir", required=True)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rates", type=int, nargs="+", default=[100, 500])
    _go_inside(parser.parse_args())
