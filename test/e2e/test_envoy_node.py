"""llmaz-gateway's Envoy variant on the real node: Envoy takes the gateway Service's traffic and asks the gateway's
Endpoint Picker, in the same pod, where each request goes (docs/gateway.md, "The Envoy variant").

For this module the node's gateway (config/node/gateway, installed with the Python proxy) is rebuilt with
config/gateway-envoy instead of config/gateway, with the node's images (the gateway runs the manager image, as
`make deploy IMG=...` sets it; Envoy the `envoy` image of `make image-build`), applied server-side as `make deploy`
applies it, and rolled out; afterwards config/node/gateway is applied again and rolled out, as installed. Every
answer is checked to come from Envoy (its `server: envoy` header), so no test passes through the Python proxy.

The Playground of the tiny llama at two replicas with prefix-aware routing serves every test but the two about
models without a ready endpoint; those have Playgrounds of their own at zero replicas.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmaz_dev.envtest.images import LocalImage, find_images
from llmaz_dev.envtest.objectstore import ObjectStore

from .conftest import REPO
from .serving import (
    BUCKET,
    GATEWAY,
    GATEWAY_NAMESPACE,
    KEY,
    Answer,
    assert_completion,
    gateway_events,
    gateway_url,
    node_of,
    paced,
    served,
    tiny_llama,
)
from .support import Environment, ModelNames, chat_request, eventually, pod_ready, sse_events
from .test_gateway import asleep_playground, names_the_gateway_pods
from .test_gateway_routing import ask, serve_routed, system_prompt

pytestmark = pytest.mark.tier("node")
ROLLOUT = ("rollout", "status", f"deployment/{GATEWAY}", "-n", GATEWAY_NAMESPACE, "--timeout=180s")
NODE_GATEWAY = REPO / "config" / "node" / "gateway"
# A model no Playground serves: the picker answers 404 for it at once, wakes nothing, and says who answered.
PROBE_MODEL = "envoy-probe-no-such-model"
# The longest any one request may take while the picker is down or restarting: Envoy fails it at once then.
HANG_BOUND = 15.0


# The gateway switched to the Envoy variant for the module


def _image(name: str, image: LocalImage) -> dict[str, str]:
    repository, tag = image.image.rsplit(":", 1)
    return {"name": name, "newName": repository, "newTag": tag}


def gateway_build(e2e: Environment, directory: Path, component: str) -> list[dict[str, Any]]:
    """config/node/gateway built with `config/<component>` as its component, the node's images set."""
    kustomization = yaml.safe_load((NODE_GATEWAY / "kustomization.yaml").read_text())
    assert kustomization["components"] == ["../../gateway"], "config/node/gateway names config/gateway alone"
    directory.mkdir(parents=True)
    # kustomize refuses an absolute path as a component, and takes a relative one from anywhere.
    kustomization["components"] = [os.path.relpath(REPO / "config" / component, directory)]
    images = find_images(["manager", "envoy"])
    kustomization["images"] = [_image("controller", images["manager"]), _image("envoy", images["envoy"])]
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return [doc for doc in yaml.safe_load_all(e2e.kubectl("kustomize", str(directory))) if doc]


def apply_rolled_out(e2e: Environment, objects: list[dict[str, Any]]) -> None:
    # The install's own field manager (kubectl's), so what one build has and the other lacks is removed.
    e2e.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(objects))
    e2e.kubectl(*ROLLOUT)


def call(url: str, body: bytes, timeout: float) -> tuple[int, dict[str, str], bytes]:
    """One POST of a JSON `body` to `url`: the status, the headers (names lower-cased) and the body, any status."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with opener.open(request, timeout=timeout) as response:
            return int(response.status), {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as error:
        return int(error.code), {k.lower(): v for k, v in error.headers.items()}, error.read()


def chat_call(url: str, model: str, timeout: float, *, stream: bool = False) -> tuple[int, dict[str, str], bytes]:
    return call(f"{url}/chat/completions", chat_request(model, stream=stream), timeout)


def served_by(url: str) -> str | None:
    """The `server` header of the gateway's answer for a model nobody serves; None while nothing answers."""
    try:
        _, headers, _ = chat_call(url, PROBE_MODEL, timeout=10)
    except OSError:
        return None
    return headers.get("server", "")


