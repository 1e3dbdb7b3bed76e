"""ModelScope source, delegated to the `modelscope` library (optional extra `llmaz[modelscope]`).

ModelScope's own `snapshot_download` lists, filters and resumes; this module only selects what to download, maps
its errors onto the loader's classes, and lists what landed on disk for the completion marker. Byte-level progress
lines are not available for this hub.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmaz.loader.config import HubSource, Target
from llmaz.loader.errors import (
    ConfigurationError,
    LoaderError,
    NotFoundError,
    TransientError,
    UnauthorizedError,
)
from llmaz.loader.transfer import Listing, RemoteFile

MISSING_LIBRARY = (
    "MODEL_HUB_NAME=ModelScope needs the 'modelscope' library, which this loader image does not include: build the "
    "image with the 'modelscope' extra (docker build --build-arg EXTRAS=loader,modelscope -f Dockerfile.loader .)"
)


class ModelScopeSource:
    def __init__(self, spec: HubSource, snapshot_download: Callable[..., Any] | None = None) -> None:
        self.spec = spec
        self._snapshot_download = snapshot_download

    @property
    def what(self) -> str:
        return f"ModelScope model {self.spec.model_id!r}"

    def describe(self) -> dict[str, object]:
        described = self.spec.describe()
        described.pop("endpoint", None)
        return described

    def _downloader(self) -> Callable[..., Any]:
        if self._snapshot_download is None:
            try:
                module = importlib.import_module("modelscope")
            except ImportError:
                raise ConfigurationError(MISSING_LIBRARY) from None
            self._snapshot_download = module.snapshot_download
        return self._snapshot_download

    def download(self, target: Target) -> Listing:
        """Download into `target.local_dir`; a filename narrows the download to that one file."""
        spec = self.spec
        allow = [spec.filename] if spec.filename else list(spec.allow_patterns or []) or None
        self._downloader()(
            spec.model_id,
            revision=spec.revision,
            local_dir=str(target.local_dir),
            allow_patterns=allow,
            ignore_patterns=list(spec.ignore_patterns or []) or None,
        )
        if target.single_file:
            if not target.model_path.is_file():
                raise NotFoundError(f"{self.what} has no file {spec.filename!r}: fix spec.source.modelHub.filename")
            return Listing((_on_disk(target.model_path, target.local_dir),), revision=spec.revision)
        files = sorted(p for p in target.local_dir.rglob("*") if p.is_file() and not _hidden(p, target.local_dir))
        return Listing(tuple(_on_disk(p, target.local_dir) for p in files), revision=spec.revision)

    def classify(self, error: BaseException) -> LoaderError | None:
        name = type(error).__name__
        status = getattr(getattr(error, "response", None), "status_code", None)
        if name in ("NotExistError", "FileNotFoundError") or status == 404:
            return NotFoundError(f"{self.what} does not exist ({name}): fix the OpenModel's spec.source.modelHub")
        if name == "NotLoginException" or status in (401, 403):
            return UnauthorizedError(f"{self.what} refused access ({name} {status or ''}): the model is private")
        if status is not None and (status >= 500 or status == 429):
            return TransientError(f"{self.what}: HTTP {status}")
        if name in ("ConnectionError", "Timeout", "ReadTimeout", "ConnectTimeout", "ChunkedEncodingError"):
            return TransientError(f"cannot reach {self.what}: {name}: {error}")
        return None


def _hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def _on_disk(path: Path, root: Path) -> RemoteFile:
    name = path.relative_to(root).as_posix()
    return RemoteFile(name=name, key=name, size=path.stat().st_size, version="")
