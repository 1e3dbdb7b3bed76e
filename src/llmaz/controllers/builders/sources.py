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
"""

from __future__ import annotations

from typing import Any

from llmaz.apis import ModelHub, OpenModel
from llmaz.apis import constants as c
from llmaz.apis.modelpath import object_store_location
from llmaz.apis.uri import parse_uri
from llmaz.controllers.builders.errors import InvalidModelSourceError
from llmaz.controllers.builders.merge import merge_envs

OBJECT_STORES = (c.OSS, c.S3, c.GCS)


def value_env(name: str, value: str) -> dict[str, Any]:
    # An empty value is left out, as a Go client's omitempty would.
    return {"name": name, "value": value} if value else {"name": name}


def secret_env(name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key, "optional": True}}}


def source_protocol(model: OpenModel) -> tuple[str, str]:
    """("HUB", "") for a model hub (which wins over a URI), else the parsed (PROTOCOL, address) of the URI."""
    source = model.spec.source
    if source.model_hub is not None:
        return "HUB", ""
    try:
        protocol, address = parse_uri(source.uri or "")
    except ValueError as error:
        raise InvalidModelSourceError(model.metadata.name or "", str(error)) from error
    if protocol not in c.URI_PROTOCOLS:
        raise InvalidModelSourceError(model.metadata.name or "", f"unsupported protocol {protocol}")
    return protocol, address


def _hf_token_envs() -> list[dict[str, Any]]:
    return [secret_env(name, c.MODELHUB_SECRET_NAME, c.HF_TOKEN_KEY) for name in c.HF_TOKEN_ENV_NAMES]


def _key_envs(secret: str, keys: tuple[str, str]) -> list[dict[str, Any]]:
    return [secret_env(key, secret, key) for key in keys]


def credential_envs(model: OpenModel) -> list[dict[str, Any]]:
    """The secret envs an engine (or the loader) needs to read this model's source."""
    protocol, _ = source_protocol(model)
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


def _object_store_env(model: OpenModel, protocol: str, address: str) -> list[dict[str, Any]]:
    try:
        bucket, endpoint, path = object_store_location(protocol, address)
    except ValueError as error:
        raise InvalidModelSourceError(model.metadata.name or "", str(error)) from error
    env = [value_env(c.ENV_MODEL_SOURCE_TYPE, c.MODEL_SOURCE_OBJSTORE), value_env(c.ENV_PROVIDER, protocol)]
    if protocol == c.OSS:
        env.append(value_env(c.ENV_ENDPOINT, endpoint))
    env += [value_env(c.ENV_BUCKET, bucket), value_env(c.ENV_MODEL_PATH, path)]
    return env


def loader_env(model: OpenModel) -> list[dict[str, Any]] | None:
    """The loader's own env for this model (source coordinates, then credentials), or None when none is needed."""
    hub = model.spec.source.model_hub
    if hub is not None:
        return _hub_env(hub) + credential_envs(model)
    protocol, address = source_protocol(model)
    if protocol in OBJECT_STORES:
        return _object_store_env(model, protocol, address) + credential_envs(model)
    return None


def loader_container_name(index: int) -> str:
    return c.MODEL_LOADER_CONTAINER_NAME if index == 0 else f"{c.MODEL_LOADER_CONTAINER_NAME}-{index}"


def loader_container(
    model: OpenModel, index: int, image: str, runner_env: list[dict[str, Any]] | None
) -> dict[str, Any] | None:
    """The init container loading model `index`, or None for sources without a loader (ollama, host).

    Its env starts from the runner's (proxies, HF_ENDPOINT, ...), merged by name with the loader's own variables,
    which win; llmaz concatenated the two and produced duplicate names that apply rejects.
    """
    own_env = loader_env(model)
    if own_env is None:
        return None
    return {
        "name": loader_container_name(index),
        "image": image,
        "env": merge_envs(runner_env, own_env),
        "volumeMounts": [{"name": c.MODEL_VOLUME_NAME, "mountPath": c.CONTAINER_MODEL_PATH}],
    }


def host_path(model: OpenModel) -> str | None:
    """The node directory of a `host://` model, else None."""
    protocol, address = source_protocol(model)
    return address if protocol == c.HOST else None
