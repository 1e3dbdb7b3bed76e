"""Where a model's weights land on disk, and the name the engine serves it under.

This is the single rule shared by the controllers (which point the engine at `ModelPath`) and the model loader
(which writes the weights there), so the two cannot disagree.

Rules:
- Hub without filename: `/workspace/models/models--<modelID with "/" replaced by "--">` (a directory).
- Hub with filename: `/workspace/models/<filename>` (a file; the loader downloads into `/workspace/models/`).
- Object stores (OSS, S3, GCS): the last segment of the object path (trailing `/` ignored) names the model. It is a
  FILE when it ends with a known weight-file extension (`WEIGHT_FILE_EXTENSIONS`, case-insensitive), landing at
  `/workspace/models/<segment>`; otherwise it is a DIRECTORY, landing at `/workspace/models/models--<segment>`.
  llmaz's controller looked for `.gguf` anywhere in the path while its loader looked for any `.` in the last
  segment; both agree with this rule for the usual `.../<name>.gguf` files.
- `ollama://<tag>`: `/workspace/models/models--<tag>` (unused: ollama pulls the model itself); served as `<tag>`.
- `host://<abs path>`: `<abs path>`, with or without the model loader.
- With the model loader skipped the engine loads from the source: the hub `modelID`, or the full URI.

Adapters (`spec.adapters`) land in a directory of their own, `/workspace/models/adapters--<adapter name>`, which no
model path can be (models land at `models--...` directories or weight files directly below the root), and which no
two adapters of one model share (their names are unique). A single-file source (a hub `filename`, or an object whose
last segment is a weight file) lands in it under its own name, and the engine is pointed at that FILE (llama.cpp's
`--lora` takes a GGUF file); any other source fills the directory, and the engine is pointed at the directory.
`host://` adapters are used in place and `ollama://` cannot hold one. The loader learns it loads an adapter from
`ADAPTER_NAME` in its environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from llmaz.apis import constants as c
from llmaz.apis.core_v1alpha1 import Adapter, ModelSource, OpenModel
from llmaz.apis.uri import parse_bucket_path, parse_oss, parse_uri

WEIGHT_FILE_EXTENSIONS = (".gguf", ".ggml", ".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".onnx")
DIRECTORY_PREFIX = "models--"
ADAPTER_DIRECTORY_PREFIX = "adapters--"
OLLAMA_ADAPTER = "an ollama:// source cannot hold an adapter: ollama pulls whole models by tag, not adapter weights"


@dataclass(frozen=True)
class LoaderTarget:
    """What the loader writes: `model_path` is what the engine is pointed at, `local_dir` where files are written."""

    model_path: str
    local_dir: str
    single_file: bool


def is_weight_file(name: str) -> bool:
    """Whether an object-store path segment names a single weight file rather than a directory."""
    return name.lower().endswith(WEIGHT_FILE_EXTENSIONS)


def hub_target(model_id: str, filename: str | None) -> LoaderTarget:
    """Where a model-hub download lands."""
    if filename:
        return LoaderTarget(c.CONTAINER_MODEL_PATH + filename, c.CONTAINER_MODEL_PATH, single_file=True)
    directory = c.CONTAINER_MODEL_PATH + DIRECTORY_PREFIX + model_id.replace("/", "--")
    return LoaderTarget(directory, directory, single_file=False)


def object_store_target(object_path: str) -> LoaderTarget:
    """Where an object-store download of `object_path` (the path inside the bucket) lands."""
    segment = object_path.rstrip("/").rsplit("/", 1)[-1]
    if is_weight_file(segment):
        return LoaderTarget(c.CONTAINER_MODEL_PATH + segment, c.CONTAINER_MODEL_PATH, single_file=True)
    directory = c.CONTAINER_MODEL_PATH + DIRECTORY_PREFIX + segment
    return LoaderTarget(directory, directory, single_file=False)


def adapter_directory(adapter: str) -> str:
    """The directory adapter `adapter` of the served model lands in."""
    return c.CONTAINER_MODEL_PATH + ADAPTER_DIRECTORY_PREFIX + adapter


def adapter_hub_target(adapter: str, filename: str | None) -> LoaderTarget:
    """Where a model-hub download of an adapter lands."""
    directory = adapter_directory(adapter)
    if filename:
        return LoaderTarget(f"{directory}/{filename}", directory, single_file=True)
    return LoaderTarget(directory, directory, single_file=False)


def adapter_object_store_target(adapter: str, object_path: str) -> LoaderTarget:
    """Where an object-store download of an adapter, `object_path` inside its bucket, lands."""
    directory = adapter_directory(adapter)
    segment = object_path.rstrip("/").rsplit("/", 1)[-1]
    if is_weight_file(segment):
        return LoaderTarget(f"{directory}/{segment}", directory, single_file=True)
    return LoaderTarget(directory, directory, single_file=False)


def object_store_location(protocol: str, address: str) -> tuple[str, str, str]:
    """(bucket, endpoint, object path) of an OSS, S3 or GCS address; the endpoint is empty for S3 and GCS."""
    if protocol == c.OSS:
        return parse_oss(address)
    if protocol in (c.S3, c.GCS):
        bucket, path = parse_bucket_path(address)
        return bucket, "", path
    raise ValueError(f"{protocol} is not an object store")


def loader_target(env: Mapping[str, str]) -> LoaderTarget:
    """The loader's view: where the weights described by its environment (see `constants.ENV_*`) must land."""
    source_type = env.get(c.ENV_MODEL_SOURCE_TYPE, "")
    adapter = env.get(c.ENV_ADAPTER_NAME, "")
    if source_type == c.MODEL_SOURCE_MODELHUB:
        filename = env.get(c.ENV_MODEL_FILENAME) or None
        return adapter_hub_target(adapter, filename) if adapter else hub_target(env.get(c.ENV_MODEL_ID, ""), filename)
    if source_type == c.MODEL_SOURCE_OBJSTORE:
        path = env.get(c.ENV_MODEL_PATH, "")
        return adapter_object_store_target(adapter, path) if adapter else object_store_target(path)
    raise ValueError(f"unknown model source type {source_type}")


