"""`make run`: llmaz serving a model on a real node where this machine allows one, else a local control plane.

    python -m llmaz_dev.envtest.devrun --kustomize <kustomize binary> [--mode auto|node|control-plane] [--no-demo]
    python -m llmaz_dev.envtest.devrun --probe [--mode ...]     # print the mode `auto` chooses (and why, on stderr)

Node mode (`llmaz_dev.envtest.node`; needs root on a Debian host, with `make node-bins image-build` done):
1. Start the node cluster (working directory `<dir>/run`, admin kubeconfig `<dir>/kubeconfig`) with the images of
   `make image-build` imported.
2. Install llmaz as users do: `make deploy` of config/node with the local manager image (and llmaz-gateway), and
   put the gateway's Service on http://127.0.0.1:8000 (`llmaz_dev.envtest.forward`), the base URL OpenAI clients take.
3. Unless `--no-demo`: start the local object store, upload the tiny model, apply `config/samples/tiny-llama.yaml`
   in `default`, report each phase until its first answer, then its first answer through the gateway; give it an
   InferencePool (the CRD from config/gie when missing); print `OPENAI_BASE_URL`, a `curl` that chats with it,
   and how a Gateway API Inference Extension gateway or a plain Envoy routes to it.
4. Run until Ctrl-C (or SIGTERM/SIGHUP); then stop everything and restore the host.

Control-plane mode, in order:
1. Refuse if a `make dev-up` control plane is running from the same state directory (both write
   `<dir>/kubeconfig`), or if the manager's local ports are taken.
2. Start etcd + kube-apiserver (`ControlPlane`, working directory `<dir>/run`) with the llmaz CRDs and the
   LeaderWorkerSet CRD; the admin kubeconfig goes to `<dir>/kubeconfig`.
3. Apply `config/local`: default BackendRuntimes, global ConfigMap, namespace, certificate Secret, and the
   webhook configurations calling https://127.0.0.1:9443 by URL.
4. Run `llmaz-manager` with local flags, its logs on this terminal; once /readyz answers, print what to try.
5. Run until Ctrl-C (or SIGTERM/SIGHUP), or until the manager exits.

Invariants: every exit path (Ctrl-C during any step, a failing step, the manager exiting) stops the manager,
then the control plane, and removes `<dir>/run` and the kubeconfig. The children run in their own sessions
(Ctrl-C reaches only this process, which stops them in order) and die with this process if it is killed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from llmaz_dev.envtest._devcluster import _running_cluster
from llmaz_dev.envtest._process import child_setup, is_listening
from llmaz_dev.envtest.control_plane import ControlPlane

REPO = Path(__file__).resolve().parents[3]
PROBE_PORT = 8081
GATEWAY_PORT = 8000
GATEWAY_URL = f"http://127.0.0.1:{GATEWAY_PORT}"
WEBHOOK_PORT = 9443
READY_TIMEOUT = 90.0
STOP_TIMEOUT = 20.0
MANAGER_FLAGS = (
    "--namespace=llmaz-system",
    "--webhook-bind-host=127.0.0.1",
    f"--webhook-port={WEBHOOK_PORT}",
    "--webhook-cert-ip-addresses=127.0.0.1",
    "--metrics-bind-address=127.0.0.1:8080",
    "--metrics-secure=false",
    f"--health-probe-bind-address=127.0.0.1:{PROBE_PORT}",
    "--log-format=console",
)


class DevRunError(RuntimeError):
    """A step of `make run` failed; the message says what to do."""


class StopRequestedError(Exception):
    """SIGINT, SIGTERM or SIGHUP arrived: stop everything."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmaz_dev.envtest.devrun", description="Run llmaz locally.")
    parser.add_argument("--dir", type=Path, default=REPO / ".dev", help="state directory (default .dev)")
    parser.add_argument("--kustomize", type=Path, default=None, help="kustomize binary for config/local")
    parser.add_argument("--mode", choices=["auto", "node", "control-plane"], default="auto")
    parser.add_argument("--no-demo", action="store_true", help="node mode: install llmaz but serve no model")
    parser.add_argument("--probe", action="store_true", help="print the mode `--mode` resolves to, and exit")
    args = parser.parse_args(argv)
    mode = _resolve_mode(args.mode, announce=args.probe)
    if args.probe:
        print(mode)
        return 0
    with _interruptible():
        try:
            if mode == "node":
                return run_node(args.dir.resolve(), demo=not args.no_demo)
            if args.kustomize is None:
                raise DevRunError("control-plane mode needs --kustomize")
            return run(args.dir.resolve(), args.kustomize)
        except StopRequestedError:
            what = "llmaz and the node; the host is restored" if mode == "node" else "the manager and the control plane"
            _say(f"interrupted: stopped {what}")
            return 130
        except DevRunError as err:
            _say(f"error: {err}")
            return 1


