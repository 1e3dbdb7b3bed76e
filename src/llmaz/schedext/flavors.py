"""Which nodes a model pod may use, and which it should prefer, by the inference flavors of its model.

The parity of llmaz's ResourceFungibility scheduler plugin, as pure functions over the objects kube-scheduler sends:

- A model pod (label `llmaz.io/model-name`) has the flavors its Service claimed (annotation
  `llmaz.io/inference-service-flavors`, comma-separated, only those the model defines), else all of its model's,
  in priority order. A pod that is not a model pod, whose model is unknown, or whose model has no flavors, is not
  constrained: every node passes with score 0.
- Filter: a node passes when its labels match the `nodeSelector` of any of the pod's flavors (a flavor without one
  matches every node).
- Prioritize: a node scores by the first flavor it matches, with llmaz's weights by flavor position (the
  Fibonacci numbers 34, 21, 13, 8, 5, 3, 2, 1, then 0), scaled to the extender range 0-10 and rounded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from llmaz.apis import constants as c
from llmaz.apis.flavors import claimed_in_annotation, flavor_order

Obj = dict[str, Any]
FLAVOR_WEIGHTS = (34, 21, 13, 8, 5, 3, 2, 1)
MAX_SCORE = 10  # kube-scheduler's MaxExtenderPriority
ModelLookup = Callable[[str], Obj | None]


def pod_flavors(pod: Mapping[str, Any], model_of: ModelLookup) -> tuple[str, list[Obj]]:
    """The pod's model name ("" for a pod that is not a model pod) and its flavors, best first."""
    metadata = pod.get("metadata") or {}
    model_name = str((metadata.get("labels") or {}).get(c.MODEL_NAME_LABEL) or "")
    if not model_name:
        return "", []
    model = model_of(model_name)
    if model is None:
        return model_name, []
    defined = [f for f in ((model.get("spec") or {}).get("inferenceConfig") or {}).get("flavors") or [] if f]
    by_name: dict[str, Obj] = {}
    for flavor in defined:
        by_name.setdefault(str(flavor.get("name")), flavor)
    order = flavor_order(list(by_name), claimed_in_annotation(metadata.get("annotations")))
    return model_name, [by_name[name] for name in order]


def _node_name(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name") or "")


def first_match(node: Mapping[str, Any], flavors: list[Obj]) -> int | None:
    """The position of the first flavor whose nodeSelector the node's labels match, or None."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    for index, flavor in enumerate(flavors):
        selector = flavor.get("nodeSelector") or {}
        if all(labels.get(key) == value for key, value in selector.items()):
            return index
    return None


def filter_nodes(
    pod: Mapping[str, Any], nodes: Iterable[Obj], model_of: ModelLookup
) -> tuple[list[Obj], dict[str, str]]:
    """The nodes that pass, and for each that does not, why."""
    model, flavors = pod_flavors(pod, model_of)
    if not flavors:
        return list(nodes), {}
    kept: list[Obj] = []
    failed: dict[str, str] = {}
    names = ", ".join(str(f.get("name")) for f in flavors)
    for node in nodes:
        if first_match(node, flavors) is None:
            failed[_node_name(node)] = f"node matches no inference flavor of model {model} ({names})"
        else:
            kept.append(node)
    return kept, failed


def flavor_score(position: int | None) -> int:
    if position is None or position >= len(FLAVOR_WEIGHTS):
        return 0
    return round(FLAVOR_WEIGHTS[position] * MAX_SCORE / FLAVOR_WEIGHTS[0])


def prioritize(pod: Mapping[str, Any], nodes: Iterable[Obj], model_of: ModelLookup) -> list[tuple[str, int]]:
    """(node name, score) for each node: earlier flavors score higher."""
    _, flavors = pod_flavors(pod, model_of)
    return [(_node_name(node), flavor_score(first_match(node, flavors)) if flavors else 0) for node in nodes]
