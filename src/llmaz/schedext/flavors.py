"""Which nodes a model pod may use, and which it should prefer, by the inference flavors of its model.

The parity of llmaz's ResourceFungibility scheduler plugin, as pure functions over the pod kube-scheduler sends, the
names of its candidate nodes, and their labels (from the manager's Node cache):

- A model pod (label `llmaz.io/model-name`) has the flavors its Service claimed (annotation
  `llmaz.io/inference-service-flavors`, comma-separated, only those the model defines), else all of its model's,
  in priority order. A pod that is not a model pod, whose model is unknown, or whose model has no flavors, is not
  constrained: every node passes with score 0.
- Filter: a node passes when its labels match the `nodeSelector` of any of the pod's flavors (a flavor without one
  matches every node). For a model pod, a node the cache does not hold (yet) fails, saying so, and kube-scheduler
  tries the pod again later; other pods pass it.
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
# A node's labels by name; None when the node is not in the cache (yet).
LabelsLookup = Callable[[str], Mapping[str, str] | None]
NOT_CACHED = "node is not in llmaz's node cache yet"


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


def first_match(labels: Mapping[str, str], flavors: list[Obj]) -> int | None:
    """The position of the first flavor whose nodeSelector the node's labels match, or None."""
    for index, flavor in enumerate(flavors):
        selector = flavor.get("nodeSelector") or {}
        if all(labels.get(key) == value for key, value in selector.items()):
            return index
    return None


def filter_nodes(
    pod: Mapping[str, Any], nodes: Iterable[str], labels_of: LabelsLookup, model_of: ModelLookup
) -> tuple[list[str], dict[str, str]]:
    """The names of the nodes that pass, and for each that does not, why."""
    model, flavors = pod_flavors(pod, model_of)
    if not flavors:
        return list(nodes), {}
    kept: list[str] = []
    failed: dict[str, str] = {}
    names = ", ".join(str(f.get("name")) for f in flavors)
    for node in nodes:
        labels = labels_of(node)
        if labels is None:
            failed[node] = NOT_CACHED
        elif first_match(labels, flavors) is None:
            failed[node] = f"node matches no inference flavor of model {model} ({names})"
        else:
            kept.append(node)
    return kept, failed


def flavor_score(position: int | None) -> int:
    if position is None or position >= len(FLAVOR_WEIGHTS):
        return 0
    return round(FLAVOR_WEIGHTS[position] * MAX_SCORE / FLAVOR_WEIGHTS[0])


def prioritize(
    pod: Mapping[str, Any], nodes: Iterable[str], labels_of: LabelsLookup, model_of: ModelLookup
) -> list[tuple[str, int]]:
    """(node name, score) for each node: earlier flavors score higher; a node not in the cache scores 0."""
    _, flavors = pod_flavors(pod, model_of)

    def score(node: str) -> int:
        labels = labels_of(node) if flavors else None
        return 0 if labels is None else flavor_score(first_match(labels, flavors))

    return [(node, score(node)) for node in nodes]
