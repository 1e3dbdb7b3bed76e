"""llmaz-gateway on the real node: the clients users already have, against one base URL, routed to the tiny llama.

The gateway is installed by config/node (one replica); the model is served by a Playground as in the serving
tests. Every call goes host -> gateway Service (kube-proxy) -> gateway pod -> engine pod, except the activator's:
host -> the Playground's own `-lb` Service (kube-proxy, through the activator's EndpointSlice while the model
sleeps) -> gateway pod's activator port -> engine pod.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest

from llmaz_dev.envtest.objectstore import ObjectStore

from .serving import (
    BUCKET,
    GATEWAY,
    GATEWAY_NAMESPACE,
    KEY,
    api_chat,
    credentials,
    gateway_chat,
    gateway_events,
    gateway_patched,
    gateway_url,
    lb_url,
    routable,
    serve_chat,
    served,
    tiny_llama,
)
from .support import (
    Environment,
    ModelNames,
    chat_request,
    eventually,
    http_request,
    pod_ready,
    wait_playground_ready,
)

pytestmark = pytest.mark.tier("node")
KEYS_SECRET = "llmaz-gateway-api-keys"
KEYS_DIR = "/etc/llmaz-gateway/api-keys"


def client(e2e: Environment, api_key: str = "unused") -> openai.OpenAI:
    # No retries: a failure shows as it happened. No proxy from the environment sees this traffic.
    return openai.OpenAI(
        base_url=gateway_url(e2e), api_key=api_key, max_retries=0, timeout=30.0, http_client=_direct_http_client()
    )


def _direct_http_client() -> openai.DefaultHttpxClient:
    return openai.DefaultHttpxClient(trust_env=False)


@pytest.fixture
def served_model(e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore) -> str:
    model = serve_chat(e2e, namespace, models, object_store)
    routable(e2e, model)
    return model


def test_the_openai_sdk_lists_chats_streams_and_completes_through_the_gateway(
    e2e: Environment, served_model: str
) -> None:
    sdk = client(e2e)
    listed = {m.id: m for m in sdk.models.list()}
    assert served_model in listed, list(listed)
    assert listed[served_model].owned_by == "llmaz"
    assert listed[served_model].created > 0

    reply = sdk.chat.completions.create(
        model=served_model, messages=[{"role": "user", "content": "Hello"}], max_tokens=8
    )
    assert reply.model == served_model
    assert reply.choices[0].message.role == "assistant"
    assert reply.usage is not None
    assert 0 < reply.usage.completion_tokens <= 8

    chunks = list(
        sdk.chat.completions.create(
            model=served_model,
            messages=[{"role": "user", "content": "Hello"}],
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert len(chunks) >= 3, chunks  # role, at least one token, usage
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    assert "".join((c.choices[0].delta.content or "") for c in chunks if c.choices), chunks
    last = chunks[-1].usage
    assert last is not None, chunks[-1]
    assert last.completion_tokens > 0, chunks[-1]

    completion = sdk.completions.create(model=served_model, prompt="Once upon a time", max_tokens=8)
    assert completion.choices[0].text, completion
    assert completion.usage is not None
    assert 0 < completion.usage.completion_tokens <= 8

    with pytest.raises(openai.NotFoundError) as raised:
        sdk.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "Hello"}])
    error = raised.value.body
    assert isinstance(error, dict), error
    assert error.get("code") == "model_not_found", error
    assert served_model in str(error.get("message")), error


def test_a_speculative_playground_listing_its_draft_first_is_listed_and_routed_under_its_main_model(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    main, draft = models.new("main"), models.new("draft")
    uri = f"s3://{BUCKET}/{KEY}"
    speculative = served("spec", main, object_store)
    del speculative["spec"]["modelClaim"]
    speculative["spec"]["modelClaims"] = {"models": [{"name": draft, "role": "draft"}, {"name": main, "role": "main"}]}
    # The engine serves the main model alone (the default config): what is checked is where the gateway routes.
    speculative["spec"]["backendRuntimeConfig"]["configName"] = "default"
    e2e.apply([credentials()], namespace)
    e2e.apply([tiny_llama(main, uri), tiny_llama(draft, uri), speculative], namespace)
    wait_playground_ready(e2e, namespace, "spec", replicas=1)
    lb = e2e.must_get("services", "spec-lb", namespace)
    assert lb["metadata"]["annotations"]["activator.llmaz.io/model-name"] == main  # the controllers' pick

    routable(e2e, main)
    listed = [m.id for m in client(e2e).models.list()]
    assert main in listed, listed
    assert draft not in listed, listed
    status, body = gateway_chat(e2e, draft)
    assert status == 404, body[:300]
    assert json.loads(body)["error"]["code"] == "model_not_found"


def test_curl_sees_server_sent_events_framed_and_unbuffered(e2e: Environment, served_model: str) -> None:
    body = json.loads(chat_request(served_model, stream=True))
    result = subprocess.run(
        [
            "curl",
            "-sS",
            "-N",
            "--noproxy",
            "*",
            "--max-time",
            "30",
            "-D",
            "-",
            "-H",
            "Content-Type: application/json",
            "-d",
            json.dumps(body),
            f"{gateway_url(e2e)}/chat/completions",
        ],
        capture_output=True,
        check=True,
        timeout=60,
    )
    # Bytes, not text: the framing is the test, and text mode would turn the headers' CRLFs into LFs.
    head, _, stream = result.stdout.decode().partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 200"), head
    assert "content-type: text/event-stream" in head.lower(), head
    assert "content-length" not in head.lower(), head  # passed through as it comes, never buffered to a length
    events = stream.split("\n\n")
    assert len(events) >= 4, stream  # role, a token, usage, [DONE]
    assert events[-1] == "", events[-2:]  # every event ends with a blank line
    assert events[-2] == "data: [DONE]", events[-3:]
    for event in events[:-2]:
        assert event.startswith("data: "), event
        assert json.loads(event[len("data: ") :])["object"] == "chat.completion.chunk", event


@pytest.fixture
def api_keys(e2e: Environment) -> Iterator[str]:
    """The gateway with `--api-keys-file` from a Secret, as docs/gateway.md shows; rolled back afterwards."""
    key = "sk-e2e-team-a"
    e2e.kubectl("create", "secret", "generic", KEYS_SECRET, "-n", GATEWAY_NAMESPACE, f"--from-literal=keys={key}\n")
    patch: list[dict[str, Any]] = [
        {"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": f"--api-keys-file={KEYS_DIR}/keys"},
        {
            "op": "add",
            "path": "/spec/template/spec/volumes/-",
            "value": {"name": "api-keys", "secret": {"secretName": KEYS_SECRET}},
        },
        {
            "op": "add",
            "path": "/spec/template/spec/containers/0/volumeMounts/-",
            "value": {"name": "api-keys", "mountPath": KEYS_DIR, "readOnly": True},
        },
    ]
    try:
        with gateway_patched(e2e, patch):
            yield key
    finally:
        e2e.kubectl("delete", "secret", KEYS_SECRET, "-n", GATEWAY_NAMESPACE)


def test_with_api_keys_the_sdk_needs_one_of_them(e2e: Environment, served_model: str, api_keys: str) -> None:
    def refused_without_a_key() -> bool:
        try:
            client(e2e, "sk-wrong").models.list()
        except openai.AuthenticationError:
            return True
        except openai.APIConnectionError:
            return False  # the new pod's endpoint is still on its way
        return False  # an old pod without keys answered

    eventually(refused_without_a_key, what="the gateway asking for an API key")
    sdk = client(e2e, api_keys)
    assert served_model in [m.id for m in sdk.models.list()]
    reply = sdk.chat.completions.create(model=served_model, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert reply.choices[0].message.role == "assistant"


def test_a_sleeping_model_wakes_once_for_ten_concurrent_first_requests_and_sleeps_again_when_idle(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    model = models.new("sleepy")
    e2e.apply([credentials()], namespace)
    sleeping = served("sleepy", model, object_store, replicas=0)
    sleeping["metadata"]["annotations"] = {"llmaz.io/scale-to-zero-after": "20s"}
    e2e.apply([tiny_llama(model, f"s3://{BUCKET}/{KEY}"), sleeping], namespace)
    listed = eventually(
        lambda: model in http_request(f"{gateway_url(e2e)}/models")[1].decode(), what=f"the gateway listing {model}"
    )
    assert listed
    assert e2e.ready_pods_of(namespace, "sleepy") == []

    asked = time.monotonic()
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda _: held_chat(gateway_url(e2e), model), range(10)))
    print(f"\n10 requests at zero replicas, all answered {time.monotonic() - asked:.2f} s after they were sent")
    assert [status for status, _ in answers] == [200] * 10, [body[:300] for _, body in answers]
    assert e2e.must_get("playgrounds", "sleepy", namespace)["spec"]["replicas"] == 1
    woken = gateway_events(e2e, namespace, "sleepy", "ScaledFromZero")
    assert len(woken) == 1, woken
    assert woken[0]["message"] == f"Scaled from 0 to 1 replica for a request for model {model}"

    def asleep() -> bool:
        replicas = e2e.must_get("playgrounds", "sleepy", namespace)["spec"]["replicas"]
        return replicas == 0 and not e2e.ready_pods_of(namespace, "sleepy")

    eventually(asleep, within=120, what="the idle model scaled back to zero")
    (slept,) = gateway_events(e2e, namespace, "sleepy", "ScaledToZero")
    assert slept["message"] == "Scaled from 1 to 0 replicas: no request for 20s", slept


def asleep_playground(e2e: Environment, namespace: str, name: str, model: str, store: ObjectStore) -> None:
    """A Playground of the tiny model that starts at 0 replicas and sleeps after 20 s without a request."""
    e2e.apply([credentials()], namespace)
    sleeping = served(name, model, store, replicas=0)
    sleeping["metadata"]["annotations"] = {"llmaz.io/scale-to-zero-after": "20s"}
    e2e.apply([tiny_llama(model, f"s3://{BUCKET}/{KEY}"), sleeping], namespace)


def lb_api_url(e2e: Environment, namespace: str, playground: str) -> str:
    """The OpenAI API of the Playground's own Service, by ClusterIP: what a client that bypasses the gateway calls."""
    return f"{lb_url(e2e, namespace, playground)}/v1"