def run(state_dir: Path, kustomize: Path) -> int:
    """Steps 1-5 of the module docstring; returns the manager's exit code (0 after Ctrl-C is handled above)."""
    _check_free(state_dir)
    plane = ControlPlane(
        crd_paths=[REPO / "config" / "crd" / "bases"], work_dir=state_dir / "run", kubeconfig=state_dir / "kubeconfig"
    )
    _say("starting etcd and kube-apiserver ...")
    plane.start()
    try:
        _say("applying config/local (backends, global config, webhooks by URL) ...")
        plane.kubectl("apply", "--server-side", "--field-manager=llmaz-run", "-f", "-", input=_build(kustomize))
        with _manager(plane, state_dir / "run") as manager:
            _wait_ready(manager)
            _say(_instructions(plane))
            return manager.wait()
    finally:
        plane.stop()
        shutil.rmtree(state_dir / "run", ignore_errors=True)
        (state_dir / "kubeconfig").unlink(missing_ok=True)


def _resolve_mode(mode: str, *, announce: bool) -> str:
    if mode != "auto":
        return mode
    reason = node_unavailable()
    if reason is None:
        return "node"
    if announce:
        _say(f"no real node here ({reason}): running the control plane only, no pod will run")
    return "control-plane"


def node_unavailable() -> str | None:
    """Why this machine cannot run the node tier, or None. Checked before its packages are installed."""
    if sys.platform != "linux":
        return "not Linux"
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("apt-get") is None:
        return "no apt-get to install containerd and the CNI plugins"
    if not (Path("/sys/fs/cgroup/memory").is_dir() or Path("/sys/fs/cgroup/cgroup.controllers").is_file()):
        return "no memory cgroup"
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "no overlay filesystem"
    return None


