"""Where each kind of model lands, how the engine names it, and the one file-vs-directory rule (llmaz's controller
and loader each had their own, and disagreed)."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.apis import OpenModel
from llmaz.apis.modelpath import (
    LoaderTarget,
    is_weight_file,
    loader_target,
    model_name,
    model_path,
    object_store_target,
)

from .factories import hub_model, model, uri_model

OSS_DIR = "oss://bucket.endpoint/modelPath/subPath"
OSS_FILE = "oss://bucket.endpoint/modelPath/weight.gguf"

# name, model, ModelName, ModelPath with the loader, ModelPath with the loader skipped
SOURCES: list[tuple[str, OpenModel, str, str, str]] = [
    (
        "hugging face repository",
        hub_model("opt-125m", "facebook/opt-125m"),
        "opt-125m",
        "/workspace/models/models--facebook--opt-125m",
        "facebook/opt-125m",
    ),
    (
        "hugging face single file",
        hub_model("qwen", "Qwen/Qwen2-0.5B-Instruct-GGUF", filename="qwen2-0_5b-instruct-q5_k_m.gguf"),
        "qwen",
        "/workspace/models/qwen2-0_5b-instruct-q5_k_m.gguf",
        "Qwen/Qwen2-0.5B-Instruct-GGUF",
    ),
    (
        "modelscope repository",
        model("opt", {"modelHub": {"name": "ModelScope", "modelID": "AI-ModelScope/opt-125"}}),
        "opt",
        "/workspace/models/models--AI-ModelScope--opt-125",
        "AI-ModelScope/opt-125",
    ),
    ("oss directory", uri_model("m", OSS_DIR), "m", "/workspace/models/models--subPath", OSS_DIR),
    ("oss file", uri_model("m", OSS_FILE), "m", "/workspace/models/weight.gguf", OSS_FILE),
    (
        "s3 directory",
        uri_model("ds", "s3://my-models/DeepSeek-R1-Distill-Qwen-1.5B"),
        "ds",
        "/workspace/models/models--DeepSeek-R1-Distill-Qwen-1.5B",
        "s3://my-models/DeepSeek-R1-Distill-Qwen-1.5B",
    ),
    (
        "gcs file",
        uri_model("g", "gcs://bucket/dir/model.safetensors"),
        "g",
        "/workspace/models/model.safetensors",
        "gcs://bucket/dir/model.safetensors",
    ),
    (
        "ollama tag",
        uri_model("qwen2-0--5b", "ollama://qwen2:0.5b"),
        "qwen2:0.5b",
        "/workspace/models/models--qwen2:0.5b",
        "ollama://qwen2:0.5b",
    ),
    (
        "host path",
        uri_model("h", "host:///workspace/Qwen2-0.5B-Instruct"),
        "h",
        "/workspace/Qwen2-0.5B-Instruct",
        "/workspace/Qwen2-0.5B-Instruct",
    ),
    (
        "hub wins over uri",
        model("both", {"modelHub": {"modelID": "a/b"}, "uri": "ollama://x"}),
        "both",
        "/workspace/models/models--a--b",
        "a/b",
    ),
]
IDS = [case[0] for case in SOURCES]


@pytest.mark.parametrize(("case", "source", "name", "loaded", "skipped"), SOURCES, ids=IDS)
def test_model_name_is_the_openmodel_name_or_the_ollama_tag(
    case: str, source: OpenModel, name: str, loaded: str, skipped: str
) -> None:
    assert model_name(source) == name


@pytest.mark.parametrize(("case", "source", "name", "loaded", "skipped"), SOURCES, ids=IDS)
def test_model_path_with_the_loader_points_into_the_model_volume(
    case: str, source: OpenModel, name: str, loaded: str, skipped: str
) -> None:
    assert model_path(source, skip_model_loader=False) == loaded


@pytest.mark.parametrize(("case", "source", "name", "loaded", "skipped"), SOURCES, ids=IDS)
def test_model_path_without_the_loader_is_the_source_itself(
    case: str, source: OpenModel, name: str, loaded: str, skipped: str
) -> None:
    assert model_path(source, skip_model_loader=True) == skipped


@pytest.mark.parametrize(
    ("segment", "is_file"),
    [
        ("weight.gguf", True),
        ("WEIGHT.GGUF", True),
        ("model.safetensors", True),
        ("pytorch_model.bin", True),
        ("model.pt", True),
        ("model.pth", True),
        ("Qwen2.5-7B", False),
        ("DeepSeek-R1-Distill-Qwen-1.5B", False),
        ("subPath", False),
        ("archive.tar", False),
    ],
)
def test_a_segment_is_a_file_only_with_a_known_weight_extension(segment: str, is_file: bool) -> None:
    assert is_weight_file(segment) is is_file


@pytest.mark.parametrize(
    ("object_path", "target"),
    [
        (
            "models/Qwen2.5-7B",
            LoaderTarget("/workspace/models/models--Qwen2.5-7B", "/workspace/models/models--Qwen2.5-7B", False),
        ),
        (
            "models/Qwen2.5-7B/",
            LoaderTarget("/workspace/models/models--Qwen2.5-7B", "/workspace/models/models--Qwen2.5-7B", False),
        ),
        ("models/q.gguf", LoaderTarget("/workspace/models/q.gguf", "/workspace/models/", True)),
        ("q.gguf", LoaderTarget("/workspace/models/q.gguf", "/workspace/models/", True)),
    ],
)
def test_object_store_target_names_the_file_or_directory_the_loader_writes(
    object_path: str, target: LoaderTarget
) -> None:
    assert object_store_target(object_path) == target


@pytest.mark.parametrize(
    ("env", "expected_path"),
    [
        (
            {"MODEL_SOURCE_TYPE": "modelhub", "MODEL_ID": "facebook/opt-125m"},
            "/workspace/models/models--facebook--opt-125m",
        ),
        ({"MODEL_SOURCE_TYPE": "modelhub", "MODEL_ID": "Q/G", "MODEL_FILENAME": "q.gguf"}, "/workspace/models/q.gguf"),
        (
            {"MODEL_SOURCE_TYPE": "objstore", "PROVIDER": "OSS", "MODEL_PATH": "m/Qwen2.5-7B"},
            "/workspace/models/models--Qwen2.5-7B",
        ),
        ({"MODEL_SOURCE_TYPE": "objstore", "PROVIDER": "S3", "MODEL_PATH": "m/w.gguf"}, "/workspace/models/w.gguf"),
    ],
)
def test_loader_target_reads_the_loader_environment(env: dict[str, str], expected_path: str) -> None:
    assert loader_target(env).model_path == expected_path


def test_loader_target_rejects_an_unknown_source_type() -> None:
    with pytest.raises(ValueError, match="unknown model source type git"):
        loader_target({"MODEL_SOURCE_TYPE": "git"})


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"uri": "ftp://host/path"}, "unsupported protocol FTP"),
        ({"uri": "s3:/missing"}, "uri format error"),
        ({"uri": "oss://no-dot/path"}, "address not right no-dot/path"),
    ],
)
def test_unusable_sources_raise_value_errors(source: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        model_path(model("bad", source), skip_model_loader=False)


def test_an_unsupported_protocol_is_rejected_even_when_the_loader_is_skipped() -> None:
    with pytest.raises(ValueError, match="unsupported protocol FTP"):
        model_path(model("bad", {"uri": "ftp://host/path"}), skip_model_loader=True)