def gateway_pod_ips(e2e: Environment) -> list[str]:
    """The IPs of the gateway's ready pods that are not being deleted, from the pods themselves."""
    pods = e2e.items("pods", GATEWAY_NAMESPACE, "app.kubernetes.io/component=gateway")
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp") and pod_ready(p)]
    return sorted(p["status"]["podIP"] for p in live if p["status"].get("podIP"))


def activator_addresses(e2e: Environment, namespace: str, playground: str) -> list[str] | None:
    """The addresses of the activator's slice of `<playground>-lb`, or None when there is none."""
    found = e2e.get("endpointslices", f"{playground}-lb-activator", namespace)
    if found is None:
        return None
    assert found["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == "llmaz-gateway.llmaz.io", found
    return sorted(e["addresses"][0] for e in found.get("endpoints") or [])


def names_the_gateway_pods(e2e: Environment, namespace: str, playground: str) -> bool:
    pods = gateway_pod_ips(e2e)
    return bool(pods) and activator_addresses(e2e, namespace, playground) == pods


def held_chat(url: str, model: str) -> tuple[int, bytes]:
    """A chat request to the OpenAI API at `url`, given time to be held while its model wakes."""
    return api_chat(url, model, timeout=240)


def asleep_behind_the_activator(
    e2e: Environment, namespace: str, name: str, models: ModelNames, store: ObjectStore
) -> tuple[str, str]:
    """A sleeping Playground `name` whose `-lb` Service the activator's slice already serves: (model, its URL)."""
    model = models.new(name)
    asleep_playground(e2e, namespace, name, model, store)
    eventually(lambda: names_the_gateway_pods(e2e, namespace, name), what=f"the activator slice of {name}-lb")
    url = lb_api_url(e2e, namespace, name)
    # kube-proxy programs the slice a moment after the API has it; until then a Service without endpoints refuses
    # connections. A connection alone sends no request, so it wakes nothing.
    eventually(lambda: accepts_connections(url), what=f"kube-proxy sending {name}-lb to the activator")
    return model, url


def accepts_connections(url: str) -> bool:
    address = urllib.parse.urlsplit(url)
    try:
        with socket.create_connection((address.hostname, address.port), timeout=2):
            return True
    except OSError:
        return False


def test_direct_clients_of_a_sleeping_lb_service_are_held_while_it_wakes_once_and_the_activator_slice_follows(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    model, url = asleep_behind_the_activator(e2e, namespace, "direct", models, object_store)
    assert e2e.ready_pods_of(namespace, "direct") == []

    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda _: held_chat(url, model), range(10)))
    assert [status for status, _ in answers] == [200] * 10, [body[:300] for _, body in answers]
    assert e2e.must_get("playgrounds", "direct", namespace)["spec"]["replicas"] == 1
    woken = gateway_events(e2e, namespace, "direct", "ScaledFromZero")
    assert len(woken) == 1, woken
    assert woken[0]["message"] == f"Scaled from 0 to 1 replica for a request for model {model}"
    eventually(lambda: activator_addresses(e2e, namespace, "direct") is None, what="the activator slice removed")
    assert gateway_events(e2e, namespace, "direct", "ActivatorEnabled"), "no ActivatorEnabled Event"
    removed = gateway_events(e2e, namespace, "direct", "ActivatorRemoved")
    assert removed, "no ActivatorRemoved Event"
    assert removed[0]["message"] == "Deleted EndpointSlice direct-lb-activator: the Playground has a ready endpoint"

    def asleep() -> bool:
        replicas = e2e.must_get("playgrounds", "direct", namespace)["spec"]["replicas"]
        return replicas == 0 and not e2e.ready_pods_of(namespace, "direct")

    eventually(asleep, within=120, what="the idle model scaled back to zero")
    eventually(lambda: names_the_gateway_pods(e2e, namespace, "direct"), what="the activator slice back")