@pytest.fixture(scope="module")
def envoy_gateway(e2e: Environment, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The gateway's API URL (its Service) with Envoy serving it; the Python proxy's install put back afterwards."""
    work = tmp_path_factory.mktemp("gateway-builds")
    with_envoy = gateway_build(e2e, work / "envoy", "gateway-envoy")
    as_installed = gateway_build(e2e, work / "python", "gateway")
    url = gateway_url(e2e)
    try:
        apply_rolled_out(e2e, with_envoy)
        # kube-proxy may send a new connection to the old pod while it terminates, for a moment.
        eventually(lambda: served_by(url) == "envoy", within=60, what="Envoy answering through the gateway Service")
        yield url
    finally:
        apply_rolled_out(e2e, as_installed)
        eventually(lambda: served_by(url) not in (None, "envoy"), within=90, what="the Python proxy answering again")
        for obj in with_envoy:
            if obj["kind"] == "ConfigMap":
                e2e.kubectl("delete", "configmap", obj["metadata"]["name"], "-n", GATEWAY_NAMESPACE, "--wait=false")


# One namespace and one Playground for the module


@pytest.fixture(scope="module")
def namespace(e2e: Environment) -> Iterator[str]:
    """The module's namespace (named `namespace`, so a failed test's report shows what it holds)."""
    name = e2e.cluster.create_namespace("envoy-node")
    eventually(lambda: e2e.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"), what="default ServiceAccount")
    yield name
    e2e.cluster.delete_namespace(name)


@pytest.fixture(scope="module")
def models(e2e: Environment, namespace: str) -> Iterator[ModelNames]:
    names = ModelNames(namespace.rsplit("-", 1)[-1])
    yield names
    for name in names.issued:
        e2e.kubectl("delete", "openmodel", name, "--ignore-not-found", "--wait=false")


@pytest.fixture(scope="module")
def tiny(e2e: Environment, envoy_gateway: str, namespace: str, models: ModelNames, object_store: ObjectStore) -> str:
    """The tiny llama served by Playground `affinity` (two replicas, prefix-aware routing), answering through Envoy."""
    model = models.new("tiny")
    serve_routed(e2e, namespace, "affinity", model, object_store)

    def answered() -> bool:
        try:
            status, headers, _ = chat_call(envoy_gateway, model, timeout=30)
        except OSError:
            return False
        return status == 200 and headers.get("server") == "envoy"

    eventually(answered, what=f"Envoy answering for {model}")
    return model


def from_envoy(headers: dict[str, str]) -> bool:
    return headers.get("server") == "envoy"


# a. Chats


def test_a_chat_and_a_streamed_chat_through_envoy_answer_whole(envoy_gateway: str, tiny: str) -> None:
    status, headers, body = chat_call(envoy_gateway, tiny, timeout=30)
    print(f"\nchat through Envoy: {status}, server {headers.get('server')!r}")
    assert from_envoy(headers), headers
    assert_completion(status, body, tiny)

    status, headers, body = chat_call(envoy_gateway, tiny, timeout=30, stream=True)
    events = sse_events(body)
    print(f"streamed chat through Envoy: {status}, {len(events)} events, server {headers.get('server')!r}")
    assert status == 200, body[:300]
    assert from_envoy(headers), headers
    assert headers.get("content-type", "").startswith("text/event-stream"), headers
    assert "content-length" not in headers, headers  # passed on as it comes, never buffered to a length
    assert body.endswith(b"data: [DONE]\n\n"), body[-200:]
    assert events[-1] == "[DONE]", events[-3:]
    chunks = [json.loads(event) for event in events[:-1]]  # each chunk whole: one JSON object per event
    assert len(chunks) >= 3, chunks  # the role, at least one token, the usage
    assert all(chunk["object"] == "chat.completion.chunk" and chunk["model"] == tiny for chunk in chunks), chunks
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]), chunks
    usage = chunks[-1]["usage"]
    assert 0 < usage["completion_tokens"] <= 8, chunks[-1]


# b. Prefix affinity


def test_requests_under_one_system_prompt_go_where_it_was_prefilled_through_envoy(
    envoy_gateway: str, tiny: str
) -> None:
    groups = {g: system_prompt(100 + g) for g in range(2)}
    seen: set[int] = set()
    misses: list[str] = []
    for i in range(10):
        group = i % 2
        usage = ask(envoy_gateway, tiny, groups[group], f"question {i}?")
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        line = f"request {i} group {group}: {cached} of {usage['prompt_tokens']} prompt tokens cached"
        print(line)
        if group in seen and cached < 0.8 * usage["prompt_tokens"]:
            misses.append(line)
        seen.add(group)
    assert misses == [], "prefilled again:\n" + "\n".join(misses)


# c. Held while the model wakes from zero


def test_a_request_for_a_model_scaled_to_zero_is_held_through_envoy_and_answered_once_it_woke(
    e2e: Environment, envoy_gateway: str, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    model = models.new("sleepy")
    asleep_playground(e2e, namespace, "sleepy", model, object_store)
    # The gateway has seen the Playground asleep once its activator serves the -lb Service.
    eventually(lambda: names_the_gateway_pods(e2e, namespace, "sleepy"), what="the gateway seeing sleepy asleep")
    assert e2e.ready_pods_of(namespace, "sleepy") == []

    def held() -> tuple[int, dict[str, str], bytes, float] | None:
        asked = time.monotonic()
        status, headers, body = chat_call(envoy_gateway, model, timeout=240)
        # Until the picker's catalog has the model it answers 404, which wakes nothing.
        return None if status == 404 else (status, headers, body, time.monotonic() - asked)

    status, headers, body, seconds = eventually(held, within=300, what=f"a request for {model} answered")
    print(f"\nheld through Envoy while {model} woke from zero: {status} after {seconds:.1f} s")
    assert from_envoy(headers), headers
    assert_completion(status, body, model)
    woken = gateway_events(e2e, namespace, "sleepy", "ScaledFromZero")
    assert len(woken) == 1, woken
    assert woken[0]["message"] == f"Scaled from 0 to 1 replica for a request for model {model}"


# d. Nothing coming


def test_a_model_with_no_ready_endpoint_and_none_coming_is_refused_503_in_openais_format(
    e2e: Environment, envoy_gateway: str, namespace: str, models: ModelNames
) -> None:
    model = models.new("idle")
    # Zero replicas, and no scale to zero asked: nothing wakes it.
    e2e.apply([tiny_llama(model, f"s3://{BUCKET}/{KEY}"), served("idle", model, None, replicas=0)], namespace)

    def refused() -> tuple[int, dict[str, str], bytes, float] | None:
        asked = time.monotonic()
        status, headers, body = chat_call(envoy_gateway, model, timeout=30)
        # 404 until the picker's catalog has the model.
        return None if status == 404 else (status, headers, body, time.monotonic() - asked)

    status, headers, body, seconds = eventually(refused, what=f"the picker knowing {model}")
    print(f"\nno endpoint, none coming, through Envoy: {status} in {seconds * 1000:.0f} ms: {body[:300]!r}")
    assert from_envoy(headers), headers
    assert status == 503, body[:300]
    assert seconds < 10, "refused at once, not held"
    assert headers.get("content-type", "").startswith("application/json"), headers
    assert headers.get("retry-after") == "5", headers
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert (error["type"], error["code"]) == ("server_error", "model_not_ready"), error
    assert model in error["message"], error
    assert "none is coming" in error["message"], error
    assert e2e.must_get("playgrounds", "idle", namespace)["spec"]["replicas"] == 0, "nothing was woken"


# e. The picker killed mid-traffic: FailClose


def gateway_pod(e2e: Environment) -> dict[str, Any]:
    pods = e2e.items("pods", GATEWAY_NAMESPACE, "app.kubernetes.io/component=gateway")
    (pod,) = [p for p in pods if not p["metadata"].get("deletionTimestamp") and pod_ready(p)]
    return pod


def container_status(pod: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [s for s in pod["status"]["containerStatuses"] if s["name"] == name]
    status: dict[str, Any] = found
    return status


def test_with_the_picker_killed_envoy_fails_requests_at_once_and_serves_again_once_it_restarted(
    e2e: Environment, envoy_gateway: str, tiny: str
) -> None:
    pod = gateway_pod(e2e)
    name, ip = pod["metadata"]["name"], pod["status"]["podIP"]
    picker = container_status(pod, "gateway")
    # Straight to the pod's Envoy: while its gateway container is down the pod is not Ready, and the Service
    # sends nothing to it.
    url = f"http://{ip}:8000/v1"
    with paced(url, tiny, period=0.1) as client:

        def ended_after(at: float) -> list[Answer]:
            return [a for a in list(client.answers) if a.sent + a.seconds >= at]

        def sent_after(at: float) -> list[Answer]:
            return [a for a in list(client.answers) if a.sent >= at]

        eventually(lambda: any(a.status == 200 for a in client.answers), what="Envoy answering the paced client")
        killed = time.monotonic() - client.started
        node_of(e2e).kill_container(picker["containerID"])
        first_failure = eventually(
            lambda: next((a for a in ended_after(killed) if a.status != 200), None),
            within=30,
            what="a request failed while the picker is down",
        )
        back = eventually(
            lambda: next((a for a in sent_after(first_failure.sent) if a.status == 200), None),
            within=120,
            what="Envoy answering again once the picker restarted",
        )

        def restarted() -> bool:
            status = container_status(e2e.must_get("pods", name, GATEWAY_NAMESPACE), "gateway")
            return int(status["restartCount"]) > int(picker["restartCount"])

        eventually(restarted, what="the gateway container restarted")
    during = ended_after(killed)
    failures = [a for a in during if a.status != 200]
    print(
        f"\npicker killed at t={killed:.2f}s; first failure sent at t={first_failure.sent:.2f}s, "
        f"answered again from t={back.sent:.2f}s ({back.sent - first_failure.sent:.1f} s of failures)"
    )
    print(f"statuses from the kill on: {[a.status for a in during]}")
    for answer in failures[:3]:
        print(f"  t={answer.sent:.2f}s {answer.status}: {answer.body[:200]!r}")
    print(client.timeline())
    # FailClose: Envoy's 500 while the picker cannot be reached, the picker's 503 while its caches sync. The request
    # whose picker stream was cut as it ran may lose its connection instead (status 0 here): that one at most.
    assert {a.status for a in failures} <= {0, 500, 503}, [(a.status, a.body[:200]) for a in failures]
    assert len([a for a in failures if a.status == 0]) <= 1, [a.body[:200] for a in failures]
    slowest = max(during, key=lambda a: a.seconds)
    assert slowest.seconds < HANG_BOUND, f"a request took {slowest.seconds:.1f} s: {slowest.status}"
    assert [a.status for a in sent_after(back.sent)] == [200] * len(sent_after(back.sent)), client.timeline()
