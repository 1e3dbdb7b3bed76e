"""Scenario 5, admission latency: open-loop load over loopback HTTPS at fixed rates, a mix of OpenModel and
Playground mutating/validating reviews (`bench/admission.py`), against our webhook server and against the Go
llmaz manager's. The load comes from `bench/go-load`, a Go client that costs a few percent of a core at
500/s, so the latencies are the servers' rather than a Python client's own scheduling delays.

The Go manager's webhook server listens on all interfaces at :9443 (no flag changes that), so it runs in a
private network namespace (`unshare -rn`: only a loopback interface) together with its own control plane
and the load generator; nothing listens outside loopback. Its certificate comes from its own rotator, copied
into its cert dir as a kubelet would.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import admission

from llmaz.certs import ensure_self_signed
from suite import procstat
from suite.cluster import BenchCluster
from suite.subjects import manager, start_manager

GO_WEBHOOK_PORT = 9443
OPENMODEL_PATH = "/apis/llmaz.io/v1alpha1/openmodels"


def write_requests(path: Path, count: int = 64) -> None:
    """The reviews go-load cycles through: `count` distinct uids over the mix of `admission.CASES`."""
    items = []
    for i in range(count):
        route, group, kind, obj = admission.CASES[i % len(admission.CASES)]
        items.append({"path": route, "body": orjson.loads(admission.review(i, group, kind, obj))})
    path.write_bytes(orjson.dumps(items))


def load(loader: Path, requests: Path, port: int, rate: float, seconds: float) -> tuple[list[float], int]:
    """Latencies in seconds and the error count of one go-load run (bench/go-load)."""
    argv = [str(loader), "-url", f"https://127.0.0.1:{port}", "-requests", str(requests),
            "-rate", str(rate), "-seconds", str(seconds)]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=3 * seconds + 60, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"go-load failed ({proc.returncode}): {proc.stderr[-1000:]}")
    out = json.loads(proc.stdout)
    return [ms / 1e3 for ms in out["latencies_ms"]], int(out["errors"])


def measure(loader: Path, port: int, pid: int, rates: list[int], seconds: float) -> list[dict[str, Any]]:
    admission.wait_listening(port)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        requests = Path(tmp) / "reviews.json"
        write_requests(requests)
        load(loader, requests, port, 50, 1)  # warm up connections and code paths
        for rate in rates:
            cpu = procstat.usage(pid).cpu_seconds
            # The machine's load before the run: a p99 far off the others usually comes with a high one.
            machine_load = os.getloadavg()[0]
            latencies, errors = load(loader, requests, port, rate, seconds)
            q = statistics.quantiles(latencies, n=100)
            rows.append({"rate": rate, "requests": len(latencies), "p50_ms": q[49] * 1e3, "p99_ms": q[98] * 1e3,
                         "max_ms": max(latencies) * 1e3, "errors": errors,
                         "server_cpu_seconds": procstat.usage(pid).cpu_seconds - cpu,
                         "load_1m": machine_load})  # fmt: skip
    return rows


def python_run(loader: Path, rates: list[int], seconds: float) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        ensure_self_signed(Path(tmp), ["localhost"], ["127.0.0.1"])
        process = multiprocessing.Process(target=admission.serve, args=(port, Path(tmp)), daemon=True)
        process.start()
        try:
            assert process.pid is not None
            return measure(loader, port, process.pid, rates, seconds)
        finally:
            process.terminate()
            process.join()


def go_run(
    loader: Path, go_binary: Path, go_crds: Path, rates: list[int], seconds: float, log_dir: Path
) -> list[dict[str, Any]]:
    argv = ["unshare", "-rn", sys.executable, __file__, "--go-binary", str(go_binary), "--go-crds", str(go_crds),
            "--log-dir", str(log_dir), "--seconds", str(seconds), "--rates", *map(str, rates),
            "--loader", str(loader)]  # fmt: skip
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
            rows = measure(Path(args.loader), GO_WEBHOOK_PORT, subject.process.pid, args.rates, args.seconds)
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
    parser.add_argument("--loader", required=True)
    _go_inside(parser.parse_args())
