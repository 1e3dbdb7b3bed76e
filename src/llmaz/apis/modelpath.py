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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from llmaz.apis import constants as c
from llmaz.apis.core_v1alpha1 import OpenModel
from llmaz.apis.uri import parse_bucket_path, parse_oss, parse_uri

WEIGHT_FILE_EXTENSIONS = (".gguf", ".ggml", ".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".onnx")
DIRECTORY_PREFIX = "models--"


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
    if source_type == c.MODEL_SOURCE_MODELHUB:
        return hub_target(env.get(c.ENV_MODEL_ID, ""), env.get(c.ENV_MODEL_FILENAME) or None)
    if source_type == c.MODEL_SOURCE_OBJSTORE:
        return object_store_target(env.get(c.ENV_MODEL_PATH, ""))
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
    source = model.spec.source
    if source.model_hub is not None:
        hub = source.model_hub
        if skip_model_loader:
            return hub.model_id or ""
        return hub_target(hub.model_id or "", hub.filename).model_path
    if not source.uri:
        raise ValueError("source has neither modelHub nor uri")
    protocol, address = parse_uri(source.uri)
    if protocol not in c.URI_PROTOCOLS:
        raise ValueError(f"unsupported protocol {protocol}")
    if protocol == c.HOST:
        return address
    if skip_model_loader:
        return source.uri
    if protocol == c.OLLAMA:
        return c.CONTAINER_MODEL_PATH + DIRECTORY_PREFIX + address
    return object_store_target(object_store_location(protocol, address)[2]).model_path
