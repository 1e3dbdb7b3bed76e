"""Model, label and flavor injection into one LeaderWorkerSet pod template (a dict the caller owns).

Invariants:
- Everything already in the template keeps its position; injected init containers, volumes, mounts and envs are
  appended (init containers in model order, main first), and never under a name (mountPath for mounts) that is
  already taken, so the result is always a valid list-map for server-side apply.
- Only containers named `model-runner` receive mounts, credential envs and flavor resources; the flavor's
  nodeSelector becomes required node affinity of the whole pod.
- Volumes: the loaders share one `model-volume` emptyDir, added only when some model is loaded into it; a `host://`
  model gets its hostPath volume only (llmaz added both under one name, which apply rejects). Host volumes
  are named `model-volume` when they are the only model volume, else `model-volume-<model index>`.
- The adapters of the main model (the one the engine serves) are weights like the models': their loaders,
  `model-loader-adapter-<adapter index>`, follow the models' into the same `model-volume`; a `host://` adapter gets
  the hostPath volume `adapter-volume-<adapter index>`. Adapters of a draft model are not served, so not loaded.
  Adapters left out (`left_out`: they failed for good and no container names their path) get nothing; the others
  keep their indexes.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from llmaz.apis import Flavor, OpenModel
from llmaz.apis import constants as c
from llmaz.apis.modelpath import mentions_path
from llmaz.controllers.builders.flavors import with_node_selector
from llmaz.controllers.builders.merge import append_absent, merge_kvs, quantity_text
from llmaz.controllers.builders.security import PodOptions, loader_fields
from llmaz.controllers.builders.sources import (
    Weights,
    adapter_loader_container_name,
    adapters,
    credential_envs,
    host_path,
    loader_container,
    loader_container_name,
)

ADAPTER_VOLUME_PREFIX = "adapter-volume-"


def _field(owner: dict[str, Any], key: str, kind: type[Any]) -> Any:
    """`owner[key]`, created empty when absent or null."""
    if owner.get(key) is None:
        owner[key] = kind()
    return owner[key]


def runners(template: dict[str, Any]) -> list[dict[str, Any]]:
    containers: list[dict[str, Any]] = _field(template, "spec", dict).get("containers") or []
    return [container for container in containers if container.get("name") == c.MODEL_RUNNER_CONTAINER_NAME]


def _append_to_runners(template: dict[str, Any], field: str, additions: list[dict[str, Any]], key: str) -> None:
    for runner in runners(template):
        append_absent(_field(runner, field, list), additions, key)


def _append_volume(template: dict[str, Any], volume: dict[str, Any]) -> None:
    append_absent(_field(_field(template, "spec", dict), "volumes", list), [volume])


def served_adapters(models: Sequence[OpenModel], left_out: Collection[str] = frozenset()) -> list[tuple[int, Weights]]:
    """The adapters the engine serves, with their indexes: the main model's in spec order, but those `left_out`."""
    listed = enumerate(adapters(models[0])) if models else iter(())
    return [(index, weights) for index, weights in listed if weights.adapter and weights.adapter.name not in left_out]


def needs_model_volume(models: Sequence[OpenModel], skip: bool, left_out: Collection[str] = frozenset()) -> bool:
    """The shared emptyDir is needed unless the loader is skipped or every model and adapter lives on the host."""
    weights = [*map(Weights, models), *(adapter for _, adapter in served_adapters(models, left_out))]
    return not skip and any(host_path(item) is None for item in weights)


def inject_loaders(
    template: dict[str, Any],
    models: Sequence[OpenModel],
    image: str,
    left_out: Collection[str] = frozenset(),
    options: PodOptions | None = None,
) -> None:
    """One loader init container per model, then per served adapter, that needs one, with the `model-runner` env
    as its base (llmaz copied `containers[0]`'s env, duplicating the names the loader sets), and the resources and
    security context of `options` (`security.loader_fields`)."""
    extra = loader_fields(options or PodOptions())
    runner_list = runners(template)
    runner_env = runner_list[0].get("env") if runner_list else None
    named: list[tuple[OpenModel | Weights, str]] = [
        (model, loader_container_name(index)) for index, model in enumerate(models)
    ]
    named += [(adapter, adapter_loader_container_name(index)) for index, adapter in served_adapters(models, left_out)]
    loaders = []
    for weights, name in named:
        loader = loader_container(weights, name, image, runner_env, extra)
        if loader is not None:
            loaders.append(loader)
    if loaders:
        append_absent(_field(template["spec"], "initContainers", list), loaders)


