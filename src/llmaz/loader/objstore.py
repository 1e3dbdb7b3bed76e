"""Object-store sources (OSS, S3, GCS): one listing rule and one error vocabulary over per-provider clients.

Invariants:
- A single-file target (the shared path rule says the path names a weight file) is one object, `MODEL_PATH`; any
  other target is the directory `MODEL_PATH/`, downloaded recursively with the key below the prefix as the relative
  path. Keys ending in `/` (folder placeholders) are skipped.
- Every ranged read is conditional on the listed ETag, so an object replaced mid-download is detected
  (`SourceChangedError`) instead of producing a file spliced from two versions.
- Provider clients only translate their library's errors into a `Failure` kind plus a short detail; the messages
  that name the model, the source and the fix are built here.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

import llmaz.apis.constants as c
from llmaz.loader.config import ObjectStoreSource, Target
from llmaz.loader.errors import (
    ConfigurationError,
    LoaderError,
    NotFoundError,
    SourceChangedError,
    TransientError,
    UnauthorizedError,
)
from llmaz.loader.transfer import Body, Listing, RemoteFile

ENDPOINT_SCHEME_ENV = "OBJSTORE_ENDPOINT_SCHEME"


class Failure(enum.Enum):
    NOT_FOUND = "not found"
    UNAUTHORIZED = "unauthorized"
    TRANSIENT = "transient"
    CHANGED = "changed"
    INVALID = "invalid"


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    etag: str


class StoreClient(Protocol):
    def head(self, key: str) -> ObjectInfo: ...

    def list(self, prefix: str) -> Iterable[ObjectInfo]: ...

    def get(self, key: str, offset: int, etag: str) -> AbstractContextManager[Body]: ...

    def failure(self, error: BaseException) -> tuple[Failure, str] | None: ...


def endpoint_url(endpoint: str, env: Mapping[str, str]) -> str:
    """An endpoint with a scheme; bare host names get `OBJSTORE_ENDPOINT_SCHEME` (default https)."""
    if "://" in endpoint:
        return endpoint.rstrip("/")
    scheme = env.get(ENDPOINT_SCHEME_ENV, "").strip() or "https"
    return f"{scheme}://{endpoint.rstrip('/')}"


def credentials_fix(provider: str) -> str:
    if provider == c.OSS:
        secret, keys = c.OSS_SECRET_NAME, f"{c.OSS_ACCESS_KEY_ID} and {c.OSS_ACCESS_KEY_SECRET}"
    else:
        secret, keys = c.AWS_SECRET_NAME, f"{c.AWS_ACCESS_KEY_ID} and {c.AWS_SECRET_ACCESS_KEY}"
    hmac = " (for GCS: an HMAC key of a service account that can read the bucket)" if provider == c.GCS else ""
    return f"create secret {secret!r} with keys {keys}{hmac} in the Playground's namespace"


class ObjectStoreFiles:
    """A `FileSource` over any `StoreClient`."""

    def __init__(self, spec: ObjectStoreSource, target: Target, client: StoreClient) -> None:
        self.spec = spec
        self.target = target
        self.client = client

    @property
    def what(self) -> str:
        endpoint = f" at {self.spec.endpoint}" if self.spec.endpoint else ""
        return f"{self.spec.provider} model {self.spec.uri}{endpoint}"

    def describe(self) -> dict[str, object]:
        return self.spec.describe()

    def list_files(self) -> Listing:
        if self.target.single_file:
            info = self.client.head(self.spec.path)
            name = self.target.model_path.relative_to(self.target.local_dir).as_posix()
            return Listing((RemoteFile(name=name, key=info.key, size=info.size, version=info.etag),))
        prefix = self.spec.path + "/"
        files = tuple(
            RemoteFile(name=info.key[len(prefix) :], key=info.key, size=info.size, version=info.etag)
            for info in self.client.list(prefix)
            if info.key.startswith(prefix) and len(info.key) > len(prefix) and not info.key.endswith("/")
        )
        if not files:
            raise NotFoundError(
                f"{self.what}: no objects under {prefix!r} in bucket {self.spec.bucket!r}. A path is loaded as a "
                "single file only when its last segment ends with a weight-file extension (such as .gguf or "
                ".safetensors); otherwise it is a directory. Fix the OpenModel's spec.source.uri"
            )
        return Listing(tuple(sorted(files, key=lambda f: f.name)))

    def open(self, file: RemoteFile, offset: int) -> AbstractContextManager[Body]:
        return self.client.get(file.key, offset, file.version)

    def classify(self, error: BaseException) -> LoaderError | None:
        found = self.client.failure(error)
        if found is None:
            return None
        kind, detail = found
        if kind is Failure.NOT_FOUND:
            return NotFoundError(f"{self.what} does not exist ({detail}): fix the OpenModel's spec.source.uri")
        if kind is Failure.UNAUTHORIZED:
            return UnauthorizedError(
                f"{self.what}: access denied ({detail}). Fix: {credentials_fix(self.spec.provider)}"
            )
        if kind is Failure.CHANGED:
            return SourceChangedError(f"{self.what} changed during the download ({detail}); listing it again")
        if kind is Failure.TRANSIENT:
            return TransientError(f"{self.what}: {detail}")
        return ConfigurationError(f"{self.what}: the request was rejected ({detail}); check the OpenModel's uri")