def run_node(state_dir: Path, *, demo: bool) -> int:
    """Node mode (see the module docstring); returns 0 once interrupted and stopped."""
    from llmaz_dev.envtest.forward import TcpForwarder
    from llmaz_dev.envtest.images import find_images
    from llmaz_dev.envtest.node import NodeCluster, PrerequisiteError
    from llmaz_dev.envtest.node.demo import (
        DemoError,
        serve_demo,
        serve_inference_pool,
        upload_tiny_model,
        wait_answer,
    )
    from llmaz_dev.envtest.node.install import GATEWAY, NAMESPACE, InstallError, install_llmaz
    from llmaz_dev.envtest.objectstore import ObjectStore

    _check_no_dev_up(state_dir)
    if is_listening(GATEWAY_PORT):
        raise DevRunError(f"127.0.0.1:{GATEWAY_PORT}, where the gateway goes, is in use (another `make run`?)")
    images = find_images(["pause", "manager", "loader", "llama-server"])
    cluster = NodeCluster(
        sandbox_image=images["pause"],
        images=list(images.values()),
        crd_paths=[REPO / "config" / "crd" / "bases"],
        work_dir=state_dir / "run",
        kubeconfig=state_dir / "kubeconfig",
    )
    _say(
        "starting the node: control plane, controllers, LeaderWorkerSet, containerd, kubelet, kube-proxy, kube-router,"
        " CoreDNS, metrics-server ..."
    )
    started = time.monotonic()
    try:
        cluster.start()
    except PrerequisiteError as error:
        raise DevRunError(str(error)) from None
    store: ObjectStore | None = None
    gateway: TcpForwarder | None = None
    try:
        _say(f"node {cluster.node_name} Ready in {time.monotonic() - started:.0f} s")
        _say(f"installing llmaz: make deploy DEPLOY_CONFIG=config/node IMG={images['manager'].image} ...")
        try:
            install_llmaz(cluster, images["manager"].image)
        except InstallError as error:
            raise DevRunError(str(error)) from None
        _say(cluster.kubectl("get", "pods", "-n", "llmaz-system").rstrip())
        gateway_ip = cluster.kubectl("get", "service", GATEWAY, "-n", NAMESPACE, "-o", "jsonpath={.spec.clusterIP}")
        gateway = TcpForwarder(("127.0.0.1", GATEWAY_PORT), [(gateway_ip.strip(), 80)])
        gateway.start()
        _say(f"llmaz-gateway: {GATEWAY_URL}/v1 (Service {NAMESPACE}/{GATEWAY}, {gateway_ip.strip()}:80)")
        if demo:
            layout = cluster.layout
            store = ObjectStore(layout.host_ip, layout.ports.object_store, state_dir / "run" / "logs" / "s3.log")
            store.start()
            _say(f"uploaded the tiny model to {upload_tiny_model(store)} ({store.url})")
            _say("serving Playground tiny-llama (config/samples/tiny-llama.yaml) in namespace default:")
            try:
                url, _, _ = serve_demo(cluster, "default", _say)
                started = time.monotonic()
                answer = wait_answer(GATEWAY_URL, "tiny-llama", 60.0)
                _say(f"  {'via gateway':<13} {time.monotonic() - started:5.1f} s later")
                picker = serve_inference_pool(cluster, "default")
            except DemoError as error:
                raise DevRunError(str(error)) from None
            _say(_node_instructions(cluster, url, answer, picker))
        else:
            _say(_node_instructions(cluster, None, None))
        while True:
            time.sleep(3600)
    finally:
        _say("stopping ...")
        if gateway is not None:
            gateway.stop()
        if store is not None:
            store.stop()
        cluster.stop()
        shutil.rmtree(state_dir / "run", ignore_errors=True)
        (state_dir / "kubeconfig").unlink(missing_ok=True)


def _check_no_dev_up(state_dir: Path) -> None:
    if (state_dir / "state.json").exists():
        running = _running_cluster(state_dir)
        if running is not None:
            running.close()
            raise DevRunError(f"a `make dev-up` control plane uses {state_dir}; stop it with `make dev-down`")


def _node_instructions(cluster: Any, url: str | None, answer: dict[str, Any] | None, picker: str | None = None) -> str:
    kubectl = "kubectl" if shutil.which("kubectl") else str(cluster.kubectl_path)
    lines = ["", "llmaz runs on a real node. In another terminal:", "", f"  export KUBECONFIG={cluster.kubeconfig}"]
    lines += [f"  {kubectl} get nodes,pods -A", f"  {kubectl} logs -n llmaz-system deployment/llmaz-controller-manager"]
    if answer is not None:
        lines += [f"  {kubectl} get playground tiny-llama"]
    lines += ["", "Every model llmaz serves, through llmaz-gateway, for any OpenAI client:", ""]
    lines += [f"  export OPENAI_BASE_URL={GATEWAY_URL}/v1", f"  curl {GATEWAY_URL}/v1/models"]
    if url is not None and answer is not None:
        body = '{"model": "tiny-llama", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16}'
        reply = " ".join(str(answer["choices"][0]["message"]["content"]).split())
        lines += [
            "",
            "Chat with the tiny model (random weights: its text is meaningless, the path to it is real):",
            "",
            f"  curl {GATEWAY_URL}/v1/chat/completions -H 'Content-Type: application/json' \\",
            f"    -d '{body}'",
            "",
            f"It just answered through the gateway ({answer['usage']['completion_tokens']} tokens): {reply[:200]}",
            f"Its own Service, {url} (tiny-llama-lb), answers the same requests.",
        ]
    if picker is not None:
        lines += ["", *_pool_instructions(picker)]
    lines += ["", "Ctrl-C stops llmaz, the node and everything it started, and restores the host.", ""]
    return "\n".join(lines)


