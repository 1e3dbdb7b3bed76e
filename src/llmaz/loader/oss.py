"""Alibaba Cloud OSS client through oss2.

Credentials come from `OSS_ACCESS_KEY_ID` / `OSS_ACCESS_KEY_SECRET` (secret `oss-access-secret`, injected by the
controller), with `OSS_SESSION_TOKEN` for STS credentials; without them requests are anonymous (public buckets).
The endpoint is `ENDPOINT` (the part after the bucket in `oss://<bucket>.<endpoint>/<path>`); a bare host name is
reached over `OBJSTORE_ENDPOINT_SCHEME`, default https.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

import oss2  # type: ignore[import-untyped]
import requests
import urllib3.exceptions

import llmaz.apis.constants as c
from llmaz.loader.config import ObjectStoreSource
from llmaz.loader.objstore import Failure, ObjectInfo, endpoint_url
from llmaz.loader.transfer import CHUNK_SIZE, Body


def make_client(spec: ObjectStoreSource, env: Mapping[str, str]) -> OssClient:
    key_id, secret = env.get(c.OSS_ACCESS_KEY_ID, ""), env.get(c.OSS_ACCESS_KEY_SECRET, "")
    token = env.get("OSS_SESSION_TOKEN", "")
    if key_id and secret:
        auth = oss2.StsAuth(key_id, secret, token) if token else oss2.Auth(key_id, secret)
    else:
        auth = oss2.AnonymousAuth()
    bucket = oss2.Bucket(auth, endpoint_url(spec.endpoint or "", env), spec.bucket, connect_timeout=30)
    return OssClient(bucket)


class OssClient:
    def __init__(self, bucket: oss2.Bucket) -> None:
        self.bucket = bucket

    def head(self, key: str) -> ObjectInfo:
        response = self.bucket.head_object(key)
        return ObjectInfo(key=key, size=int(response.content_length), etag=str(response.etag).strip('"'))

    def list(self, prefix: str) -> Iterable[ObjectInfo]:
        for item in oss2.ObjectIteratorV2(self.bucket, prefix=prefix):
            yield ObjectInfo(key=item.key, size=int(item.size), etag=str(item.etag).strip('"'))

    @contextmanager
    def get(self, key: str, offset: int, etag: str) -> Iterator[Body]:
        byte_range = (offset, None) if offset else None
        result = self.bucket.get_object(key, byte_range=byte_range, headers={"If-Match": f'"{etag}"'})
        try:
            start = offset if result.content_range else 0
            yield Body(start=start, chunks=iter(lambda: bytes(result.read(CHUNK_SIZE)), b""))
        finally:
            result.close()

    def failure(self, error: BaseException) -> tuple[Failure, str] | None:
        if isinstance(error, oss2.exceptions.RequestError | oss2.exceptions.InconsistentError):
            return Failure.TRANSIENT, f"{type(error).__name__}: {getattr(error, 'body', error)}"
        if isinstance(error, oss2.exceptions.OssError):
            return _status_failure(int(error.status), f"HTTP {error.status} {error.code}".strip())
        if isinstance(error, requests.RequestException | urllib3.exceptions.HTTPError | ConnectionError):
            return Failure.TRANSIENT, f"{type(error).__name__}: {error}"
        return None


def _status_failure(status: int, detail: str) -> tuple[Failure, str]:
    if status in (412, 416):
        return Failure.CHANGED, detail
    if status == 404:
        return Failure.NOT_FOUND, detail
    if status in (401, 403):
        return Failure.UNAUTHORIZED, detail
    if status in (408, 429) or status >= 500:
        return Failure.TRANSIENT, detail
    return Failure.INVALID, detail
