"""Serving scenarios: how fast a model answers after apply, and how fast the model loader downloads.

- `serving` (needs root and the node tier: `make node-bins image-build`): one real node with llmaz installed by
  `make deploy`; the tiny llama is applied `repeats` times (deleted in between) and each run is timed from apply
  to pod scheduled, model loaded (init containers done), engine Ready and the first chat completion through the
  `-lb` Service. Each repetition then puts the Playground to sleep (annotated `llmaz.io/scale-to-zero-after`,
  scaled to 0 through its scale subresource, its pods gone) and times a chat completion sent through the gateway
  from the request to the answer: scale from zero on demand (docs/gateway.md). A failure there is recorded
  (`wake_errors`) without failing the other timings.
- `loader`: a random object of BENCH_LOADER_MB on the local S3-compatible store (moto on loopback), downloaded
  by `llmaz-loader` and by a plain boto3 `download_file`, alternating which goes first; the ratio is the loader's
  throughput over boto3's, measured in the same run.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from llmaz_dev.envtest._process import free_loopback_ports
from llmaz_dev.envtest.images import find_images
from llmaz_dev.envtest.node import NodeCluster
from llmaz_dev.envtest.node.demo import DEMO_NAME, serve_demo, upload_tiny_model, wait_answer
from llmaz_dev.envtest.node.install import GATEWAY, NAMESPACE, install_llmaz
from llmaz_dev.envtest.objectstore import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, ObjectStore
from suite.settings import REPO

_BUCKET = "bench"
_CHUNK = 1 << 20
WAKE_PHASE = "scaled from zero: first answer through the gateway (s after the request)"
_WAKE_TIMEOUT = 300.0


def serving_run(repeats: int, log_dir: Path) -> dict[str, Any]:
    images = find_images(["pause", "manager", "loader", "llama-server"])
    with tempfile.TemporaryDirectory(prefix="llmaz-bench-node-") as scratch:
        started = time.monotonic()
        cluster = NodeCluster(
            sandbox_image=images["pause"],
            images=list(images.values()),
            crd_paths=[REPO / "config" / "crd" / "bases"],
            work_dir=Path(scratch) / "cluster",
        )
        with cluster:
            node_up = time.monotonic() - started
            install_llmaz(cluster, images["manager"].image)
            installed = time.monotonic() - started
            layout = cluster.layout
            with ObjectStore(layout.host_ip, layout.ports.object_store, log_dir / "serving-s3.log") as store:
                upload_tiny_model(store)
                phases = []
                wake_errors = []
                for _ in range(repeats):
                    _, _, timings = serve_demo(cluster, "default", lambda _line: None)
                    try:
                        timings.seconds[WAKE_PHASE] = _wake_seconds(cluster)
                    except Exception as err:  # the timings above stand on their own
                        wake_errors.append(f"{type(err).__name__}: {err}"[:500])
                    phases.append(timings.seconds)
                    cluster.kubectl("delete", "playground", DEMO_NAME, "-n", "default", "--wait=true")
                    _wait_no_pods(cluster)
    return {"node_up_seconds": node_up, "installed_seconds": installed, "phases": phases, "wake_errors": wake_errors}


def _wake_seconds(cluster: NodeCluster) -> float:
    """Put the demo Playground to sleep, then time one chat completion through the gateway, which wakes it."""
    playground = ("playground", DEMO_NAME, "-n", "default")
    cluster.kubectl("annotate", *playground, "llmaz.io/scale-to-zero-after=1h", "--overwrite")  # not asleep by idling
    cluster.kubectl("scale", *playground, "--replicas=0")
    _wait_no_pods(cluster)
    service = json.loads(cluster.kubectl("get", "service", GATEWAY, "-n", NAMESPACE, "-o", "json"))
    started = time.monotonic()
    # The gateway holds the request while the model wakes; a client read timeout meanwhile is retried and joins
    # the same scale-up (as would a stale endpoint's 502), so the time is request -> answer either way.
    wait_answer(f"http://{service['spec']['clusterIP']}", DEMO_NAME, _WAKE_TIMEOUT)
    return time.monotonic() - started


def _wait_no_pods(cluster: NodeCluster, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    selector = f"leaderworkerset.sigs.k8s.io/name={DEMO_NAME}"
    while cluster.kubectl("get", "pods", "-n", "default", "-l", selector, "-o", "name").strip():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the demo's pods were not gone after {timeout:.0f}s")
        time.sleep(0.5)


def loader_run(megabytes: int, log_dir: Path) -> dict[str, Any]:
    (port,) = free_loopback_ports(1)
    with tempfile.TemporaryDirectory(prefix="llmaz-bench-loader-") as scratch:
        work = Path(scratch)
        blob = work / "weights.safetensors"
        _random_file(blob, megabytes)
        with ObjectStore("127.0.0.1", port, log_dir / "loader-s3.log") as store:
            key = f"models/{blob.name}"
            store.upload(_BUCKET, key, blob)
            blob.unlink()
            seconds: dict[str, list[float]] = {"loader": [], "boto3": []}
            for order in (("loader", "boto3"), ("boto3", "loader")):
                for who in order:
                    target = work / who
                    shutil.rmtree(target, ignore_errors=True)
                    target.mkdir()
                    runner = _loader_seconds if who == "loader" else _boto3_seconds
                    seconds[who].append(runner(store, key, target))
                    landed = target / blob.name
                    if landed.stat().st_size != megabytes * _CHUNK:  # a fast wrong answer is no answer
                        raise RuntimeError(f"{who} wrote {landed.stat().st_size} bytes, not {megabytes} MiB")
            shutil.rmtree(work / "loader", ignore_errors=True)
    size = megabytes * _CHUNK
    loader, boto3 = min(seconds["loader"]), min(seconds["boto3"])
    return {
        "megabytes": megabytes,
        "loader_seconds": seconds["loader"],
        "boto3_seconds": seconds["boto3"],
        "loader_mb_per_s": size / loader / _CHUNK,
        "boto3_mb_per_s": size / boto3 / _CHUNK,
        "ratio": boto3 / loader,
    }


def _random_file(path: Path, megabytes: int) -> None:
    generator = random.Random(20261124)
    with path.open("wb") as out:
        for _ in range(megabytes):
            out.write(generator.randbytes(_CHUNK))


def _loader_seconds(store: ObjectStore, key: str, target: Path) -> float:
    env = {
        **os.environ,
        "MODEL_SOURCE_TYPE": "objstore",
        "PROVIDER": "S3",
        "BUCKET": _BUCKET,
        "MODEL_PATH": key,
        "AWS_ENDPOINT_URL": store.url,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
        "AWS_REGION": REGION,
        "MODEL_DIR": str(target),
        "LOADER_TERMINATION_LOG": str(target / "termination-log"),
    }
    loader = Path(sys.executable).with_name("llmaz-loader")
    started = time.monotonic()
    result = subprocess.run([str(loader)], env=env, capture_output=True, text=True, check=False, timeout=600)
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        raise RuntimeError(f"llmaz-loader exited {result.returncode}: {result.stderr[-2000:]}")
    return elapsed


def _boto3_seconds(store: ObjectStore, key: str, target: Path) -> float:
    client = store.client()
    started = time.monotonic()
    client.download_file(_BUCKET, key, str(target / Path(key).name))
    return time.monotonic() - started
