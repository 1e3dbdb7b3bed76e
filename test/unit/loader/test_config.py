"""The environment contract: what the loader accepts, how it reads it, and how it explains what it rejects."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmaz.loader.config import HubSource, ObjectStoreSource, read_config
from llmaz.loader.errors import ConfigurationError

HUB = {"MODEL_SOURCE_TYPE": "modelhub", "MODEL_ID": "facebook/opt-125m"}
OSS = {
    "MODEL_SOURCE_TYPE": "objstore",
    "PROVIDER": "OSS",
    "ENDPOINT": "oss-cn-hangzhou.aliyuncs.com",
    "BUCKET": "llmaz",
    "MODEL_PATH": "models/Qwen2-7B",
}


def test_hub_settings_are_read_with_llmaz_defaults() -> None:
    config = read_config({**HUB, "MODEL_ALLOW_PATTERNS": " *.json, ,*.safetensors", "MODEL_IGNORE_PATTERNS": ""})

    assert config.source == HubSource(
        hub="Huggingface",
        model_id="facebook/opt-125m",
        revision=None,
        filename=None,
        allow_patterns=("*.json", "*.safetensors"),
        ignore_patterns=None,
        endpoint="https://huggingface.co",
        token=None,
    )
    assert config.target.model_path == Path("/workspace/models/models--facebook--opt-125m")
    assert not config.target.single_file


def test_the_hub_token_and_endpoint_come_from_the_injected_variables() -> None:
    config = read_config({**HUB, "HUGGING_FACE_HUB_TOKEN": "t1", "HF_ENDPOINT": "http://mirror:8080/"})

    assert isinstance(config.source, HubSource)
    assert (config.source.token, config.source.endpoint) == ("t1", "http://mirror:8080")
    assert "t1" not in str(config.source.describe())


def test_a_filename_makes_a_single_file_target_under_the_root() -> None:
    target = read_config({**HUB, "MODEL_FILENAME": "q4.gguf"}).target

    assert (target.model_path, target.local_dir, target.single_file) == (
        Path("/workspace/models/q4.gguf"),
        Path("/workspace/models"),
        True,
    )


def test_model_dir_moves_the_root_but_not_the_layout() -> None:
    target = read_config({**OSS, "MODEL_DIR": "/tmp/m"}).target

    assert target.model_path == Path("/tmp/m/models--Qwen2-7B")


def test_an_object_store_path_loses_its_surrounding_slashes() -> None:
    config = read_config({**OSS, "MODEL_PATH": "/models/Qwen2-7B/"})

    assert config.source == ObjectStoreSource(
        provider="OSS", endpoint="oss-cn-hangzhou.aliyuncs.com", bucket="llmaz", path="models/Qwen2-7B"
    )
    assert config.source.uri == "oss://llmaz.oss-cn-hangzhou.aliyuncs.com/models/Qwen2-7B"


def test_s3_and_gcs_need_no_endpoint() -> None:
    for provider in ("S3", "gcs"):
        env = {**OSS, "PROVIDER": provider}
        del env["ENDPOINT"]
        source = read_config(env).source
        assert isinstance(source, ObjectStoreSource)
        assert (source.provider, source.endpoint) == (provider.upper(), None)
        assert source.uri == f"{provider.lower()}://llmaz/models/Qwen2-7B"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "unknown model source type ''"),
        ({"MODEL_SOURCE_TYPE": "ftp"}, "unknown model source type 'ftp'"),
        ({**HUB, "MODEL_ID": ""}, "environment variable MODEL_ID is not set: it must hold the model ID"),
        ({**HUB, "MODEL_HUB_NAME": "Gitee"}, "Unknown model hub: Gitee"),
        ({**OSS, "PROVIDER": "AZURE"}, "unknown object store provider 'AZURE'"),
        ({**OSS, "ENDPOINT": ""}, "environment variable ENDPOINT is not set: OSS needs the endpoint"),
        ({**OSS, "BUCKET": ""}, "environment variable BUCKET is not set"),
        ({**OSS, "MODEL_PATH": "/"}, "MODEL_PATH names the bucket root"),
        ({**HUB, "LOADER_MAX_ATTEMPTS": "many"}, "LOADER_MAX_ATTEMPTS='many' is not a number"),
        ({**HUB, "LOADER_CONCURRENCY": "0"}, "LOADER_CONCURRENCY='0' must be at least 1"),
    ],
)
def test_a_bad_environment_is_a_configuration_error_that_names_the_problem(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        read_config(env)

    assert message in caught.value.message
    assert "None" not in caught.value.message
