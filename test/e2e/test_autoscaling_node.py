"""llmaz-gateway's autoscaler on the real node: streams through the gateway scale a Playground up, and it comes back
down once they stop.

The Playground serves the prefill-heavy random llama (about 10 ms per decoded token here) with one slot per
replica (`-np 1`) and a `requests` trigger of 1 per replica between 1 and 2 replicas, with windows short enough
for a test (stable 20s, panic 4s, scaleDownDelay 20s). Three clients stream long answers through the gateway one
after the other, so the engines hold 3 requests: the autoscaler wants 3 and is bounded to 2. A sampler thread
reads spec.replicas, the Ready pods and the streams in flight every second, for the timeline printed at the end.
The clients' pace is the workload; every wait is for a positive signal.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from llmaz_dev.envtest.objectstore import ObjectStore, tiny_model

from .serving import (
    BUCKET,
    Streaming,
    credentials,
    gateway_events,
    gateway_url,
    routable,
    running,
    sampled,
    served,
    tiny_llama,
)
from .support import Environment, ModelNames, eventually, wait_playground_ready

pytestmark = pytest.mark.tier("node")
NAME = "scaled"
MAX_REPLICAS = 2
ELASTIC = {
    "minReplicas": 1,
    "maxReplicas": MAX_REPLICAS,
    "scaleTrigger": {
        "requests": {"targetPerReplica": 1, "stableWindow": "20s", "panicWindow": "4s", "scaleDownDelay": "20s"}
    },
}
CLIENTS = 3
MAX_TOKENS = 400


@dataclass(frozen=True)
class Reading:
    at: float
    replicas: int
    ready: int
    streaming: int


def timeline_text(readings: list[Reading]) -> str:
    return "\n".join(f"  t={r.at:6.1f}s  replicas {r.replicas}  ready {r.ready}  streaming {r.streaming}"
                     for r in readings)  # fmt: skip


def test_streams_through_the_gateway_scale_a_playground_up_to_its_max_and_it_comes_back_down_when_they_stop(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    model = models.new("autoscaled")
    uri = object_store.upload(BUCKET, "prefill-heavy/prefill-heavy.gguf", tiny_model("prefill-heavy"))
    e2e.apply([credentials()], namespace)
    playground = served(NAME, model, object_store)
    playground["spec"]["backendRuntimeConfig"]["args"] += ["-c", "2048", "-np", "1"]
    playground["spec"]["elasticConfig"] = ELASTIC
    e2e.apply([tiny_llama(model, uri), playground], namespace)
    wait_playground_ready(e2e, namespace, NAME, replicas=1)
    routable(e2e, model)

    def at_max() -> bool:
        replicas = e2e.must_get("playgrounds", NAME, namespace)["spec"]["replicas"]
        return replicas == MAX_REPLICAS and len(e2e.ready_pods_of(namespace, NAME)) == MAX_REPLICAS

    def back_to_min() -> bool:
        return bool(e2e.must_get("playgrounds", NAME, namespace)["spec"]["replicas"] == 1)

    load = Streaming(gateway_url(e2e).removesuffix("/v1"), model, CLIENTS, MAX_TOKENS)

    def reading(at: float) -> Reading:
        replicas = e2e.must_get("playgrounds", NAME, namespace)["spec"]["replicas"]
        return Reading(at, replicas, len(e2e.ready_pods_of(namespace, NAME)), load.in_flight)

    with sampled(reading) as timeline:
        with running(load):
            eventually(at_max, within=180, what=f"{MAX_REPLICAS} replicas, all Ready, under {CLIENTS} streams")
            scaled_up = timeline.now()
        stopped = timeline.now()
        eventually(back_to_min, within=90, what="1 replica again once the streams stopped")
        scaled_down = timeline.now()
    print(f"\n{len(load.streams)} streams; {MAX_REPLICAS} Ready at t={scaled_up:.1f}s, streams stopped at "
          f"t={stopped:.1f}s, 1 replica at t={scaled_down:.1f}s:\n{timeline_text(timeline.readings)}")  # fmt: skip
    failed = load.failed()
    assert failed == [], f"{len(failed)} of {len(load.streams)} streams failed: {[s.error for s in failed][:3]}"
    assert len(load.streams) >= CLIENTS
    assert max(r.replicas for r in timeline.readings) <= MAX_REPLICAS, timeline_text(timeline.readings)
    loaded = [r.replicas for r in timeline.readings if scaled_up <= r.at <= stopped]
    assert set(loaded) <= {MAX_REPLICAS}, f"the count moved under steady streams:\n{timeline_text(timeline.readings)}"
    up = eventually(lambda: gateway_events(e2e, namespace, NAME, "ScaledUp"), what="the ScaledUp Event")
    down = eventually(lambda: gateway_events(e2e, namespace, NAME, "ScaledDown"), what="the ScaledDown Event")
    print("\n".join(f"  {e['reason']}: {e['message']}" for e in up + down))
    assert any(e["message"].startswith("Scaled from 1 to 2 replicas") for e in up), up
    assert any(e["message"].startswith("Scaled from 2 to 1 replicas") for e in down), down
    eventually(lambda: len(e2e.pods_of(namespace, NAME)) == 1, within=120, what="the second pod gone")
