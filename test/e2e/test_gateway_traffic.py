"""llmaz-gateway under steady traffic on the real node: a model in use never sleeps, and a restart fails nothing.

Each test drives a client at a fixed pace through the gateway (host -> gateway Service -> gateway pod -> engine
pod) while something happens to the model, then checks every answer and the Events. The pace is the workload, not
a wait: the checks themselves wait for positive signals.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from llmaz_dev.envtest.objectstore import ObjectStore, tiny_model

from .serving import (
    BUCKET,
    KEY,
    Stream,
    api_chat,
    credentials,
    gateway_events,
    gateway_url,
    lb_url,
    paced,
    routable,
    served,
    tiny_llama,
)
from .support import Environment, ModelNames, eventually, pod_ready, wait_playground_ready

pytestmark = pytest.mark.tier("node")
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"


def serve(e2e: Environment, namespace: str, name: str, model: str, store: ObjectStore, idle: str | None) -> None:
    e2e.apply([credentials()], namespace)
    playground = served(name, model, store)
    if idle is not None:
        playground["metadata"]["annotations"] = {"llmaz.io/scale-to-zero-after": idle}
    e2e.apply([tiny_llama(model, f"s3://{BUCKET}/{KEY}"), playground], namespace)
    wait_playground_ready(e2e, namespace, name, replicas=1)
    routable(e2e, model)


def answers(url: str, model: str) -> bool:
    try:
        return api_chat(url, model, timeout=30)[0] == 200
    except OSError:  # refused or reset while the address is being set up: not yet
        return False


@pytest.mark.parametrize("target", ["gateway", "lb"], ids=["through-the-gateway", "straight-to-the-lb-service"])
def test_a_model_asked_every_3_seconds_never_sleeps_with_a_20_second_idle_time(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore, target: str
) -> None:
    """Through the gateway, or straight to the model's `-lb` Service, which the gateway never sees: the engines'
    own work keeps the model awake either way."""
    model = models.new("steady")
    serve(e2e, namespace, "steady", model, object_store, idle="20s")
    url = gateway_url(e2e) if target == "gateway" else lb_url(e2e, namespace, "steady") + "/v1"
    # The minute starts once the address answers this model with the client's own request (routable() waited for
    # the gateway's route, not for the -lb Service).
    eventually(lambda: answers(url, model), within=60, what=f"{url} answering for {model}")
    with paced(url, model, period=3.0) as client:
        eventually(lambda: len(client.answers) >= 21, within=120, what="a minute of requests every 3 s")
    print(f"\n{len(client.answers)} requests, one every 3 s:\n{client.timeline()}")
    assert [a.status for a in client.answers] == [200] * len(client.answers), client.timeline()
    slowest = max(a.seconds for a in client.answers)
    assert slowest < 1.5, f"a request waited {slowest:.2f} s (a wake?):\n{client.timeline()}"
    assert gateway_events(e2e, namespace, "steady", "ScaledToZero") == []
    assert gateway_events(e2e, namespace, "steady", "ScaledFromZero") == []
    assert e2e.must_get("playgrounds", "steady", namespace)["spec"]["replicas"] == 1


def test_requests_sent_while_the_only_engine_pod_is_replaced_are_held_and_answered(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    model = models.new("restart")
    serve(e2e, namespace, "restart", model, object_store, idle=None)
    (old,) = e2e.items("pods", namespace, f"{LWS_NAME_LABEL}=restart")
    old_uid = old["metadata"]["uid"]

    def replaced_and_ready() -> bool:
        pods = e2e.items("pods", namespace, f"{LWS_NAME_LABEL}=restart")
        return any(p["metadata"]["uid"] != old_uid and pod_ready(p) for p in pods)

    with paced(gateway_url(e2e), model, period=0.5) as client:
        eventually(lambda: len(client.answers) >= 4, what="the client answered before the deletion")
        deleted_at = time.monotonic() - client.started
        e2e.kubectl("delete", "pod", old["metadata"]["name"], "-n", namespace, "--wait=false")
        eventually(replaced_and_ready, within=180, what="a new engine pod Ready")
        ready_at = time.monotonic() - client.started
        seen = len(client.answers)
        eventually(lambda: len(client.answers) >= seen + 4, what="4 more answers from the new pod")
    print(f"\npod deleted at t={deleted_at:.2f}s, its replacement Ready at t={ready_at:.2f}s:\n{client.timeline()}")
    failed = [a for a in client.answers if a.status != 200]
    assert failed == [], f"{len(failed)} failed: {[a.body[:200] for a in failed]}\n{client.timeline()}"
    during = [a for a in client.answers if deleted_at <= a.sent <= ready_at]
    assert during, "no request was sent while the pod was replaced"


def test_a_rolling_restart_of_two_engines_under_steady_traffic_fails_nothing(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    # A changed environment changes the pod template: LeaderWorkerSet replaces the groups one at a time.
    model = models.new("rolling")
    e2e.apply([credentials()], namespace)
    e2e.apply([tiny_llama(model, f"s3://{BUCKET}/{KEY}"), served("rolling", model, object_store, replicas=2)],
              namespace)  # fmt: skip
    wait_playground_ready(e2e, namespace, "rolling", replicas=2)
    routable(e2e, model)
    selector = f"{LWS_NAME_LABEL}=rolling"
    old = {p["metadata"]["uid"] for p in e2e.items("pods", namespace, selector)}
    marks: list[str] = []

    def rolled() -> bool:
        pods = e2e.items("pods", namespace, selector)
        new = [p for p in pods if p["metadata"]["uid"] not in old]
        return len(pods) == len(new) == 2 and all(pod_ready(p) for p in new)

    with paced(gateway_url(e2e), model, period=0.5) as client:
        eventually(lambda: len(client.answers) >= 4, what="the client answered before the restart")
        marks.append(f"restart (envs changed) at t={time.monotonic() - client.started:.2f}s")
        change = [{"op": "add", "path": "/spec/backendRuntimeConfig/envs/-", "value": {"name": "ROLL", "value": "1"}}]
        e2e.kubectl("patch", "playground", "rolling", "-n", namespace, "--type=json", "-p", json.dumps(change))
        eventually(rolled, within=300, what="both engine pods replaced and Ready")
        marks.append(f"both new pods Ready at t={time.monotonic() - client.started:.2f}s")
        seen = len(client.answers)
        eventually(lambda: len(client.answers) >= seen + 4, what="4 more answers from the new pods")
    print(f"\n{'; '.join(marks)}:\n{client.timeline()}")
    failed = [a for a in client.answers if a.status != 200]
    assert failed == [], f"{len(failed)} failed: {[a.body[:200] for a in failed]}\n{client.timeline()}"
    slowest = max(a.seconds for a in client.answers)
    print(f"{len(client.answers)} requests, none failed, slowest {slowest * 1000:.0f} ms")


def test_a_stream_on_the_replica_a_scale_down_removes_finishes_before_its_engine_stops(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    # The prefill-heavy model decodes about a hundred tokens a second here: a long answer is a stream of seconds.
    model = models.new("drain")
    uri = object_store.upload(BUCKET, "prefill-heavy/prefill-heavy.gguf", tiny_model("prefill-heavy"))
    e2e.apply([credentials()], namespace)
    playground = served("drain", model, object_store, replicas=2)
    playground["spec"]["backendRuntimeConfig"]["args"] += ["-c", "2048", "-np", "1"]
    e2e.apply([tiny_llama(model, uri), playground], namespace)
    wait_playground_ready(e2e, namespace, "drain", replicas=2)
    # LeaderWorkerSet scales down from the highest group index: the pod `drain-1` goes.
    leaving = e2e.must_get("pods", "drain-1", namespace)
    stream = Stream(f"http://{leaving['status']['podIP']}:8080", model, max_tokens=1500)
    thread = threading.Thread(target=stream.run, name="stream", daemon=True)
    thread.start()
    assert stream.first_chunk.wait(60), "the stream did not start"
    assert not stream.error, stream.error
    scaled = time.monotonic()
    e2e.kubectl("scale", "playground", "drain", "-n", namespace, "--replicas=1")
    eventually(lambda: (e2e.get("pods", "drain-1", namespace) or {}).get("metadata", {}).get("deletionTimestamp"),
               what="drain-1 terminating")  # fmt: skip
    thread.join(timeout=150)
    assert not thread.is_alive(), "the stream never ended"
    print(f"\nscaled down; the stream on drain-1 ended {stream.ended - scaled:.1f} s later, {stream.chunks} chunks")
    assert stream.error == "", stream.error
    assert stream.done, f"the stream was cut after {stream.chunks} chunks"
    assert stream.completion_tokens == 1500, stream.completion_tokens
    eventually(lambda: e2e.get("pods", "drain-1", namespace) is None, within=120, what="drain-1 gone")