def inject_credentials(
    template: dict[str, Any], models: Sequence[OpenModel], left_out: Collection[str] = frozenset()
) -> None:
    """With the loader skipped the engine reads the sources itself: add their credential envs unless already set."""
    for weights in [*map(Weights, models), *(adapter for _, adapter in served_adapters(models, left_out))]:
        envs = credential_envs(weights)
        if envs:
            _append_to_runners(template, "env", envs, "name")


def inject_host_volumes(
    template: dict[str, Any], models: Sequence[OpenModel], model_volume: bool, left_out: Collection[str] = frozenset()
) -> None:
    for index, model in enumerate(models):
        path = host_path(model)
        if path is None:
            continue
        alone = index == 0 and not model_volume
        name = c.MODEL_VOLUME_NAME if alone else f"{c.MODEL_VOLUME_NAME}-{index}"
        _mount_host_path(template, name, path)
    for index, adapter in served_adapters(models, left_out):
        path = host_path(adapter)
        if path is not None:
            _mount_host_path(template, f"{ADAPTER_VOLUME_PREFIX}{index}", path)


def _mount_host_path(template: dict[str, Any], name: str, path: str) -> None:
    _append_volume(template, {"name": name, "hostPath": {"path": path}})
    _append_to_runners(template, "volumeMounts", [{"name": name, "mountPath": path, "readOnly": True}], "mountPath")


def inject_model_volume(template: dict[str, Any], size_limit: str | None = None) -> None:
    mount = {"name": c.MODEL_VOLUME_NAME, "mountPath": c.CONTAINER_MODEL_PATH, "readOnly": True}
    _append_to_runners(template, "volumeMounts", [mount], "mountPath")
    empty_dir = {"sizeLimit": size_limit} if size_limit else {}
    _append_volume(template, {"name": c.MODEL_VOLUME_NAME, "emptyDir": empty_dir})


def inject_models(
    template: dict[str, Any],
    models: Sequence[OpenModel],
    skip: bool,
    image: str,
    left_out: Collection[str] = frozenset(),
    options: PodOptions | None = None,
) -> None:
    """Everything a template needs to find the models' weights and the adapters not `left_out`; the loaders and
    the model volume as `options` say (`security`)."""
    options = options or PodOptions()
    _field(template, "spec", dict)
    model_volume = needs_model_volume(models, skip, left_out)
    if skip:
        inject_credentials(template, models, left_out)
    else:
        inject_loaders(template, models, image, left_out, options)
    inject_host_volumes(template, models, model_volume, left_out)
    if model_volume:
        inject_model_volume(template, options.model_volume_size_limit)


def inject_labels(template: dict[str, Any], main: OpenModel, inference_flavors: Sequence[str] | None) -> None:
    """The main model's name and family as labels; the claimed flavors as an annotation when there are any."""
    metadata = _field(template, "metadata", dict)
    labels = {c.MODEL_NAME_LABEL: main.metadata.name or "", c.MODEL_FAMILY_NAME_LABEL: main.spec.family_name}
    metadata["labels"] = merge_kvs(metadata.get("labels"), labels)
    if inference_flavors:
        flavors = {c.INFERENCE_SERVICE_FLAVORS_ANNOTATION: ",".join(inference_flavors)}
        metadata["annotations"] = merge_kvs(metadata.get("annotations"), flavors)


def inject_flavor(template: dict[str, Any], flavor: Flavor | None) -> None:
    """The flavor's limits become both requests and limits of `model-runner`, overwriting those keys; its
    nodeSelector is ANDed into the template's required node affinity (`flavors.with_node_selector`)."""
    if flavor is None:
        return
    with_node_selector(template, flavor.node_selector)
    runner_list = runners(template)
    if not flavor.limits or not runner_list:
        return
    resources = _field(runner_list[-1], "resources", dict)
    for name, quantity in flavor.limits.items():
        _field(resources, "requests", dict)[name] = quantity_text(quantity)
        _field(resources, "limits", dict)[name] = quantity_text(quantity)


def names_path(template: dict[str, Any] | None, path: str) -> bool:
    """Whether a container of `template` has `path` (itself, not a longer path) in its command or arguments."""
    containers = ((template or {}).get("spec") or {}).get("containers") or []
    words = (str(word) for container in containers for key in ("command", "args") for word in container.get(key) or ())
    return any(mentions_path(word, path) for word in words)
