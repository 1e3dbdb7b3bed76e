"""A gateway-only Playground on the real node, with kube-network-policies enforcing: a pod of another namespace
reaches neither the engine's pod IP nor its `-lb` Service, a pod of the model's own namespace reaches both, and a
chat through llmaz-gateway is answered; with the annotation removed, the other namespace reaches the engine again.

Reachability is judged from pods, never from the host: traffic the host's root processes start is not subject to
NetworkPolicies (docs/tenancy.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from llmaz.apis import constants as c
from llmaz_dev.envtest.objectstore import ObjectStore

from .serving import BUCKET, KEY, assert_completion, credentials, gateway_chat, lb_url, routable, served, tiny_llama
from .support import Environment, ModelNames, eventually, run_python_pod, wait_playground_ready

pytestmark = pytest.mark.tier("node")
OPEN, CLOSED = "open", "closed"
# Each target is tried with a 3 s connection bound until all answer as wanted, for at most 40 s (a policy takes the
# enforcer a moment to see); the last outcomes are printed.
_PROBE = """
import json, time, urllib.error, urllib.request
targets, want = {targets!r}, {want!r}
def outcome(url):
    try:
        with urllib.request.urlopen(url + "/health", timeout=3) as answer:
            return "open" if answer.status == 200 else "status %d" % answer.status
    except urllib.error.HTTPError as error:
        return "status %d" % error.code
    except OSError:
        return "closed"  # refused, reset or timed out
deadline = time.monotonic() + 40
while True:
    seen = {{url: outcome(url) for url in targets}}
    if all(value == want for value in seen.values()) or time.monotonic() > deadline:
        break
    time.sleep(1)
print(json.dumps(seen))
"""


def _probe(e2e: Environment, namespace: str, pod: str, targets: list[str], want: str) -> dict[str, str]:
    """What a pod of `namespace` sees of each target URL once they all answer as `want`, or after 40 s (within
    `run_python_pod`'s wait for the pod)."""
    log = run_python_pod(e2e, namespace, pod, _PROBE.format(targets=targets, want=want))
    seen: dict[str, str] = json.loads(log.strip().splitlines()[-1])
    return seen


@pytest.fixture
def other_namespace(e2e: Environment) -> Iterator[str]:
    name = e2e.cluster.create_namespace("outsider")
    eventually(lambda: e2e.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"), what="default ServiceAccount")
    yield name
    e2e.cluster.delete_namespace(name)


def test_a_gateway_only_playground_is_reached_by_the_gateway_and_its_namespace_and_by_others_once_the_opt_in_goes(
    e2e: Environment, namespace: str, other_namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    model = models.new("guarded")
    playground = served("guarded", model, object_store)
    playground["metadata"]["annotations"] = {c.NETWORK_POLICY_ANNOTATION: "gateway-only"}
    e2e.apply([credentials()], namespace)
    e2e.apply([tiny_llama(model, f"s3://{BUCKET}/{KEY}"), playground], namespace)
    wait_playground_ready(e2e, namespace, "guarded", replicas=1)
    policy = eventually(lambda: e2e.get("networkpolicies", "guarded", namespace), what="the gateway-only policy")
    owners = policy["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"], o.get("controller")) for o in owners] == [("Service", "guarded", True)]
    (pod,) = e2e.ready_pods_of(namespace, "guarded")
    targets = [f"http://{pod['status']['podIP']}:8080", lb_url(e2e, namespace, "guarded")]

    outside = _probe(e2e, other_namespace, "outsider", targets, CLOSED)
    assert outside == dict.fromkeys(targets, CLOSED), "another namespace reached the engine"
    inside = _probe(e2e, namespace, "insider", targets, OPEN)
    assert inside == dict.fromkeys(targets, OPEN), "the model's own namespace was cut off"
    routable(e2e, model)
    assert_completion(*gateway_chat(e2e, model), model)

    # The opt-in goes: the policy is deleted, and the other namespace reaches the engine again.
    e2e.kubectl("annotate", "playground", "guarded", "-n", namespace, f"{c.NETWORK_POLICY_ANNOTATION}-")
    eventually(lambda: e2e.get("networkpolicies", "guarded", namespace) is None, what="the policy to be deleted")
    again = _probe(e2e, other_namespace, "outsider-again", targets, OPEN)
    assert again == dict.fromkeys(targets, OPEN), "another namespace is still cut off without the opt-in"
