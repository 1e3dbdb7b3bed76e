"""What each kind of model source adds to a pod: loader init containers, credential envs, host volumes.

| Source | With the loader (init container env) | Loader skipped (runner env) |
|---|---|---|
| modelHub | MODEL_SOURCE_TYPE=modelhub, hub coordinates, HF tokens | HF tokens |
| oss:// | MODEL_SOURCE_TYPE=objstore, PROVIDER=OSS, ENDPOINT, BUCKET, MODEL_PATH, OSS keys | OSS keys |
| s3://, gcs:// | MODEL_SOURCE_TYPE=objstore, PROVIDER=S3 or GCS, BUCKET, MODEL_PATH, AWS keys | AWS keys |
| ollama:// | no init container (the engine pulls the model) | nothing |
| host:// | no init container; hostPath volume mounted read-only at the same path | the same |

S3 and GCS loading (llmaz injected no source env, so the loader failed): both read credentials from secret
`aws-access-secret` (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY); for GCS these are HMAC keys of its S3-compatible
API. No ENDPOINT is set: the loader uses the provider's default, or whatever the runner's env (copied into the
loader) configures.

Secret references are always `optional: true`, so pods start even when a secret is missing.

The served model's adapters take the same paths, each with `ADAPTER_NAME` added to its loader's env (see
`llmaz.apis.modelpath`); an ollama:// adapter is an `InvalidModelSourceError` (admission refuses it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmaz.apis import ModelHub, ModelSource, OpenModel
from llmaz.apis import constants as c
from llmaz.apis.core_v1alpha1 import Adapter
from llmaz.apis.modelpath import OLLAMA_ADAPTER, object_store_location
from llmaz.apis.uri import parse_uri
from llmaz.controllers.builders.errors import InvalidModelSourceError
from llmaz.controllers.builders.merge import merge_envs

OBJECT_STORES = (c.OSS, c.S3, c.GCS)


def value_env(name: str, value: str) -> dict[str, Any]:
    # An empty value is left out, as a Go client's omitempty would.
    return {"name": name, "value": value} if value else {"name": name}


def secret_env(name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key, "optional": True}}}


@dataclass(frozen=True, slots=True)
class Weights:
    """What a loader fetches: a model's own source, or one of its adapters (`adapter` set)."""

    model: OpenModel
    adapter: Adapter | None = None

    @property
    def source(self) -> ModelSource:
        return self.adapter.source if self.adapter is not None else self.model.spec.source

    def invalid(self, detail: str) -> InvalidModelSourceError:
        if self.adapter is not None:
            detail = f"adapter {self.adapter.name}: {detail}"
        return InvalidModelSourceError(self.model.metadata.name or "", detail)


def adapters(model: OpenModel) -> list[Weights]:
    """The model's adapters, in spec order."""
    return [Weights(model, adapter) for adapter in model.spec.adapters or ()]


def source_protocol(weights: OpenModel | Weights) -> tuple[str, str]:
    """("HUB", "") for a model hub (which wins over a URI), else the parsed (PROTOCOL, address) of the URI."""
    weights = weights if isinstance(weights, Weights) else Weights(weights)
    source = weights.source
    if source.model_hub is not None:
        return "HUB", ""
    try:
        protocol, address = parse_uri(source.uri or "")
    except ValueError as error:
        raise weights.invalid(str(error)) from error
    if protocol not in c.URI_PROTOCOLS:
        raise weights.invalid(f"unsupported protocol {protocol}")
    if protocol == c.OLLAMA and weights.adapter is not None:
        raise weights.invalid(OLLAMA_ADAPTER)
    return protocol, address


def _hf_token_envs() -> list[dict[str, Any]]:
    return [secret_env(name, c.MODELHUB_SECRET_NAME, c.HF_TOKEN_KEY) for name in c.HF_TOKEN_ENV_NAMES]


def _key_envs(secret: str, keys: tuple[str, str]) -> list[dict[str, Any]]:
    return [secret_env(key, secret, key) for key in keys]


