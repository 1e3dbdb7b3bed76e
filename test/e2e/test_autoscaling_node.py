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

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

from llmaz.envtest.objectstore import ObjectStore, tiny_model

from .serving import BUCKET, Streaming, credentials, gateway_events, gateway_url, routable, running, served, tiny_llama
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


@dataclass
class Timeline:
    """The Playground's spec.replicas, its Ready pods and the streams in flight, read every second on a thread."""

    e2e: Environment
    namespace: str
    load: Streaming
    readings: list[Reading] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        ticks = 0
        while not self._stop.is_set():
            at = time.monotonic() - self.started
            try:
                replicas = self.e2e.must_get("playgrounds", NAME, self.namespace)["spec"]["replicas"]
                ready = len(self.e2e.ready_pods_of(self.namespace, NAME))
            except (OSError, RuntimeError):  # an API server slow under the load: this reading is skipped
                pass
            else:
                self.readings.append(Reading(at, replicas, ready, self.load.in_flight))
            ticks += 1
            self._stop.wait(max(0.0, self.started + ticks - time.monotonic()))

    def now(self) -> float:
        return time.monotonic() - self.started

    def stop(self) -> None:
        self._stop.set()

    def text(self) -> str:
        return "\n".join(f"  t={r.at:6.1f}s  replicas {r.replicas}  ready {r.ready}  streaming {r.streaming}"
                         for r in self.readings)  # fmt: skip


@contextmanager
def sampled(e2e: Environment, namespace: str, load: Streaming) -> Iterator[Timeline]:
    timeline = Timeline(e2e, namespace, load)
    thread = threading.Thread(target=timeline.run, name="timeline", daemon=True)
    thread.start()
    try:
        yield timeline
    finally:
        timeline.stop()
        thread.join(timeout=30)


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
    with sampled(e2e, namespace, load) as timeline:
        with running(load):
            eventually(at_max, within=180, what=f"{MAX_REPLICAS} replicas, all Ready, under {CLIENTS} streams")
            scaled_up = timeline.now()
        stopped = timeline.now()
        eventually(back_to_min, within=90, what="1 replica again once the streams stopped")
        scaled_down = timeline.now()
    print(f"\n{len(load.streams)} streams; {MAX_REPLICAS} Ready at t={scaled_up:.1f}s, streams stopped at "
          f"t={stopped:.1f}s, 1 replica at t={scaled_down:.1f}s:\n{timeline.text()}")  # fmt: skip
    failed = load.failed()
    assert failed == [], f"{len(failed)} of {len(load.streams)} streams failed: {[s.error for s in failed][:3]}"
    assert len(load.streams) >= CLIENTS
    assert max(r.replicas for r in timeline.readings) <= MAX_REPLICAS, timeline.text()
    loaded = [r.replicas for r in timeline.readings if scaled_up <= r.at <= stopped]
    assert set(loaded) <= {MAX_REPLICAS}, f"the count moved under steady streams:\n{timeline.text()}"
    up = eventually(lambda: gateway_events(e2e, namespace, NAME, "ScaledUp"), what="the ScaledUp Event")
    down = eventually(lambda: gateway_events(e2e, namespace, NAME, "ScaledDown"), what="the ScaledDown Event")
    print("\n".join(f"  {e['reason']}: {e['message']}" for e in up + down))
    assert any(e["message"].startswith("Scaled from 1 to 2 replicas") for e in up), up
    assert any(e["message"].startswith("Scaled from 2 to 1 replicas") for e in down), down
    eventually(lambda: len(e2e.pods_of(namespace, NAME)) == 1, within=120, what="the second pod gone")
