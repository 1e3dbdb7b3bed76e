"""The loader against a local OSS server and moto (S3, and GCS through the S3-compatible XML API)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmaz_dev.testing.storage import OssServer

from .conftest import AWS_TEST_CREDENTIALS, loader_env, run_loader

MODEL_FILES = {
    "config.json": b'{"model_type": "qwen2"}',
    "model-00001-of-00002.safetensors": b"\x01" * 300_000,
    "model-00002-of-00002.safetensors": b"\x02" * 200_000,
    "tokenizer/tokenizer.json": b"{}",
    "tokenizer/extra/special.txt": b"<s>",
}


def tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    }


def oss_env(oss: OssServer, model_dir: Path, path: str, **env: str) -> dict[str, str]:
    defaults = {
        "MODEL_SOURCE_TYPE": "objstore",
        "PROVIDER": "OSS",
        "ENDPOINT": oss.url,
        "BUCKET": "models",
        "MODEL_PATH": path,
        "OSS_ACCESS_KEY_ID": "oss-key",
        "OSS_ACCESS_KEY_SECRET": "oss-secret",
    }
    return loader_env(model_dir, **{**defaults, **env})


def put_model(oss: OssServer) -> None:
    oss.buckets["models"] = {f"llm/Qwen2.5-7B/{name}": data for name, data in MODEL_FILES.items()}
    oss.buckets["models"]["llm/Qwen2.5-7B/"] = b""  # a folder placeholder, as consoles create
    oss.buckets["models"]["gguf/qwen2-0_5b-q5_k_m.gguf"] = b"GGUF" + b"\x05" * 50_000


def test_an_oss_directory_downloads_recursively_into_models_dash_dash_name(oss: OssServer, model_dir: Path) -> None:
    put_model(oss)

    run = run_loader(oss_env(oss, model_dir, "llm/Qwen2.5-7B"))

    assert run.code == 0, run.stderr
    assert tree(model_dir / "models--Qwen2.5-7B") == MODEL_FILES


def test_an_oss_weight_file_downloads_to_a_single_file(oss: OssServer, model_dir: Path) -> None:
    put_model(oss)

    run = run_loader(oss_env(oss, model_dir, "gguf/qwen2-0_5b-q5_k_m.gguf"))

    assert run.code == 0, run.stderr
    assert (model_dir / "qwen2-0_5b-q5_k_m.gguf").read_bytes() == oss.buckets["models"]["gguf/qwen2-0_5b-q5_k_m.gguf"]


def test_oss_with_wrong_credentials_exits_4_naming_the_secret(oss: OssServer, model_dir: Path) -> None:
    put_model(oss)

    run = run_loader(oss_env(oss, model_dir, "llm/Qwen2.5-7B", OSS_ACCESS_KEY_ID="wrong"))

    assert run.code == 4
    message = run.event("load.failed")["message"]
    assert "oss://models." in message
    assert "HTTP 403 AccessDenied" in message
    assert "'oss-access-secret'" in message
    assert "OSS_ACCESS_KEY_SECRET" in message


def test_an_oss_path_with_no_objects_exits_3_explaining_the_file_rule(oss: OssServer, model_dir: Path) -> None:
    put_model(oss)

    run = run_loader(oss_env(oss, model_dir, "llm/missing"))

    assert run.code == 3
    message = run.event("load.failed")["message"]
    assert "no objects under 'llm/missing/'" in message
    assert "spec.source.uri" in message


def test_a_missing_oss_weight_file_exits_3(oss: OssServer, model_dir: Path) -> None:
    put_model(oss)

    run = run_loader(oss_env(oss, model_dir, "gguf/absent.gguf"))

    assert run.code == 3
    assert "HTTP 404" in run.event("load.failed")["message"]


def s3_env(model_dir: Path, provider: str, endpoint: str, path: str, **env: str) -> dict[str, str]:
    defaults = {
        "MODEL_SOURCE_TYPE": "objstore",
        "PROVIDER": provider,
        "ENDPOINT": endpoint,
        "BUCKET": "models",
        "MODEL_PATH": path,
        **AWS_TEST_CREDENTIALS,
    }
    return loader_env(model_dir, **{**defaults, **env})


@pytest.fixture
def s3_model(s3: Any) -> Any:
    if not any(b["Name"] == "models" for b in s3.list_buckets().get("Buckets", [])):
        s3.create_bucket(Bucket="models")
    for name, data in MODEL_FILES.items():
        s3.put_object(Bucket="models", Key=f"llm/Qwen2.5-7B/{name}", Body=data)
    s3.put_object(Bucket="models", Key="gguf/qwen2-0_5b-q5_k_m.gguf", Body=b"GGUF" + b"\x07" * 70_000)
    return s3


@pytest.mark.parametrize("provider", ["S3", "GCS"])
def test_a_bucket_directory_downloads_recursively(s3_model: Any, moto_url: str, model_dir: Path, provider: str) -> None:
    run = run_loader(s3_env(model_dir, provider, moto_url, "llm/Qwen2.5-7B"))

    assert run.code == 0, run.stderr
    assert tree(model_dir / "models--Qwen2.5-7B") == MODEL_FILES
    marker = json.loads((model_dir / "models--Qwen2.5-7B" / ".llmaz-download.json").read_text())
    assert marker["source"]["provider"] == provider
    assert sorted(f["name"] for f in marker["files"]) == sorted(MODEL_FILES)


@pytest.mark.parametrize("provider", ["S3", "GCS"])
def test_a_bucket_weight_file_downloads_to_a_single_file(
    s3_model: Any, moto_url: str, model_dir: Path, provider: str
) -> None:
    run = run_loader(s3_env(model_dir, provider, moto_url, "gguf/qwen2-0_5b-q5_k_m.gguf"))

    assert run.code == 0, run.stderr
    assert (model_dir / "qwen2-0_5b-q5_k_m.gguf").read_bytes() == b"GGUF" + b"\x07" * 70_000


def test_the_s3_endpoint_can_come_from_the_runner_env(s3_model: Any, moto_url: str, model_dir: Path) -> None:
    env = s3_env(model_dir, "S3", moto_url, "llm/Qwen2.5-7B", AWS_ENDPOINT_URL=moto_url)
    del env["ENDPOINT"]

    run = run_loader(env)

    assert run.code == 0, run.stderr
    assert tree(model_dir / "models--Qwen2.5-7B") == MODEL_FILES


def test_a_missing_bucket_exits_3_naming_the_uri(s3_model: Any, moto_url: str, model_dir: Path) -> None:
    run = run_loader(s3_env(model_dir, "S3", moto_url, "llm/Qwen2.5-7B", BUCKET="no-such-bucket"))

    assert run.code == 3
    message = run.event("load.failed")["message"]
    assert "s3://no-such-bucket/llm/Qwen2.5-7B" in message
    assert "NoSuchBucket" in message


def test_a_missing_s3_weight_file_exits_3(s3_model: Any, moto_url: str, model_dir: Path) -> None:
    run = run_loader(s3_env(model_dir, "S3", moto_url, "gguf/absent.gguf"))

    assert run.code == 3
    assert "HTTP 404" in run.event("load.failed")["message"]


@pytest.mark.parametrize(("provider", "hint"), [("S3", "AWS_SECRET_ACCESS_KEY"), ("GCS", "HMAC key")])
def test_rejected_bucket_credentials_exit_4_naming_the_secret(
    moto_with_auth_url: str, model_dir: Path, provider: str, hint: str
) -> None:
    run = run_loader(s3_env(model_dir, provider, moto_with_auth_url, "llm/Qwen2.5-7B"))

    assert run.code == 4
    message = run.event("load.failed")["message"]
    assert f"{provider.lower()}://models/llm/Qwen2.5-7B" in message
    assert "InvalidAccessKeyId" in message
    assert "'aws-access-secret'" in message
    assert hint in message
