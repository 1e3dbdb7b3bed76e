"""docs/examples/ hangs together: what a server-side dry run cannot see (test/integration/examples checks every
document against the real CRDs) is checked here, by reading the files.

- Every reference between objects resolves within its file: route -> Gateway -> GatewayClass, route rule ->
  AIServiceBackend -> Envoy Gateway Backend, policy -> Gateway, Service -> pods -> volume claim.
- per-model-routes.yaml routes each model to the `<playground>-lb` Service, port 8080, of a Playground in
  config/samples that serves exactly that model; via-llmaz-gateway.yaml and Open WebUI call the Service
  config/gateway installs (llmaz-gateway.llmaz-system, port 80).
- docs/examples/README.md describes every file, and docs/gateway.md links it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "docs" / "examples"
PER_MODEL = "envoy-ai-gateway/per-model-routes.yaml"
VIA_GATEWAY = "envoy-ai-gateway/via-llmaz-gateway.yaml"
OPEN_WEBUI = "open-webui/open-webui.yaml"
ENVOY_EXAMPLES = [PER_MODEL, VIA_GATEWAY]
# config/gateway's Service `gateway`, as config/default installs it (namespace llmaz-system, prefix llmaz-).
LLMAZ_GATEWAY_HOST, LLMAZ_GATEWAY_PORT = "llmaz-gateway.llmaz-system", 80
LB_PORT = 8080  # the port of every `<name>-lb` Service the llmaz Service controller makes
MODEL_HEADER = "x-ai-eg-model"

Objects = dict[tuple[str, str], dict[str, Any]]


def load(relative: str) -> Objects:
    """The documents of one example by (kind, name); names are unique per kind within a file."""
    docs = [d for d in yaml.safe_load_all((EXAMPLES / relative).read_text()) if d]
    objects = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    assert len(objects) == len(docs), f"{relative}: a kind/name appears twice"
    return objects


def of_kind(objects: Objects, kind: str) -> list[dict[str, Any]]:
    return [d for (k, _), d in objects.items() if k == kind]


def namespace(doc: dict[str, Any]) -> str:
    ns: str = doc["metadata"]["namespace"]
    return ns


def sample_playgrounds() -> dict[str, str]:
    """Model name -> Playground name, for every Playground in config/samples applied to the default namespace (no
    `metadata.namespace`; serve-across-namespaces-llamacpp.yaml names its own)."""
    served: dict[str, str] = {}
    for path in (REPO / "config" / "samples").glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "Playground" and "namespace" not in doc["metadata"]:
                claim = doc["spec"].get("modelClaim") or {"modelName": doc["spec"]["modelClaims"]["models"][0]["name"]}
                served[claim["modelName"]] = doc["metadata"]["name"]
    return served


def test_the_llmaz_gateway_address_is_the_service_config_gateway_installs() -> None:
    docs = [d for d in yaml.safe_load_all((REPO / "config" / "gateway" / "service.yaml").read_text()) if d]
    service = next(d for d in docs if d["metadata"]["name"] == "gateway")
    assert [p["port"] for p in service["spec"]["ports"]] == [LLMAZ_GATEWAY_PORT]
    default = yaml.safe_load((REPO / "config" / "default" / "kustomization.yaml").read_text())
    assert default["namespace"] == LLMAZ_GATEWAY_HOST.split(".")[1]
    assert f"http://{LLMAZ_GATEWAY_HOST}/v1" in (REPO / "docs" / "gateway.md").read_text()


@pytest.mark.parametrize("example", ENVOY_EXAMPLES)
def test_envoy_references_resolve_within_the_file(example: str) -> None:
    objects = load(example)
    (gateway,) = of_kind(objects, "Gateway")
    assert ("GatewayClass", gateway["spec"]["gatewayClassName"]) in objects
    gateway_ref = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway["metadata"]["name"]}
    for policy in of_kind(objects, "ClientTrafficPolicy"):
        assert policy["spec"]["targetRefs"] == [gateway_ref]
        assert namespace(policy) == namespace(gateway)
    (route,) = of_kind(objects, "AIGatewayRoute")
    assert route["spec"]["parentRefs"] == [gateway_ref]
    assert namespace(route) == namespace(gateway)

    used_backends = set()
    for rule in route["spec"]["rules"]:
        (ref,) = rule["backendRefs"]
        assert set(ref) == {"name"}  # an AIServiceBackend of the route's namespace
        service_backend = objects["AIServiceBackend", ref["name"]]
        assert namespace(service_backend) == namespace(route)
        assert service_backend["spec"]["schema"] == {"name": "OpenAI"}
        backend_ref = service_backend["spec"]["backendRef"]
        assert (backend_ref["group"], backend_ref["kind"]) == ("gateway.envoyproxy.io", "Backend")
        backend = objects["Backend", backend_ref["name"]]
        assert namespace(backend) == namespace(service_backend)
        used_backends.add(backend["metadata"]["name"])
    assert used_backends == {b["metadata"]["name"] for b in of_kind(objects, "Backend")}  # none left over


def _endpoint(backend: dict[str, Any]) -> tuple[str, int]:
    (endpoint,) = backend["spec"]["endpoints"]
    return endpoint["fqdn"]["hostname"], endpoint["fqdn"]["port"]


def _backend_of_rule(objects: Objects, rule: dict[str, Any]) -> dict[str, Any]:
    service_backend = objects["AIServiceBackend", rule["backendRefs"][0]["name"]]
    return objects["Backend", service_backend["spec"]["backendRef"]["name"]]


def test_per_model_rules_send_each_model_to_the_lb_service_of_a_sample_playground_serving_it() -> None:
    objects = load(PER_MODEL)
    (route,) = of_kind(objects, "AIGatewayRoute")
    playgrounds = sample_playgrounds()
    models = []
    for rule in route["spec"]["rules"]:
        ((header,),) = [m["headers"] for m in rule["matches"]]
        assert (header["type"], header["name"]) == ("Exact", MODEL_HEADER)
        model = header["value"]
        playground = playgrounds[model]
        assert _endpoint(_backend_of_rule(objects, rule)) == (f"{playground}-lb.default.svc.cluster.local", LB_PORT)
        models.append(model)
    assert "tiny-llama" in models
    assert len(models) == len(set(models))


def test_via_llmaz_gateway_has_one_rule_for_every_model_to_the_llmaz_gateway_service() -> None:
    objects = load(VIA_GATEWAY)
    (route,) = of_kind(objects, "AIGatewayRoute")
    (rule,) = route["spec"]["rules"]
    assert rule["matches"] == [{"headers": [{"type": "RegularExpression", "name": MODEL_HEADER, "value": ".+"}]}]
    host = f"{LLMAZ_GATEWAY_HOST}.svc.cluster.local"
    assert _endpoint(_backend_of_rule(objects, rule)) == (host, LLMAZ_GATEWAY_PORT)


def test_open_webui_calls_llmaz_gateway_and_its_service_and_volume_resolve() -> None:
    objects = load(OPEN_WEBUI)
    deployment = objects["Deployment", "open-webui"]
    service = objects["Service", "open-webui"]
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}

    assert env["OPENAI_API_BASE_URL"]["value"] == f"http://{LLMAZ_GATEWAY_HOST}/v1"
    assert env["ENABLE_OLLAMA_API"]["value"] == "False"
    assert env["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"]["optional"] is True  # only for --api-keys-file
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert {namespace(d) for d in objects.values()} == {"llmaz-system"}
    port_names = {p["name"] for p in container["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= port_names
    (volume,) = pod["spec"]["volumes"]
    assert ("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]) in objects
    assert container["image"].rpartition(":")[2] not in {"", "latest", "main"}  # a pinned release


def test_the_readme_describes_every_example_and_the_gateway_doc_links_it() -> None:
    readme = (EXAMPLES / "README.md").read_text()
    files = sorted(str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.yaml"))
    assert files == sorted([PER_MODEL, VIA_GATEWAY, OPEN_WEBUI])
    for relative in files:
        assert f"({relative})" in readme, relative  # a Markdown link
    assert "(examples/README.md)" in (REPO / "docs" / "gateway.md").read_text()
