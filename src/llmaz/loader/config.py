"""The loader's configuration, read once from its environment (the contract the controller renders).

Invariants:
- Every problem with the environment is a `ConfigurationError` naming the variable and where its value comes from
  (the OpenModel field or the secret), never a bare `KeyError` or a message printing `None`.
- Where the weights land is decided by `llmaz.apis.modelpath.loader_target`, the same function the controller uses
  to point the engine at them; `MODEL_DIR` only moves the root (`/workspace/models/`), never the layout below it.
- Secrets are kept out of `describe()`, which is what logs and the completion marker record.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import llmaz.apis.constants as c
from llmaz.apis.modelpath import loader_target
from llmaz.loader.errors import ConfigurationError

HF_DEFAULT_ENDPOINT = "https://huggingface.co"
PROVIDERS = (c.OSS, c.S3, c.GCS)
_Number = TypeVar("_Number", int, float)


@dataclass(frozen=True)
class HubSource:
    """A model on Hugging Face or ModelScope."""

    hub: str
    model_id: str
    revision: str | None
    filename: str | None
    allow_patterns: tuple[str, ...] | None
    ignore_patterns: tuple[str, ...] | None
    endpoint: str
    token: str | None

    def describe(self) -> dict[str, object]:
        return {
            "type": c.MODEL_SOURCE_MODELHUB,
            "hub": self.hub,
            "modelID": self.model_id,
            "revision": self.revision,
            "filename": self.filename,
            "allowPatterns": list(self.allow_patterns) if self.allow_patterns is not None else None,
            "ignorePatterns": list(self.ignore_patterns) if self.ignore_patterns is not None else None,
            "endpoint": self.endpoint,
        }


@dataclass(frozen=True)
class ObjectStoreSource:
    """A model in an OSS, S3 or GCS bucket; `path` is the object (or directory) path inside the bucket."""

    provider: str
    endpoint: str | None
    bucket: str
    path: str

    def describe(self) -> dict[str, object]:
        return {
            "type": c.MODEL_SOURCE_OBJSTORE,
            "provider": self.provider,
            "endpoint": self.endpoint,
            "bucket": self.bucket,
            "path": self.path,
        }

    @property
    def uri(self) -> str:
        if self.provider == c.OSS:
            return f"oss://{self.bucket}.{self.endpoint}/{self.path}"
        return f"{self.provider.lower()}://{self.bucket}/{self.path}"


@dataclass(frozen=True)
class Target:
    """`model_path` is what the engine is pointed at; files are written below `local_dir`."""

    model_path: Path
    local_dir: Path
    single_file: bool


@dataclass(frozen=True)
class Tuning:
    """Knobs with production defaults; tests shorten them through the environment."""

    max_attempts: int = 6
    retry_base_seconds: float = 1.0
    retry_max_seconds: float = 60.0
    progress_interval_seconds: float = 5.0
    concurrency: int = 4


@dataclass(frozen=True)
class LoaderConfig:
    source: HubSource | ObjectStoreSource
    target: Target
    tuning: Tuning


def read_config(env: Mapping[str, str] = os.environ) -> LoaderConfig:
    """Parse and validate the whole environment; raises `ConfigurationError`."""
    source_type = env.get(c.ENV_MODEL_SOURCE_TYPE, "")
    source: HubSource | ObjectStoreSource
    if source_type == c.MODEL_SOURCE_MODELHUB:
        source = _hub_source(env)
    elif source_type == c.MODEL_SOURCE_OBJSTORE:
        source = _object_store_source(env)
    else:
        raise ConfigurationError(
            f"unknown model source type {source_type!r}: {c.ENV_MODEL_SOURCE_TYPE} must be "
            f"{c.MODEL_SOURCE_MODELHUB!r} or {c.MODEL_SOURCE_OBJSTORE!r} (set by the controller from the OpenModel)"
        )
    return LoaderConfig(source=source, target=_target(env), tuning=_tuning(env))


def _required(env: Mapping[str, str], name: str, origin: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise ConfigurationError(f"environment variable {name} is not set: it must hold {origin}")
    return value


def _patterns(env: Mapping[str, str], name: str) -> tuple[str, ...] | None:
    patterns = tuple(p.strip() for p in env.get(name, "").split(",") if p.strip())
    return patterns or None


def _hub_source(env: Mapping[str, str]) -> HubSource:
    hub = env.get(c.ENV_MODEL_HUB_NAME, "").strip() or c.HUGGING_FACE
    if hub not in (c.HUGGING_FACE, c.MODEL_SCOPE):
        raise ConfigurationError(
            f"Unknown model hub: {hub} ({c.ENV_MODEL_HUB_NAME} must be {c.HUGGING_FACE!r} or {c.MODEL_SCOPE!r}, "
            "from the OpenModel's spec.source.modelHub.name)"
        )
    token = env.get("HF_TOKEN", "").strip() or env.get("HUGGING_FACE_HUB_TOKEN", "").strip() or None
    return HubSource(
        hub=hub,
        model_id=_required(env, c.ENV_MODEL_ID, "the model ID (the OpenModel's spec.source.modelHub.modelID)"),
        revision=env.get(c.ENV_REVISION, "").strip() or None,
        filename=env.get(c.ENV_MODEL_FILENAME, "").strip() or None,
        allow_patterns=_patterns(env, c.ENV_MODEL_ALLOW_PATTERNS),
        ignore_patterns=_patterns(env, c.ENV_MODEL_IGNORE_PATTERNS),
        endpoint=(env.get("HF_ENDPOINT", "").strip() or HF_DEFAULT_ENDPOINT).rstrip("/"),
        token=token,
    )


def _object_store_source(env: Mapping[str, str]) -> ObjectStoreSource:
    provider = env.get(c.ENV_PROVIDER, "").strip().upper()
    if provider not in PROVIDERS:
        raise ConfigurationError(
            f"unknown object store provider {provider!r}: {c.ENV_PROVIDER} must be one of {', '.join(PROVIDERS)} "
            "(from the scheme of the OpenModel's spec.source.uri)"
        )
    endpoint = env.get(c.ENV_ENDPOINT, "").strip() or None
    if provider == c.OSS and endpoint is None:
        raise ConfigurationError(
            f"environment variable {c.ENV_ENDPOINT} is not set: OSS needs the endpoint "
            "(the part after the bucket in oss://<bucket>.<endpoint>/<path>)"
        )
    uri_hint = "the OpenModel's spec.source.uri"
    path = _required(env, c.ENV_MODEL_PATH, f"the object path inside the bucket (from {uri_hint})").strip("/")
    if not path:
        raise ConfigurationError(f"{c.ENV_MODEL_PATH} names the bucket root: {uri_hint} must name a model path")
    return ObjectStoreSource(
        provider=provider,
        endpoint=endpoint,
        bucket=_required(env, c.ENV_BUCKET, f"the bucket name (from {uri_hint})"),
        path=path,
    )


def _target(env: Mapping[str, str]) -> Target:
    """The shared rule's answer, with the `/workspace/models/` root moved to `MODEL_DIR` when that is set."""
    shared = loader_target(env)
    root = env.get("MODEL_DIR", "").strip() or c.CONTAINER_MODEL_PATH

    def relocate(path: str) -> Path:
        if not path.startswith(c.CONTAINER_MODEL_PATH):
            raise ConfigurationError(f"model path {path} is outside {c.CONTAINER_MODEL_PATH}")
        return Path(root) / path[len(c.CONTAINER_MODEL_PATH) :]

    return Target(relocate(shared.model_path), relocate(shared.local_dir), shared.single_file)


def _number(env: Mapping[str, str], name: str, kind: type[_Number], default: _Number, minimum: _Number) -> _Number:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r} is not a number") from None
    if value < minimum:
        raise ConfigurationError(f"{name}={raw!r} must be at least {minimum}")
    return value


def _tuning(env: Mapping[str, str]) -> Tuning:
    d = Tuning()
    return Tuning(
        max_attempts=_number(env, "LOADER_MAX_ATTEMPTS", int, d.max_attempts, 1),
        retry_base_seconds=_number(env, "LOADER_RETRY_BASE_SECONDS", float, d.retry_base_seconds, 0.0),
        retry_max_seconds=_number(env, "LOADER_RETRY_MAX_SECONDS", float, d.retry_max_seconds, 0.0),
        progress_interval_seconds=_number(
            env, "LOADER_PROGRESS_INTERVAL_SECONDS", float, d.progress_interval_seconds, 0.1
        ),
        concurrency=_number(env, "LOADER_CONCURRENCY", int, d.concurrency, 1),
    )
