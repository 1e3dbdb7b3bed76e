"""Upstream Kubernetes schemas embedded in llmaz CRDs, vendored from pinned Go modules.

llmaz objects embed Kubernetes types (pod templates, env vars, probes, HPA metrics). Their CRD schemas must be the
full upstream structural schemas, with the list/map markers server-side apply relies on, so they are never written
by hand. `sync()` extracts them from the pinned modules into `upstream/*.json` (committed, with their source);
`resolve()` serves them to the generator:

- from the LeaderWorkerSet CRD (controller-gen output, pod-template metadata already pruned):
  LeaderWorkerTemplate, RolloutStrategy, Condition, and EnvVar/Lifecycle/Probe found inside the container schema;
- from the Kubernetes OpenAPI v3 document of autoscaling/v2: MetricSpec and HorizontalPodAutoscalerBehavior,
  converted to structural form here (refs inlined, quantities as int-or-string, OpenAPI-only keys dropped).

`python -m llmaz_dev.crdgen.upstream` re-extracts after a version bump; a test proves the vendored files equal
what the pinned modules hold.
"""

from __future__ import annotations

import copy
import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from llmaz.apis.constants import LWS_VERSION
from llmaz.apis.quantity import QUANTITY_PATTERN

LWS_MODULE = "sigs.k8s.io/lws"
LWS_CRD_PATH = "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"
KUBERNETES_MODULE = "k8s.io/kubernetes"
KUBERNETES_VERSION = "v1.35.4"
AUTOSCALING_OPENAPI_PATH = "api/openapi-spec/v3/apis__autoscaling__v2_openapi.json"

VENDOR_DIR = Path(__file__).parent / "upstream"
LWS_FILE = VENDOR_DIR / f"lws-{LWS_VERSION}.json"
AUTOSCALING_FILE = VENDOR_DIR / f"autoscaling-v2-kubernetes-{KUBERNETES_VERSION}.json"

_OPENAPI_PREFIX = "#/components/schemas/"
_AUTOSCALING_ROOTS = {
    "MetricSpec": "io.k8s.api.autoscaling.v2.MetricSpec",
    "HorizontalPodAutoscalerBehavior": "io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerBehavior",
}
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
# Keys that exist in OpenAPI documents but not in CRD schemas (JSONSchemaProps).
_OPENAPI_ONLY_KEYS = frozenset(
    {
        "x-kubernetes-patch-strategy",
        "x-kubernetes-patch-merge-key",
        "x-kubernetes-unions",
        "x-kubernetes-group-version-kind",
    }
)


def resolve(name: str) -> dict[str, Any]:
    """The structural schema of an upstream type, by the name used in `Crd(upstream=...)` markers."""
    schemas = _lws_schemas() | _autoscaling_schemas()
    if name not in schemas:
        raise KeyError(f"no vendored upstream schema named {name!r}; known: {sorted(schemas)}")
    return copy.deepcopy(schemas[name])


@functools.cache
def _lws_schemas() -> dict[str, dict[str, Any]]:
    vendored = json.loads(LWS_FILE.read_text())["schemas"]
    container = vendored["LeaderWorkerTemplate"]["properties"]["workerTemplate"]["properties"]["spec"]["properties"][
        "containers"
    ]["items"]["properties"]
    return {
        **vendored,
        "EnvVar": container["env"]["items"],
        "Lifecycle": container["lifecycle"],
        "Probe": container["livenessProbe"],
    }


@functools.cache
def _autoscaling_schemas() -> dict[str, dict[str, Any]]:
    components = json.loads(AUTOSCALING_FILE.read_text())["components"]
    return {name: to_structural(components, ref) for name, ref in _AUTOSCALING_ROOTS.items()}


def to_structural(components: dict[str, Any], name: str) -> dict[str, Any]:
    """Inline an OpenAPI v3 component into a CRD-compatible structural schema."""
    return _convert(components, components[name], seen=(name,))


def _convert(components: dict[str, Any], node: dict[str, Any], seen: tuple[str, ...]) -> dict[str, Any]:
    ref = _single_ref(node)
    if ref is not None:
        target = _convert_ref(components, ref, seen)
        if "description" in node:
            target["description"] = node["description"]
        return target
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _OPENAPI_ONLY_KEYS or key == "default":
            continue  # upstream defaults are applied by the owning API, not by our CRDs
        if key == "properties":
            out[key] = {prop: _convert(components, sub, seen) for prop, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _convert(components, value, seen)
        else:
            out[key] = copy.deepcopy(value)
    if "properties" in out and "type" not in out:
        out["type"] = "object"
    return out


def _single_ref(node: dict[str, Any]) -> str | None:
    if "$ref" in node:
        return str(node["$ref"]).removeprefix(_OPENAPI_PREFIX)
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
        return str(all_of[0]["$ref"]).removeprefix(_OPENAPI_PREFIX)
    return None


def _convert_ref(components: dict[str, Any], ref: str, seen: tuple[str, ...]) -> dict[str, Any]:
    if ref == _QUANTITY:
        return {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    if ref == _INT_OR_STRING:
        return {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
    if ref in seen:
        raise ValueError(f"recursive upstream type {ref} cannot be inlined")
    return _convert(components, components[ref], (*seen, ref))


# --- extraction from the pinned Go modules -------------------------------------------------------------------


def module_dir(module: str, version: str) -> Path:
    """Download (or find in the module cache) a pinned Go module and return its directory."""
    result = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"], check=True, capture_output=True, text=True
    )
    return Path(json.loads(result.stdout)["Dir"])


def extract_lws(lws_dir: Path) -> dict[str, Any]:
    crd = yaml.safe_load((lws_dir / LWS_CRD_PATH).read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]["properties"]
    return {
        "source": {"module": LWS_MODULE, "version": LWS_VERSION, "path": LWS_CRD_PATH},
        "schemas": {
            "LeaderWorkerTemplate": spec["leaderWorkerTemplate"],
            "RolloutStrategy": spec["rolloutStrategy"],
            "Condition": schema["properties"]["status"]["properties"]["conditions"]["items"],
        },
    }


def extract_autoscaling(kubernetes_dir: Path) -> dict[str, Any]:
    document = json.loads((kubernetes_dir / AUTOSCALING_OPENAPI_PATH).read_text())
    components = document["components"]["schemas"]
    needed: set[str] = set()
    for root in _AUTOSCALING_ROOTS.values():
        _collect_refs(components, root, needed)
    return {
        "source": {
            "module": KUBERNETES_MODULE,
            "version": KUBERNETES_VERSION,
            "path": AUTOSCALING_OPENAPI_PATH,
        },
        "components": {name: components[name] for name in sorted(needed)},
    }


def _collect_refs(components: dict[str, Any], name: str, needed: set[str]) -> None:
    if name in needed:
        return
    needed.add(name)
    for ref in _refs_in(components[name]):
        _collect_refs(components, ref, needed)


def _refs_in(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [str(node["$ref"]).removeprefix(_OPENAPI_PREFIX)] if "$ref" in node else []
        return found + [ref for value in node.values() for ref in _refs_in(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs_in(value)]
    return []


def render_vendored(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def sync() -> None:
    VENDOR_DIR.mkdir(exist_ok=True)
    LWS_FILE.write_text(render_vendored(extract_lws(module_dir(LWS_MODULE, LWS_VERSION))))
    AUTOSCALING_FILE.write_text(render_vendored(extract_autoscaling(module_dir(KUBERNETES_MODULE, KUBERNETES_VERSION))))


if __name__ == "__main__":
    sync()
    print(f"wrote {LWS_FILE} and {AUTOSCALING_FILE}", file=sys.stderr)
