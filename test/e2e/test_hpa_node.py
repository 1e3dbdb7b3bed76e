"""The HorizontalPodAutoscaler that `elasticConfig` creates, scaling on CPU for real: metrics-server (run by the
node tier) reads the engines' CPU from kubelet, kube-controller-manager's HPA controller (synced every 3 s) scales
the Playground through its scale subresource, from 1 to 2 replicas under chats through the gateway and back to 1
after them.

The Playground is config/samples/tiny-llama-hpa.yaml as it stands (a CPU request of 100m; CPU at 50 % between 1
and 2 replicas; a scale-down stabilization window of 15 s, the HPA's `behavior` through `elasticConfig`, instead
of the default 5 min), with one change: it serves the prefill-heavy random llama (about 10 ms per decoded token
here, so answers are long-ish and an engine under load keeps its core busy) under this test's model name, with
room for two 400-token answers at once. An idle engine shows a few percent of its request, a busy one several
hundred. The load is three clients streaming 400-token answers through the gateway one after the other, for at
most the scale-up wait (180 s). A sampler thread records `kubectl get hpa` (the HPA's own status line), its
desiredReplicas, the Ready pods and the streams in flight every 2 s; the timeline is printed at the end. Every wait
is for a positive signal.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmaz_dev.envtest.objectstore import ObjectStore, tiny_model

from .serving import BUCKET, Streaming, credentials, gateway_url, node_of, routable, running, sampled
from .support import Environment, ModelNames, conditions, eventually, wait_playground_ready

pytestmark = pytest.mark.tier("node")
SAMPLE = Path(__file__).resolve().parents[2] / "config" / "samples" / "tiny-llama-hpa.yaml"
NAME = "tiny-llama-hpa"
MAX_REPLICAS = 2
TARGET_UTILIZATION = 50
CLIENTS = 3
MAX_TOKENS = 400
SAMPLE_EVERY = 2.0


def sample(model: str, uri: str, store: ObjectStore) -> list[dict[str, Any]]:
    """The sample's OpenModel and Playground, serving `model` from `uri`; the rest as the sample has it."""
    openmodel, playground = [doc for doc in yaml.safe_load_all(SAMPLE.read_text()) if doc]
    assert (openmodel["kind"], playground["kind"], playground["metadata"]["name"]) == ("OpenModel", "Playground", NAME)
    spec = playground["spec"]
    elastic, config = spec["elasticConfig"], spec["backendRuntimeConfig"]
    (metric,) = elastic["scaleTrigger"]["hpa"]["metrics"]
    assert (elastic["minReplicas"], elastic["maxReplicas"]) == (1, MAX_REPLICAS), elastic
    assert metric["resource"]["target"]["averageUtilization"] == TARGET_UTILIZATION, metric
    assert config["resources"]["requests"]["cpu"] == "100m", config
    assert {"name": "AWS_ENDPOINT_URL", "value": store.url} in config["envs"], "the sample names the node's store"
    openmodel["metadata"]["name"] = spec["modelClaim"]["modelName"] = model
    openmodel["spec"]["source"]["uri"] = uri
    config["args"] = ["--alias", model, "-c", "2048", "-np", "2"]
    return [openmodel, playground]


def hpa_utilization(hpa: dict[str, Any]) -> int | None:
    """The CPU utilization the HPA last computed (percent of request), or None before it has one."""
    for metric in (hpa.get("status") or {}).get("currentMetrics") or []:
        current = (metric.get("resource") or {}).get("current") or {}
        if metric.get("type") == "Resource" and "averageUtilization" in current:
            return int(current["averageUtilization"])
    return None


@dataclass(frozen=True)
class Reading:
    at: float
    line: str
    desired: int
    ready: int
    streaming: int


def desired_steps(readings: list[Reading]) -> list[int]:
    """desiredReplicas over time, each run of equal readings as one step."""
    steps: list[int] = []
    for reading in readings:
        if not steps or steps[-1] != reading.desired:
            steps.append(reading.desired)
    return steps


def timeline_text(readings: list[Reading]) -> str:
    return "\n".join(f"  t={r.at:6.1f}s  {r.line}  | desired {r.desired}  Ready pods {r.ready}  "
                     f"streaming {r.streaming}" for r in readings)  # fmt: skip