def model_name(model: OpenModel) -> str:
    """The name the engine serves the model under: the OpenModel name, or the tag of an `ollama://` URI."""
    source = model.spec.source
    if source.model_hub is None and source.uri:
        protocol, address = parse_uri(source.uri)
        if protocol == c.OLLAMA:
            return address
    return model.metadata.name or ""


def model_path(model: OpenModel, skip_model_loader: bool) -> str:
    """Where the engine finds the model (`{{ .ModelPath }}`); raises `ValueError` for an unusable source."""
    return _source_path(model.spec.source, skip_model_loader, None)


def adapter_path(adapter: Adapter, skip_model_loader: bool) -> str:
    """Where the engine finds an adapter of the served model; raises `ValueError` for an unusable source."""
    return _source_path(adapter.source, skip_model_loader, adapter.name)


def _source_path(source: ModelSource, skip_model_loader: bool, adapter: str | None) -> str:
    if source.model_hub is not None:
        hub = source.model_hub
        if skip_model_loader:
            return hub.model_id or ""
        if adapter is not None:
            return adapter_hub_target(adapter, hub.filename).model_path
        return hub_target(hub.model_id or "", hub.filename).model_path
    if not source.uri:
        raise ValueError("source has neither modelHub nor uri")
    protocol, address = parse_uri(source.uri)
    if protocol not in c.URI_PROTOCOLS:
        raise ValueError(f"unsupported protocol {protocol}")
    if protocol == c.HOST:
        return address
    if protocol == c.OLLAMA and adapter is not None:
        raise ValueError(OLLAMA_ADAPTER)
    if skip_model_loader:
        return source.uri
    if protocol == c.OLLAMA:
        return c.CONTAINER_MODEL_PATH + DIRECTORY_PREFIX + address
    object_path = object_store_location(protocol, address)[2]
    if adapter is not None:
        return adapter_object_store_target(adapter, object_path).model_path
    return object_store_target(object_path).model_path


def mentions_path(text: str, path: str) -> bool:
    """Whether `text` (a log line, an engine argument) has `path` in it, itself and not a longer path."""
    return bool(path) and re.search(re.escape(path) + r"(?![\w.-])", text) is not None