def _pool_instructions(picker: str) -> list[str]:
    """How a Gateway API Inference Extension gateway, or a plain Envoy, routes to the demo's InferencePool."""
    return [
        'Behind a Gateway API Inference Extension gateway (docs/gateway.md, "Behind a GIE gateway"): the',
        "InferencePool default/tiny-llama holds its engines, and its endpoint picker is llmaz-gateway's (Service",
        f"default/llmaz-epp, {picker}, Envoy's ext_proc over plain gRPC). Route to it with an HTTPRoute:",
        "",
        "  kubectl apply -f - <<'EOF'",
        "  apiVersion: gateway.networking.k8s.io/v1",
        "  kind: HTTPRoute",
        "  metadata: {name: tiny-llama, namespace: default}",
        "  spec:",
        "    parentRefs: [{name: inference-gateway}]  # your GIE-enabled Gateway",
        "    rules:",
        "      - backendRefs: [{group: inference.networking.k8s.io, kind: InferencePool, name: tiny-llama}]",
        "  EOF",
        "",
        f"A plain Envoy routes the same way: its ext_proc filter asks {picker} (request body BUFFERED), and an",
        "ORIGINAL_DST cluster connects to the header x-gateway-destination-endpoint; llmaz-gateway's Envoy variant",
        "runs exactly that (`python -m llmaz.gateway.envoy` prints its bootstrap).",
    ]


def _check_free(state_dir: Path) -> None:
    _check_no_dev_up(state_dir)
    busy = [port for port in (PROBE_PORT, WEBHOOK_PORT, 8080) if is_listening(port)]
    if busy:
        raise DevRunError(f"127.0.0.1 ports {busy} are in use (another `make run`?)")


def _build(kustomize: Path) -> str:
    built = subprocess.run(
        [str(kustomize), "build", str(REPO / "config" / "local")], capture_output=True, text=True, check=False
    )
    if built.returncode != 0:
        raise DevRunError(f"kustomize build config/local failed: {built.stderr}")
    return built.stdout


@contextlib.contextmanager
def _manager(plane: ControlPlane, work_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The manager process, stopped (SIGTERM, then SIGKILL after STOP_TIMEOUT) when the block exits."""
    script = Path(sys.executable).with_name("llmaz-manager")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "llmaz.manager"]
    argv = [*command, f"--kubeconfig={plane.kubeconfig}", f"--webhook-cert-dir={work_dir / 'webhook-certs'}"]
    _say("starting llmaz-manager (logs follow) ...")
    process = subprocess.Popen(
        [*argv, *MANAGER_FLAGS],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=child_setup(die_with_parent=True),
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_ready(manager: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while not _ready():
        if manager.poll() is not None:
            raise DevRunError(f"llmaz-manager exited with {manager.returncode} before it was ready")
        if time.monotonic() > deadline:
            raise DevRunError(f"llmaz-manager not ready after {READY_TIMEOUT:.0f}s (see its logs above)")
        time.sleep(0.2)


def _ready() -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{PROBE_PORT}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _instructions(plane: ControlPlane) -> str:
    kubectl = "kubectl" if shutil.which("kubectl") else str(plane.kubectl_path)
    return f"""
llmaz is running against a local control plane. In another terminal:

  export KUBECONFIG={plane.kubeconfig}
  {kubectl} apply -f config/samples/ollama.yaml
  {kubectl} get playgrounds -w
  {kubectl} get playground qwen2-0--5b-ollama -o jsonpath='{{.status.conditions}}'
  {kubectl} get services.inference.llmaz.io,leaderworkersets,services
  {kubectl} apply -f config/samples/invalid/playground-min-replicas.yaml   # rejected by the webhook

Readiness: http://127.0.0.1:{PROBE_PORT}/readyz   metrics: http://127.0.0.1:8080/metrics
There is no kubelet or scheduler here: Playgrounds get their Service and LeaderWorkerSet, but no pods run.
Ctrl-C stops the manager and the control plane.
"""


def _say(message: str) -> None:
    print(f"[make run] {message}" if "\n" not in message else message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """The first SIGINT, SIGTERM or SIGHUP raises StopRequestedError in the main thread; later ones only tell the user
    to wait, so a second Ctrl-C cannot cut the cleanup short."""
    interrupted = False

    def interrupt(signum: int, _frame: FrameType | None) -> None:
        nonlocal interrupted
        if interrupted:
            _say("still stopping the manager and the control plane ...")
            return
        interrupted = True
        raise StopRequestedError(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