def credential_envs(weights: OpenModel | Weights) -> list[dict[str, Any]]:
    """The secret envs an engine (or the loader) needs to read this model's (or adapter's) source."""
    protocol, _ = source_protocol(weights)
    if protocol == "HUB":
        return _hf_token_envs()
    if protocol == c.OSS:
        return _key_envs(c.OSS_SECRET_NAME, (c.OSS_ACCESS_KEY_ID, c.OSS_ACCESS_KEY_SECRET))
    if protocol in (c.S3, c.GCS):
        return _key_envs(c.AWS_SECRET_NAME, (c.AWS_ACCESS_KEY_ID, c.AWS_SECRET_ACCESS_KEY))
    return []


def _hub_env(hub: ModelHub) -> list[dict[str, Any]]:
    env = [
        value_env(c.ENV_MODEL_SOURCE_TYPE, c.MODEL_SOURCE_MODELHUB),
        value_env(c.ENV_MODEL_ID, hub.model_id or ""),
        value_env(c.ENV_MODEL_HUB_NAME, hub.name or c.HUGGING_FACE),
    ]
    if hub.filename:
        env.append(value_env(c.ENV_MODEL_FILENAME, hub.filename))
    env.append(value_env(c.ENV_REVISION, hub.revision or c.DEFAULT_REVISION))
    if hub.allow_patterns is not None:
        env.append(value_env(c.ENV_MODEL_ALLOW_PATTERNS, ",".join(hub.allow_patterns)))
    if hub.ignore_patterns is not None:
        env.append(value_env(c.ENV_MODEL_IGNORE_PATTERNS, ",".join(hub.ignore_patterns)))
    return env


def _object_store_env(weights: Weights, protocol: str, address: str) -> list[dict[str, Any]]:
    try:
        bucket, endpoint, path = object_store_location(protocol, address)
    except ValueError as error:
        raise weights.invalid(str(error)) from error
    env = [value_env(c.ENV_MODEL_SOURCE_TYPE, c.MODEL_SOURCE_OBJSTORE), value_env(c.ENV_PROVIDER, protocol)]
    if protocol == c.OSS:
        env.append(value_env(c.ENV_ENDPOINT, endpoint))
    env += [value_env(c.ENV_BUCKET, bucket), value_env(c.ENV_MODEL_PATH, path)]
    return env


def loader_env(weights: OpenModel | Weights) -> list[dict[str, Any]] | None:
    """The loader's own env for this model or adapter (source coordinates, then credentials), or None when none is
    needed."""
    weights = weights if isinstance(weights, Weights) else Weights(weights)
    hub = weights.source.model_hub
    protocol, address = source_protocol(weights)
    if hub is not None:
        env = _hub_env(hub)
    elif protocol in OBJECT_STORES:
        env = _object_store_env(weights, protocol, address)
    else:
        return None
    if weights.adapter is not None:
        env.append(value_env(c.ENV_ADAPTER_NAME, weights.adapter.name))
    return env + credential_envs(weights)


def loader_container_name(index: int) -> str:
    return c.MODEL_LOADER_CONTAINER_NAME if index == 0 else f"{c.MODEL_LOADER_CONTAINER_NAME}-{index}"


def adapter_loader_container_name(index: int) -> str:
    """The loader of the served model's adapter `index` (its name may be too long for a container's)."""
    return f"{c.MODEL_LOADER_CONTAINER_NAME}-adapter-{index}"


def loader_container(
    weights: OpenModel | Weights,
    name: str,
    image: str,
    runner_env: list[dict[str, Any]] | None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The init container `name` loading a model or adapter, or None for sources without a loader (ollama, host);
    `extra` fields (its resources and security context, `security.loader_fields`) are added last.

    Its env starts from the runner's (proxies, HF_ENDPOINT, ...), merged by name with the loader's own variables,
    which win; llmaz concatenated the two and produced duplicate names that apply rejects.
    """
    own_env = loader_env(weights)
    if own_env is None:
        return None
    return {
        "name": name,
        "image": image,
        "env": merge_envs(runner_env, own_env),
        "volumeMounts": [{"name": c.MODEL_VOLUME_NAME, "mountPath": c.CONTAINER_MODEL_PATH}],
        **(extra or {}),
    }


def host_path(weights: OpenModel | Weights) -> str | None:
    """The node path of a `host://` model or adapter, else None."""
    protocol, address = source_protocol(weights)
    return address if protocol == c.HOST else None
