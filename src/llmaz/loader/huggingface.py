"""Hugging Face Hub source: the file list from the model-info API, bytes from the `resolve` endpoint.

`huggingface_hub` supplies the protocol (endpoint and token handling, typed Hub errors, pattern filtering); the
bytes go through the shared resumable transfer, because the library's own downloads restart from zero whenever the
process is killed.

Invariants:
- Files are fetched at the commit the listing resolved (`info.sha`), so a branch that moves during a long download
  cannot mix two revisions, and an LFS sha256 (or git blob id) identifies each file's content.
- The token comes from `HF_TOKEN` or `HUGGING_FACE_HUB_TOKEN` only (what the controller injects from secret
  `modelhub-secret`); the endpoint from `HF_ENDPOINT` (copied from the runner), default https://huggingface.co.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx2
from huggingface_hub import HfApi, constants, get_session, hf_hub_url, hf_raise_for_status
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    RemoteEntryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoSibling
from huggingface_hub.utils._headers import build_hf_headers
from huggingface_hub.utils._paths import filter_repo_objects

import llmaz.apis.constants as c
from llmaz.loader.config import HubSource
from llmaz.loader.errors import (
    ConfigurationError,
    LoaderError,
    NotFoundError,
    TransientError,
    UnauthorizedError,
)
from llmaz.loader.transfer import CHUNK_SIZE, Body, Listing, RemoteFile

TRANSIENT_STATUSES = frozenset({408, 425, 429})
TOKEN_FIX = (
    f"create secret {c.MODELHUB_SECRET_NAME!r} with key {c.HF_TOKEN_KEY} holding a token that can read it "
    "(for gated models, also accept the model's terms on the Hub)"
)


class HuggingFaceSource:
    def __init__(self, spec: HubSource) -> None:
        self.spec = spec
        self.api = HfApi(endpoint=spec.endpoint, token=spec.token or False)
        self._commit: str | None = None

    @property
    def what(self) -> str:
        return f"Hugging Face model {self.spec.model_id!r} at {self.spec.endpoint}"

    def describe(self) -> dict[str, object]:
        return self.spec.describe()

    def list_files(self) -> Listing:
        spec = self.spec
        info = self.api.model_info(spec.model_id, revision=spec.revision, files_metadata=True)
        siblings = info.siblings or []
        if spec.filename:
            chosen = [s for s in siblings if s.rfilename == spec.filename]
            if not chosen:
                raise NotFoundError(self._no_file_message())
        else:
            chosen = list(
                filter_repo_objects(
                    siblings,
                    allow_patterns=list(spec.allow_patterns) if spec.allow_patterns else None,
                    ignore_patterns=list(spec.ignore_patterns) if spec.ignore_patterns else None,
                    key=lambda s: s.rfilename,
                )
            )
            if not chosen and not (spec.allow_patterns or spec.ignore_patterns):
                raise NotFoundError(f"{self.what} has no files at revision {spec.revision or 'main'}")
            if not chosen:
                raise NotFoundError(
                    f"no file of {self.what} (revision {spec.revision or 'main'}) matches allow patterns "
                    f"{list(spec.allow_patterns or [])} and ignore patterns {list(spec.ignore_patterns or [])}: "
                    "fix the OpenModel's spec.source.modelHub.allowPatterns / ignorePatterns"
                )
        self._commit = info.sha or spec.revision
        return Listing(tuple(self._remote_file(s) for s in chosen), revision=info.sha)

    def _remote_file(self, sibling: RepoSibling) -> RemoteFile:
        name, size = sibling.rfilename, sibling.size
        version = (sibling.lfs.sha256 if sibling.lfs is not None else None) or sibling.blob_id
        if size is None or version is None:
            raise ConfigurationError(
                f"{self.spec.endpoint} did not report the size and id of {name!r}: "
                "HF_ENDPOINT must point to a Hugging Face Hub compatible endpoint"
            )
        return RemoteFile(name=name, key=name, size=int(size), version=str(version))

    @contextmanager
    def open(self, file: RemoteFile, offset: int) -> Iterator[Body]:
        url = hf_hub_url(self.spec.model_id, file.key, revision=self._commit, endpoint=self.spec.endpoint)
        headers = build_hf_headers(token=self.spec.token or False)
        headers["Accept-Encoding"] = "identity"
        if offset:
            headers["Range"] = f"bytes={offset}-"
        timeout = constants.HF_HUB_DOWNLOAD_TIMEOUT
        with get_session().stream("GET", url, headers=headers, follow_redirects=True, timeout=timeout) as response:
            if response.status_code >= 400:
                response.read()
                hf_raise_for_status(response)
            start = offset if response.status_code == 206 else 0
            yield Body(start=start, chunks=response.iter_bytes(CHUNK_SIZE))

    def classify(self, error: BaseException) -> LoaderError | None:
        if isinstance(error, httpx2.TransportError):
            return TransientError(f"cannot reach {self.what}: {type(error).__name__}: {error}")
        if isinstance(error, HFValidationError):
            return ConfigurationError(f"{self.spec.model_id!r} is not a valid Hugging Face model ID: {error}")
        if isinstance(error, HfHubHTTPError):
            return self._classify_http(error)
        return None

    def _classify_http(self, error: HfHubHTTPError) -> LoaderError:
        status = error.response.status_code if error.response is not None else 0
        if isinstance(error, GatedRepoError) or status in (401, 403):
            return UnauthorizedError(self._unauthorized_message(status, gated=isinstance(error, GatedRepoError)))
        if isinstance(error, RevisionNotFoundError):
            return NotFoundError(
                f"{self.what} has no revision {self.spec.revision!r}: "
                "fix the OpenModel's spec.source.modelHub.revision (a branch, tag or commit)"
            )
        if isinstance(error, RemoteEntryNotFoundError):
            return NotFoundError(self._no_file_message())
        if status == 404:
            return NotFoundError(
                f"{self.what} does not exist (HTTP 404): fix the OpenModel's spec.source.modelHub.modelID"
            )
        if status in TRANSIENT_STATUSES or status >= 500:
            return TransientError(f"{self.what} answered HTTP {status}")
        return ConfigurationError(f"{self.what} rejected the request (HTTP {status}): {_first_line(error)}")

    def _unauthorized_message(self, status: int, gated: bool) -> str:
        token = "the token was rejected" if self.spec.token else "no token was provided (HF_TOKEN is not set)"
        kind = "is gated" if gated else "does not exist, or is private or gated,"
        return (
            f"{self.what} refused access (HTTP {status}): the model {kind} and {token}. Fix: check the OpenModel's "
            f"spec.source.modelHub.modelID; for a private or gated model {TOKEN_FIX}"
        )

    def _no_file_message(self) -> str:
        return (
            f"{self.what} has no file {self.spec.filename!r} at revision {self.spec.revision or 'main'}: "
            "fix the OpenModel's spec.source.modelHub.filename"
        )


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
