"""S3 and GCS clients through boto3; GCS is reached through its S3-compatible XML API with HMAC keys.

Credentials come from `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` (secret `aws-access-secret`, injected by the
controller for both providers), then boto3's usual chain (web identity, instance profile); with none at all the
requests are unsigned, which reads public buckets. The endpoint is `ENDPOINT` when set, else `AWS_ENDPOINT_URL_S3` /
`AWS_ENDPOINT_URL` (copied from the runner, as engines streaming from S3 or GCS use them), else AWS for S3 and
https://storage.googleapis.com for GCS.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import boto3  # type: ignore[import-untyped]
import urllib3.exceptions
from botocore import UNSIGNED  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import (  # type: ignore[import-untyped]
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
)

import llmaz.apis.constants as c
from llmaz.loader.config import ObjectStoreSource
from llmaz.loader.objstore import Failure, ObjectInfo, endpoint_url
from llmaz.loader.transfer import CHUNK_SIZE, Body

GCS_ENDPOINT = "https://storage.googleapis.com"
AUTH_CODES = frozenset(
    {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "AllAccessDisabled"}
)
THROTTLE_CODES = frozenset({"SlowDown", "RequestTimeout", "Throttling", "ThrottlingException", "InternalError"})


def _endpoint(spec: ObjectStoreSource, env: Mapping[str, str]) -> str | None:
    if spec.endpoint:
        return endpoint_url(spec.endpoint, env)
    from_runner = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if from_runner:
        return from_runner
    return GCS_ENDPOINT if spec.provider == c.GCS else None


def make_client(spec: ObjectStoreSource, env: Mapping[str, str]) -> S3Client:
    endpoint = _endpoint(spec, env)
    session = boto3.session.Session(
        aws_access_key_id=env.get(c.AWS_ACCESS_KEY_ID) or None,
        aws_secret_access_key=env.get(c.AWS_SECRET_ACCESS_KEY) or None,
        aws_session_token=env.get("AWS_SESSION_TOKEN") or None,
    )
    region = "auto" if spec.provider == c.GCS else env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    config = Config(
        signature_version=UNSIGNED if session.get_credentials() is None else None,
        s3={"addressing_style": "path" if endpoint else "auto"},
        retries={"mode": "standard", "max_attempts": 3},
        connect_timeout=10,
        read_timeout=60,
        # GCS rejects the flexible checksums newer botocore adds by default.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    client = session.client("s3", endpoint_url=endpoint, region_name=region or "us-east-1", config=config)
    return S3Client(client, spec.bucket)


class S3Client:
    def __init__(self, client: Any, bucket: str) -> None:
        self.client = client
        self.bucket = bucket

    def head(self, key: str) -> ObjectInfo:
        response = self.client.head_object(Bucket=self.bucket, Key=key)
        return ObjectInfo(key=key, size=int(response["ContentLength"]), etag=str(response["ETag"]).strip('"'))

    def list(self, prefix: str) -> Iterable[ObjectInfo]:
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                yield ObjectInfo(key=item["Key"], size=int(item["Size"]), etag=str(item["ETag"]).strip('"'))

    @contextmanager
    def get(self, key: str, offset: int, etag: str) -> Iterator[Body]:
        extra = {"Range": f"bytes={offset}-"} if offset else {}
        response = self.client.get_object(Bucket=self.bucket, Key=key, IfMatch=f'"{etag}"', **extra)
        stream = response["Body"]
        try:
            start = offset if response.get("ContentRange") else 0
            yield Body(start=start, chunks=stream.iter_chunks(CHUNK_SIZE))
        finally:
            stream.close()

    def failure(self, error: BaseException) -> tuple[Failure, str] | None:
        if isinstance(error, ClientError):
            return _client_error(error)
        if isinstance(error, NoCredentialsError | PartialCredentialsError):
            return Failure.UNAUTHORIZED, str(error)
        if isinstance(error, ParamValidationError):
            return Failure.INVALID, str(error)
        if isinstance(error, BotoCoreError | urllib3.exceptions.HTTPError | ConnectionError | TimeoutError):
            return Failure.TRANSIENT, f"{type(error).__name__}: {error}"
        return None


def _client_error(error: ClientError) -> tuple[Failure, str]:
    code = str(error.response.get("Error", {}).get("Code", ""))
    status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
    detail = f"HTTP {status} {code}".strip()
    if status in (412, 416) or code in ("PreconditionFailed", "InvalidRange"):
        return Failure.CHANGED, detail
    if status == 404 or code in ("NoSuchBucket", "NoSuchKey", "NotFound"):
        return Failure.NOT_FOUND, detail
    if status in (401, 403) or code in AUTH_CODES:
        return Failure.UNAUTHORIZED, detail
    if status in (408, 429) or status >= 500 or code in THROTTLE_CODES:
        return Failure.TRANSIENT, detail
    return Failure.INVALID, detail
