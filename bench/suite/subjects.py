"""The subject processes: how each is started, when it counts as started, and how it is measured and stopped.

Managers ("python": our `llmaz-manager`; "go": the Go llmaz manager) run with webhooks off, one reconcile
worker unless BENCH_MCR says otherwise (the Go manager has no such flag), info logging, and probes on a free
loopback port. A manager counts as started once all four controllers have logged "Starting workers", so no run
times process start-up or cache sync. Metrics are off, except that ours serves plain HTTP on loopback, read
once at the end of a run for its full garbage-collection pauses (Go's collector does most of its work
concurrently with the program; its pauses are not compared).

No-op controllers ("python-noop", "go-noop") serve GET /count once their cache has synced.
"""

from __future__ import annotations

import base64
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from llmaz_dev.envtest._process import ManagedProcess, free_loopback_ports
from suite import procstat
from suite.cluster import NAMESPACE, BenchCluster
from suite.settings import BENCH_DIR, REPO

# Where the Go manager's certificate rotator expects the Secret's files (a kubelet volume in a cluster).
GO_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
GO_SECRET_PATH = "/api/v1/namespaces/llmaz-system/secrets/llmaz-webhook-server-cert"
MANAGER_CONTROLLERS = 4


class SubjectFailedError(RuntimeError):
    pass


class Subject:
    def __init__(
        self, name: str, argv: list[str], env: dict[str, str], log_path: Path, metrics_url: str | None = None
    ) -> None:
        self.name = name
        self.metrics_url = metrics_url
        env_args = [f"{k}={v}" for k, v in env.items()]
        # `env` execs the command, so the pid measured is the subject's own.
        self.process = ManagedProcess(name, ["env", *env_args, *argv], log_path)
        self.log_path = log_path

    def start(self) -> None:
        self.log_path.unlink(missing_ok=True)
        self.process.start()

    def usage(self) -> procstat.Usage:
        return procstat.usage(self.process.pid)

    def stop(self) -> None:
        self.process.stop()

    def check_running(self) -> None:
        code = self.process.exit_code()
        if code is not None:
            raise SubjectFailedError(f"{self.name} exited ({code}):\n{self.process.log_tail(40)}")

    def wait_for_log(self, needle: str, count: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_running()
            if self.log_path.exists() and self.log_path.read_text(errors="replace").count(needle) >= count:
                return
            time.sleep(0.1)
        raise SubjectFailedError(
            f"{self.name}: {count}x {needle!r} not logged in {timeout}s:\n{self.process.log_tail(40)}"
        )


def manager(
    name: str, cluster: BenchCluster, log_dir: Path, go_binary: Path | None, mcr: int, webhooks: bool = False,
    extra_args: tuple[str, ...] = (),
) -> Subject:  # fmt: skip
    """A manager subject; `extra_args` go to ours only (BENCH_MANAGER_ARGS)."""
    probe, metrics = free_loopback_ports(2)
    kubeconfig = str(cluster.kubeconfig)
    if name == "python":
        argv = [str(Path(sys.executable).with_name("llmaz-manager")), "--kubeconfig", kubeconfig,
                "--health-probe-bind-address", f"127.0.0.1:{probe}", "--max-concurrent-reconciles", str(mcr),
                "--log-format", "json", "--log-level", "info", "--namespace", "llmaz-system",
                "--metrics-bind-address", f"127.0.0.1:{metrics}", "--metrics-secure", "false", *extra_args]  # fmt: skip
        log_path = log_dir / f"{name}-manager.log"
        return Subject(name, argv, {"ENABLE_WEBHOOKS": "false"}, log_path, f"http://127.0.0.1:{metrics}/metrics")
    assert go_binary is not None
    argv = [str(go_binary), "--metrics-bind-address=0", f"--health-probe-bind-address=127.0.0.1:{probe}",
            "--namespace=llmaz-system", "--zap-log-level=info"]  # fmt: skip
    env = {"ENABLE_WEBHOOKS": str(webhooks).lower(), "KUBECONFIG": kubeconfig}
    return Subject(name, argv, env, log_dir / "go-manager.log")


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def metric_samples(subject: Subject) -> Samples | None:
    """Our manager's metrics now, by sample name and labels; None while it does not serve them yet."""
    if subject.metrics_url is None:
        return None
    try:
        with urllib.request.urlopen(subject.metrics_url, timeout=10) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    return {(s.name, frozenset(s.labels.items())): s.value for f in text_string_to_metric_families(text)
            for s in f.samples}  # fmt: skip


def full_gc_pauses(subject: Subject) -> dict[str, float] | None:
    """Our manager's full garbage collections so far: how many, and the seconds they stopped it for."""
    samples = metric_samples(subject)
    if samples is None:
        return None
    values = {name: value for (name, _), value in samples.items()}
    return {
        "full_collections": values["python_gc_full_collection_duration_seconds_count"],
        "full_collection_seconds": values["python_gc_full_collection_duration_seconds_sum"],
    }


def start_manager(subject: Subject, cluster: BenchCluster) -> None:
    subject.start()
    if subject.name == "go":
        sync_go_certs(cluster, subject)
    subject.wait_for_log("Starting workers", MANAGER_CONTROLLERS)


def sync_go_certs(cluster: BenchCluster, subject: Subject, timeout: float = 60) -> None:
    """Play the kubelet's Secret volume: copy the rotator's certificate into its cert dir once it is there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        subject.check_running()
        data = cluster.plane.admin_client().request("GET", GO_SECRET_PATH).get("data") or {}
        if "tls.crt" in data and "tls.key" in data:
            GO_CERT_DIR.mkdir(parents=True, exist_ok=True)
            for key in ("tls.crt", "tls.key", "ca.crt"):
                (GO_CERT_DIR / key).write_bytes(base64.b64decode(data.get(key, "")))
            return
        time.sleep(0.2)
    raise SubjectFailedError("the Go manager's rotator did not fill its Secret")


def noop(name: str, cluster: BenchCluster, log_dir: Path, go_binary: Path | None) -> tuple[Subject, str]:
    """A no-op controller over ConfigMaps in the bench namespace, and the URL of its /count."""
    (port,) = free_loopback_ports(1)
    address = f"127.0.0.1:{port}"
    if name == "python":
        script = BENCH_DIR / "suite" / "noop_manager.py"
        argv = [sys.executable, str(script), "--kubeconfig", str(cluster.kubeconfig), "--namespace", NAMESPACE,
                "--count-address", address]  # fmt: skip
        env = {"PYTHONPATH": str(REPO / "src")}
    else:
        assert go_binary is not None
        argv = [str(go_binary), f"--namespace={NAMESPACE}", f"--count-address={address}"]
        env = {"KUBECONFIG": str(cluster.kubeconfig)}
    return Subject(f"{name}-noop", argv, env, log_dir / f"{name}-noop.log"), f"http://{address}/count"


def read_count(url: str) -> int | None:
    """The no-op controller's count, or None while it is not serving yet."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return int(resp.read())
    except OSError:
        return None


def wait_serving(subject: Subject, url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while read_count(url) is None:
        subject.check_running()
        if time.monotonic() > deadline:
            raise SubjectFailedError(f"{subject.name} did not serve /count:\n{subject.process.log_tail(40)}")
        time.sleep(0.05)
