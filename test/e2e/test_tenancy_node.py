"""Tenants' walls on the real node, shown by the engines' own token counters:
- a copy of a team's Playground made in another namespace gets none of the model's requests through llmaz-gateway,
  and is told why;
- with the gateway-only NetworkPolicy (enforced by the node's kube-router), another namespace's pods reach the
  model only through llmaz-gateway, while the model's own namespace reaches its engine directly."""

from __future__ import annotations

import json

import pytest

from llmaz.apis.constants import NETWORK_POLICY_ANNOTATION
from llmaz.apis.networkpolicy import GATEWAY_ONLY
from llmaz_dev.envtest.objectstore import ObjectStore

from .serving import (
    BUCKET,
    GATEWAY,
    GATEWAY_NAMESPACE,
    KEY,
    api_chat,
    counter,
    credentials,
    gateway_url,
    routable,
    serve_chat,
    served,
    tiny_llama,
)
from .support import (
    LWS_NAME_LABEL,
    Environment,
    ModelNames,
    conditions,
    eventually,
    fresh_namespace,
    http_request,
    run_python_pod,
    wait_playground_ready,
)

pytestmark = pytest.mark.tier("node")
PREDICTED = "llamacpp:tokens_predicted_total"
PROMPT_TOKENS = "llamacpp:prompt_tokens_total"
CHATS = 30
# Long enough for an engine on a busy node to answer; a blocked connection never does.
PROBE_TIMEOUT_SECONDS = 10

# A pod that allowed clients may reach gets through once the firewall knows its address, which it learns when
# kubelet reports it, after the pod's process has started: a probe expecting an answer tries until then.
ADMISSION_SECONDS = 60

# Each target gets a short chat: its HTTP status when an answer came back, else why no connection was made (tried
# again until RETRY_SECONDS have passed).
PROBE = """
import json, time, urllib.error, urllib.request
body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}).encode()
deadline = time.monotonic() + RETRY_SECONDS
for name, url in TARGETS.items():
    while True:
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        try:
            print(name, urllib.request.urlopen(request, timeout=TIMEOUT).status, flush=True)
        except urllib.error.HTTPError as error:
            print(name, error.code, flush=True)
        except (urllib.error.URLError, OSError) as error:
            if time.monotonic() < deadline:
                time.sleep(1)
                continue
            print(name, "no-connection", type(getattr(error, "reason", error)).__name__, flush=True)
        break
"""


def _probe(
    e2e: Environment, namespace: str, pod: str, model: str, targets: dict[str, str], retry_seconds: float = 0
) -> dict[str, str]:
    """What each target answered to a chat sent from a pod of `namespace`: a status, or `no-connection` (after
    trying for `retry_seconds`; 0: once)."""
    script = (
        f"MODEL = {model!r}\nTARGETS = {targets!r}\nTIMEOUT = {PROBE_TIMEOUT_SECONDS}\n"
        f"RETRY_SECONDS = {retry_seconds}\n{PROBE}"
    )
    log = run_python_pod(e2e, namespace, pod, script)
    return {name: rest.split()[0] for name, rest in (line.split(" ", 1) for line in log.strip().splitlines())}


def _engine_counter(engine_ip: str, name: str = PREDICTED) -> float:
    """One of the engine's token counters, read from the node (whose own traffic no policy stops)."""
    status, page = http_request(f"http://{engine_ip}:8080/metrics")
    assert status == 200, page[:300]
    return counter(page.decode(), name)


def _engine_ip(e2e: Environment, namespace: str, playground: str) -> str:
    (pod,) = e2e.pods_of(namespace, playground)
    ip: str = pod["status"]["podIP"]
    return ip


def test_a_copy_of_a_playground_in_another_namespace_gets_none_of_the_models_requests(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    model = serve_chat(e2e, namespace, models, object_store)
    routable(e2e, model)
    with fresh_namespace(e2e, "copycat") as other:
        # Another team copies the Playground: same name, same model, its own engine.
        e2e.apply([credentials()], other)
        e2e.apply([served("chat", model, object_store)], other)
        wait_playground_ready(e2e, other, "chat", replicas=1)

        def told() -> dict[str, tuple[str, str | None]] | None:
            found = conditions(e2e.get("playgrounds", "chat", other))
            return found if found.get("ModelRouted") == ("False", "ModelNameTaken") else None

        eventually(told, what="the copy's ModelRouted=False/ModelNameTaken")
        owner, copy = _engine_ip(e2e, namespace, "chat"), _engine_ip(e2e, other, "chat")
        before = {ip: (_engine_counter(ip, PROMPT_TOKENS), _engine_counter(ip)) for ip in (owner, copy)}
        # Each chat its own prompt: were the namespaces pooled, prefix-aware routing would spread them over both.
        for i in range(CHATS):
            status, body = api_chat(gateway_url(e2e), model, 30, content=f"Chat {i}: what comes after {i}?")
            assert status == 200, body[:300]
        after = {ip: (_engine_counter(ip, PROMPT_TOKENS), _engine_counter(ip)) for ip in (owner, copy)}
        print(f"\nprompt and predicted tokens over {CHATS} chats: owner {before[owner]} -> {after[owner]}, "
              f"copy {before[copy]} -> {after[copy]}")  # fmt: skip
        assert after[copy] == before[copy], "the copy's engine computed tokens of the owner's chats"
        assert after[owner][1] - before[owner][1] >= CHATS, (before[owner], after[owner])


def test_with_the_gateway_only_policy_no_request_reaches_an_engine_around_the_gateway(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    model = models.new("walled")
    walled = served("walled", model, object_store)
    walled["metadata"]["annotations"] = {NETWORK_POLICY_ANNOTATION: GATEWAY_ONLY}
    e2e.apply([credentials()], namespace)
    e2e.apply([tiny_llama(model, f"s3://{BUCKET}/{KEY}"), walled], namespace)
    wait_playground_ready(e2e, namespace, "walled", replicas=1)
    policy = eventually(lambda: e2e.get("networkpolicies", "walled", namespace), what="the walled model's policy")
    assert policy["spec"]["podSelector"] == {"matchLabels": {LWS_NAME_LABEL: "walled"}}, policy
    routable(e2e, model)

    engine_ip = _engine_ip(e2e, namespace, "walled")
    lb_ip = e2e.must_get("services", "walled-lb", namespace)["spec"]["clusterIP"]
    gateway_ip = e2e.must_get("services", GATEWAY, GATEWAY_NAMESPACE)["spec"]["clusterIP"]
    chat = "/v1/chat/completions"
    around = {"engine": f"http://{engine_ip}:8080{chat}", "lb-service": f"http://{lb_ip}:8080{chat}"}
    targets = {**around, "gateway": f"http://{gateway_ip}{chat}"}

    with fresh_namespace(e2e, "outsider") as outsider:
        before = _engine_counter(engine_ip)
        answers = _probe(e2e, outsider, "outsider", model, targets)
        assert answers == {"engine": "no-connection", "lb-service": "no-connection", "gateway": "200"}, answers
        after = _engine_counter(engine_ip)
        # The gateway's one answer is the only one the engine computed: at most max_tokens (4) tokens.
        assert 0 < after - before <= 4, (before, after)

    # The model's own namespace is inside the wall: both of its direct requests are answered and counted.
    answers = _probe(e2e, namespace, "insider", model, around, retry_seconds=ADMISSION_SECONDS)
    assert answers == {"engine": "200", "lb-service": "200"}, answers
    assert _engine_counter(engine_ip) - after >= 2, json.dumps(answers)