def test_an_hpa_on_cpu_scales_a_playground_from_one_to_two_replicas_under_chats_and_back_after_them(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    model = models.new("hpa")
    uri = object_store.upload(BUCKET, "prefill-heavy/prefill-heavy.gguf", tiny_model("prefill-heavy"))
    e2e.apply([credentials()], namespace)
    e2e.apply(sample(model, uri, object_store), namespace)
    wait_playground_ready(e2e, namespace, NAME, replicas=1)
    routable(e2e, model)

    # metrics-server has scraped the engine, and the HPA controller reads it through the aggregated API.
    admin = node_of(e2e).admin_client()
    (leader,) = e2e.ready_pods_of(namespace, NAME)

    def engine_measured() -> dict[str, Any] | None:
        pods = admin.request("GET", f"/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods")["items"]
        return next((p for p in pods if p["metadata"]["name"] == leader["metadata"]["name"] and p["containers"]), None)

    measured = eventually(
        engine_measured, within=90, what=f"metrics.k8s.io metrics of pod {leader['metadata']['name']}"
    )
    print(f"\nmetrics-server: {[(c['name'], c['usage']) for c in measured['containers']]}")

    # The first reading may still hold the engine's start: wait for the idle engine below the target, at 1.
    def hpa_reading_idle_cpu() -> dict[str, Any]:
        hpa = e2e.must_get("hpas", NAME, namespace)
        status = hpa.get("status") or {}
        assert conditions(hpa).get("ScalingActive", ("", ""))[0] == "True", conditions(hpa)
        utilization = hpa_utilization(hpa)
        assert utilization is not None, status
        assert utilization < TARGET_UTILIZATION, f"the idle engine uses {utilization}% of its request"
        assert (status.get("desiredReplicas"), status.get("currentReplicas")) == (1, 1), status
        return hpa

    eventually(hpa_reading_idle_cpu, within=90, what=f"HPA {NAME} reading the idle engine's CPU")
    print(f"idle: {e2e.kubectl('get', 'hpa', NAME, '-n', namespace, '--no-headers').strip()}")

    def at_max() -> bool:
        desired = (e2e.must_get("hpas", NAME, namespace).get("status") or {}).get("desiredReplicas")
        replicas = e2e.must_get("playgrounds", NAME, namespace)["spec"]["replicas"]
        return bool(desired == replicas == MAX_REPLICAS) and len(e2e.ready_pods_of(namespace, NAME)) == MAX_REPLICAS

    def back_to_min() -> bool:
        desired = (e2e.must_get("hpas", NAME, namespace).get("status") or {}).get("desiredReplicas")
        replicas = e2e.must_get("playgrounds", NAME, namespace)["spec"]["replicas"]
        return bool(desired == replicas == 1)

    load = Streaming(gateway_url(e2e).removesuffix("/v1"), model, CLIENTS, MAX_TOKENS)

    def reading(at: float) -> Reading:
        """The HPA's own status line (`kubectl get hpa`), its desiredReplicas, the Ready pods, the streams."""
        line = " ".join(e2e.kubectl("get", "hpa", NAME, "-n", namespace, "--no-headers").split())
        desired = (e2e.must_get("hpas", NAME, namespace).get("status") or {})["desiredReplicas"]
        return Reading(at, line, desired, len(e2e.ready_pods_of(namespace, NAME)), load.in_flight)

    with sampled(reading, every=SAMPLE_EVERY) as timeline:
        with running(load):
            eventually(
                at_max, within=180, what=f"the HPA at {MAX_REPLICAS} replicas, all Ready, under {CLIENTS} streams"
            )
            scaled_up = timeline.now()
        stopped = timeline.now()
        eventually(back_to_min, within=120, what="the HPA back at 1 replica once the streams stopped")
        scaled_down = timeline.now()
    timeline.readings.append(reading(timeline.now()))  # the reading that saw 1 may fall between two samples
    print(f"\n{len(load.streams)} streams; {MAX_REPLICAS} Ready at t={scaled_up:.1f}s, streams stopped at "
          f"t={stopped:.1f}s, 1 replica at t={scaled_down:.1f}s (kubectl get hpa: NAME REFERENCE TARGETS MINPODS "
          f"MAXPODS REPLICAS AGE):\n{timeline_text(timeline.readings)}")  # fmt: skip

    failed = load.failed()
    assert failed == [], f"{len(failed)} of {len(load.streams)} streams failed: {[s.error for s in failed][:3]}"
    assert len(load.streams) >= CLIENTS
    assert desired_steps(timeline.readings) == [1, MAX_REPLICAS, 1], timeline_text(timeline.readings)

    def rescaled_down() -> list[str] | None:
        events = e2e.items("events", namespace)
        messages = [
            e["message"]
            for e in events
            if e.get("reason") == "SuccessfulRescale" and e["involvedObject"].get("kind") == "HorizontalPodAutoscaler"
        ]
        return messages if any(m.startswith("New size: 1;") for m in messages) else None

    rescales = eventually(rescaled_down, what="the HPA's SuccessfulRescale Event back to 1")
    print("\n".join(f"  SuccessfulRescale: {message}" for message in rescales))
    up = f"New size: {MAX_REPLICAS}; reason: cpu resource utilization (percentage of request) above target"
    # Listed by name, not by time: one rescale each way.
    assert sorted(rescales) == sorted([up, "New size: 1; reason: All metrics below target"]), rescales
    eventually(lambda: len(e2e.pods_of(namespace, NAME)) == 1, within=120, what="the second pod gone")
