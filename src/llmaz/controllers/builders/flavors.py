"""Inference flavors in the pod templates: which flavors a Service may use, in which order, and how its pods are
pinned to the active one.

A model lists flavors in priority order (`spec.inferenceConfig.flavors`); a Service may claim some of them by name
(`spec.modelClaims.inferenceFlavors`). The Service controller renders its pods for ONE active flavor at a time:
that flavor's `limits` as requests and limits of `model-runner` (`inject`), and its `nodeSelector` as REQUIRED node
affinity on the leader and worker templates alike (`with_node_selector`), so a multi-host group never spans two
flavors. Which flavor is active, and when it changes, is decided in `llmaz.controllers.flavors.decision`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmaz.apis import Flavor, OpenModel
from llmaz.apis import flavors as apis_flavors
from llmaz.controllers.builders.merge import json_copy


def model_flavors(model: OpenModel) -> list[Flavor]:
    config = model.spec.inference_config
    return list((config.flavors if config is not None else None) or [])


def missing_flavors(model: OpenModel, claimed: Sequence[str] | None) -> list[str]:
    """The claimed flavor names `model` does not define, in claim order."""
    defined = {flavor.name for flavor in model_flavors(model)}
    return [name for name in claimed or () if name not in defined]


def flavor_order(model: OpenModel, claimed: Sequence[str] | None) -> list[str]:
    """The flavor names to try, best first: the claimed ones the model defines, else all of the model's."""
    return apis_flavors.flavor_order([flavor.name for flavor in model_flavors(model)], claimed)


def find_flavor(model: OpenModel, name: str | None) -> Flavor | None:
    return next((flavor for flavor in model_flavors(model) if flavor.name == name), None)


def with_node_selector(template: dict[str, Any], node_selector: Mapping[str, str] | None) -> None:
    """AND `node_selector` into the template's required node affinity (mutates `template`).

    Every `nodeSelectorTerms` entry (the terms are ORed) gets one `In` expression per key, sorted by key, unless
    it already has that exact expression; without terms there is one term of these expressions. The user's own
    `nodeSelector`, preferred affinity and pod (anti-)affinity are left as they are.
    """
    if not node_selector:
        return
    expressions = [{"key": key, "operator": "In", "values": [node_selector[key]]} for key in sorted(node_selector)]
    if template.get("spec") is None:
        template["spec"] = {}
    spec = template["spec"]
    affinity = spec.get("affinity") or {}
    node_affinity = affinity.get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        existing = term.get("matchExpressions") or []
        term["matchExpressions"] = existing + [json_copy(e) for e in expressions if e not in existing]
    required["nodeSelectorTerms"] = terms
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    affinity["nodeAffinity"] = node_affinity
    spec["affinity"] = affinity