def test_after_a_gateway_rollout_the_activator_slice_names_the_new_pods_and_a_direct_call_wakes_the_model(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    model, url = asleep_behind_the_activator(e2e, namespace, "rolled", models, object_store)
    before = set(gateway_pod_ips(e2e))

    e2e.kubectl("rollout", "restart", f"deployment/{GATEWAY}", "-n", GATEWAY_NAMESPACE)
    e2e.kubectl("rollout", "status", f"deployment/{GATEWAY}", "-n", GATEWAY_NAMESPACE, "--timeout=180s")

    def names_only_new_pods() -> bool:
        pods = gateway_pod_ips(e2e)
        return bool(pods) and not before & set(pods) and activator_addresses(e2e, namespace, "rolled") == pods

    eventually(names_only_new_pods, what="the activator slice naming the new gateway pods only")

    def answered() -> tuple[int, bytes] | None:
        # Right after a rollout kube-proxy may still send a new connection to an old gateway pod that is shutting
        # down, as for any Service: that connection is closed before any answer, and a client tries again.
        try:
            return held_chat(url, model)
        except (http.client.RemoteDisconnected, ConnectionResetError):
            return None

    status, body = eventually(answered, within=60, what="a direct request answered after the gateway rollout")
    assert status == 200, body[:300]
    woken = gateway_events(e2e, namespace, "rolled", "ScaledFromZero")
    assert len(woken) == 1, woken
