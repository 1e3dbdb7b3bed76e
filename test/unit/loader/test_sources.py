"""Source selection and how each provider's failures map onto the loader's failure classes and messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import oss2  # type: ignore[import-untyped]
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError  # type: ignore[import-untyped]

from llmaz.loader.config import HubSource, ObjectStoreSource, Target, read_config
from llmaz.loader.errors import (
    ConfigurationError,
    ExitCode,
    LoaderError,
    NotFoundError,
    SourceChangedError,
    TransientError,
    UnauthorizedError,
)
from llmaz.loader.load import make_source
from llmaz.loader.modelscope import MISSING_LIBRARY, ModelScopeSource
from llmaz.loader.objstore import Failure, ObjectStoreFiles, endpoint_url
from llmaz.loader.oss import OssClient
from llmaz.loader.s3 import S3Client

MODELSCOPE_ENV = {"MODEL_SOURCE_TYPE": "modelhub", "MODEL_HUB_NAME": "ModelScope", "MODEL_ID": "AI-ModelScope/opt-125"}


def test_exit_codes_are_distinct_per_failure_class() -> None:
    assert [int(code) for code in ExitCode] == [0, 1, 2, 3, 4, 5, 6]


def test_the_modelscope_hub_selects_the_modelscope_source() -> None:
    config = read_config(MODELSCOPE_ENV)

    assert isinstance(make_source(config, MODELSCOPE_ENV), ModelScopeSource)


def test_modelscope_without_its_library_is_a_configuration_error_naming_the_image_extra() -> None:
    source = ModelScopeSource(HubSource("ModelScope", "a/b", None, None, None, None, "", None))

    with pytest.raises(ConfigurationError) as caught:
        source.download(Target(Path("/nonexistent/models--a--b"), Path("/nonexistent/models--a--b"), False))

    assert caught.value.message == MISSING_LIBRARY
    assert "EXTRAS=loader,modelscope" in MISSING_LIBRARY


def test_modelscope_downloads_one_file_by_narrowing_the_allow_patterns(tmp_path: Path) -> None:
    calls: list[dict[str, Any]] = []

    def snapshot_download(model_id: str, **kwargs: Any) -> str:
        calls.append({"model_id": model_id, **kwargs})
        (tmp_path / "w.gguf").write_bytes(b"GGUF")
        return str(tmp_path)

    spec = HubSource("ModelScope", "a/b", "master", "w.gguf", ("*.json",), None, "", None)
    listing = ModelScopeSource(spec, snapshot_download).download(Target(tmp_path / "w.gguf", tmp_path, True))

    assert calls == [
        {
            "model_id": "a/b",
            "revision": "master",
            "local_dir": str(tmp_path),
            "allow_patterns": ["w.gguf"],
            "ignore_patterns": None,
        }
    ]
    assert [(f.name, f.size) for f in listing.files] == [("w.gguf", 4)]


def test_modelscope_errors_are_classified_by_name_and_status() -> None:
    source = ModelScopeSource(HubSource("ModelScope", "a/b", None, None, None, None, "", None))
    not_exist = type("NotExistError", (Exception,), {})("no such model")

    assert isinstance(source.classify(not_exist), NotFoundError)
    assert source.classify(ValueError("bug")) is None


def client_error(status: int, code: str) -> ClientError:
    return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (client_error(404, "NoSuchBucket"), Failure.NOT_FOUND),
        (client_error(404, "404"), Failure.NOT_FOUND),
        (client_error(403, "AccessDenied"), Failure.UNAUTHORIZED),
        (client_error(403, "SignatureDoesNotMatch"), Failure.UNAUTHORIZED),
        (client_error(412, "PreconditionFailed"), Failure.CHANGED),
        (client_error(416, "InvalidRange"), Failure.CHANGED),
        (client_error(503, "SlowDown"), Failure.TRANSIENT),
        (client_error(400, "InvalidBucketName"), Failure.INVALID),
        (EndpointConnectionError(endpoint_url="https://s3.example"), Failure.TRANSIENT),
    ],
)
def test_s3_errors_map_to_failure_kinds(error: Exception, kind: Failure) -> None:
    found = S3Client(client=None, bucket="b").failure(error)

    assert found is not None
    assert found[0] is kind


def oss_error(status: int, code: str) -> oss2.exceptions.OssError:
    return oss2.exceptions.make_exception(_FakeResponse(status, code))


class _FakeResponse:
    """The minimum of an oss2 HTTP response that `oss2.exceptions.make_exception` reads."""

    def __init__(self, status: int, code: str) -> None:
        self.status = status
        self.headers = {"x-oss-request-id": "r"}
        self.request_id = "r"
        self._body = f"<Error><Code>{code}</Code><Message>m</Message></Error>".encode()

    def read(self, amount: int | None = None) -> bytes:
        return self._body


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (oss_error(404, "NoSuchKey"), Failure.NOT_FOUND),
        (oss_error(403, "AccessDenied"), Failure.UNAUTHORIZED),
        (oss_error(412, "PreconditionFailed"), Failure.CHANGED),
        (oss_error(503, "ServiceUnavailable"), Failure.TRANSIENT),
        (oss_error(400, "InvalidArgument"), Failure.INVALID),
        (oss2.exceptions.RequestError(ConnectionError("reset")), Failure.TRANSIENT),
    ],
)
def test_oss_errors_map_to_failure_kinds(error: Exception, kind: Failure) -> None:
    found = OssClient(bucket=None).failure(error)

    assert found is not None
    assert found[0] is kind


class _Failing:
    def __init__(self, kind: Failure) -> None:
        self.kind = kind

    def failure(self, error: BaseException) -> tuple[Failure, str]:
        return self.kind, "HTTP 999 Code"


@pytest.mark.parametrize(
    ("provider", "kind", "cls", "needle"),
    [
        (
            "S3",
            Failure.UNAUTHORIZED,
            UnauthorizedError,
            "create secret 'aws-access-secret' with keys AWS_ACCESS_KEY_ID",
        ),
        ("GCS", Failure.UNAUTHORIZED, UnauthorizedError, "an HMAC key of a service account"),
        (
            "OSS",
            Failure.UNAUTHORIZED,
            UnauthorizedError,
            "create secret 'oss-access-secret' with keys OSS_ACCESS_KEY_ID",
        ),
        ("S3", Failure.NOT_FOUND, NotFoundError, "fix the OpenModel's spec.source.uri"),
        ("S3", Failure.CHANGED, SourceChangedError, "changed during the download"),
        ("S3", Failure.TRANSIENT, TransientError, "HTTP 999 Code"),
        ("S3", Failure.INVALID, ConfigurationError, "rejected"),
    ],
)
def test_object_store_messages_name_the_model_and_the_fix(
    provider: str, kind: Failure, cls: type[LoaderError], needle: str
) -> None:
    spec = ObjectStoreSource(provider, "oss.example.com" if provider == "OSS" else None, "bucket", "models/qwen")
    files = ObjectStoreFiles(spec, Target(Path("/m/models--qwen"), Path("/m/models--qwen"), False), _Failing(kind))  # type: ignore[arg-type]

    error = files.classify(RuntimeError("boom"))

    assert isinstance(error, cls)
    assert spec.uri in error.message
    assert needle in error.message


def test_bare_endpoints_get_https_unless_the_scheme_is_overridden() -> None:
    assert endpoint_url("oss-cn-hangzhou.aliyuncs.com", {}) == "https://oss-cn-hangzhou.aliyuncs.com"
    assert endpoint_url("10.0.0.1:9000", {"OBJSTORE_ENDPOINT_SCHEME": "http"}) == "http://10.0.0.1:9000"
    assert endpoint_url("http://minio:9000/", {}) == "http://minio:9000"
