"""One load, start to finish: pick the source, skip finished work, list, download, record completion.

Invariants:
- A target whose completion marker matches the configured source is left alone: no listing, no network.
- The marker is written only after every file is in place (see `marker`), and the summary line follows it.
- Libraries for a source are imported only when that source is used, so a missing optional library is a
  configuration error naming the image to use, not an import crash.
"""

from __future__ import annotations

import importlib
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import llmaz.apis.constants as c
from llmaz.loader import marker
from llmaz.loader.config import HubSource, LoaderConfig, Target
from llmaz.loader.errors import ConfigurationError, LocalStorageError, SourceChangedError
from llmaz.loader.log import get_logger
from llmaz.loader.modelscope import ModelScopeSource
from llmaz.loader.progress import Progress, human_bytes, reporting
from llmaz.loader.retry import Backoff, retrying
from llmaz.loader.transfer import FileSource, Listing, download_all, local_path

MAX_LISTINGS = 3
MISSING_EXTRA = "the loader image lacks the {module!r} library: install llmaz with the 'loader' extra"


def _import(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as error:
        if error.name is not None and error.name.split(".")[0] == "llmaz":
            raise
        raise ConfigurationError(MISSING_EXTRA.format(module=error.name or module)) from None


def make_source(config: LoaderConfig, env: Mapping[str, str]) -> FileSource | ModelScopeSource:
    spec = config.source
    if isinstance(spec, HubSource):
        if spec.hub == c.MODEL_SCOPE:
            return ModelScopeSource(spec)
        return cast(FileSource, _import("llmaz.loader.huggingface").HuggingFaceSource(spec))
    objstore = _import("llmaz.loader.objstore")
    client_module = _import("llmaz.loader.oss" if spec.provider == c.OSS else "llmaz.loader.s3")
    return cast(FileSource, objstore.ObjectStoreFiles(spec, config.target, client_module.make_client(spec, env)))


def load(config: LoaderConfig, env: Mapping[str, str]) -> None:
    log = get_logger().bind(target=str(config.target.model_path))
    source = make_source(config, env)
    description = source.describe()
    marker_file = marker.marker_path(config.target)
    previous = marker.read(marker_file)
    if previous is not None and previous.satisfies(description, config.target.local_dir):
        log.info("load.already_complete", completed_at=previous.completed_at, files=len(previous.files))
        return
    started = time.monotonic()
    if isinstance(source, ModelScopeSource):
        listing, fetched = _delegated(source, config), None
    else:
        listing, progress = _download(source, config, previous.versions() if previous else {})
        fetched = progress.snapshot().fetched
    marker.write(marker_file, description, listing)
    seconds = time.monotonic() - started
    log.info(
        "load.complete",
        files=len(listing.files),
        bytes_total=listing.total_bytes,
        size=human_bytes(listing.total_bytes),
        bytes_fetched=fetched,
        seconds=round(seconds, 2),
        average_rate=human_bytes((fetched or 0) / seconds if seconds > 0 else 0) + "/s",
        revision=listing.revision,
    )


def _backoff(config: LoaderConfig) -> Backoff:
    t = config.tuning
    return Backoff(t.max_attempts, t.retry_base_seconds, t.retry_max_seconds)


def _delegated(source: ModelScopeSource, config: LoaderConfig) -> Listing:
    return retrying(
        lambda: source.download(config.target), what="download", backoff=_backoff(config), classify=source.classify
    )


def _download(source: FileSource, config: LoaderConfig, versions: Mapping[str, str]) -> tuple[Listing, Progress]:
    log = get_logger()
    for round_number in range(1, MAX_LISTINGS + 1):
        listing = retrying(source.list_files, what="listing", backoff=_backoff(config), classify=source.classify)
        _check_single_file(listing, config.target)
        log.info(
            "download.start",
            files=len(listing.files),
            bytes_total=listing.total_bytes,
            size=human_bytes(listing.total_bytes),
            revision=listing.revision,
        )
        progress = Progress(listing.total_bytes, len(listing.files))
        try:
            with reporting(progress, config.tuning.progress_interval_seconds):
                download_all(
                    source,
                    listing,
                    config.target.local_dir,
                    progress,
                    _backoff(config),
                    config.tuning.concurrency,
                    versions,
                    check_space=_check_space,
                )
            return listing, progress
        except SourceChangedError as error:
            if round_number == MAX_LISTINGS:
                raise
            log.warning("download.source_changed", message=error.message)
    raise AssertionError("unreachable")


def _check_single_file(listing: Listing, target: Target) -> None:
    if not target.single_file:
        return
    if len(listing.files) != 1 or local_path(target.local_dir, listing.files[0].name) != target.model_path:
        raise ConfigurationError(f"the source listed {len(listing.files)} files for single-file target {target}")


def _check_space(directory: Path, needed: int) -> None:
    """Fail before downloading when the volume cannot hold what is still missing."""
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < needed:
        raise LocalStorageError(
            f"{directory} has {human_bytes(free)} free but the model needs {human_bytes(needed)} more: "
            "give the pod more ephemeral storage (or a larger model volume)"
        )
