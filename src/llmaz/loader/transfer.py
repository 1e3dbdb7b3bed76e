"""Resumable, parallel file downloads from any source that can list files and serve a byte range.

Invariants:
- A final path only ever holds a complete file: bytes go to `<path>.partial` and are renamed into place once the
  listed size is reached. `<path>.partial.json` records which version (ETag, LFS sha256, blob id) and size the
  partial bytes belong to; a partial of another version restarts from byte 0, never mixes two versions.
- A restarted download asks for `bytes=<partial size>-`. A source that ignores the range (answers from byte 0) is
  handled by the `Body.start` it reports: the partial is truncated to that offset first.
- An existing final file is kept when its size matches the listing and the previous completion marker (if any)
  does not record a different version for it; see docs/model-loader.md for why size is enough here.
- Local write failures are `LocalStorageError`s; network failures are classified by the source.
- The first permanent failure stops every other worker at its next chunk or retry point.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol

from llmaz.loader.errors import (
    ConfigurationError,
    LoaderError,
    LocalStorageError,
    SourceChangedError,
    TransientError,
)
from llmaz.loader.progress import Progress
from llmaz.loader.retry import Backoff, DownloadCancelledError, retrying

CHUNK_SIZE = 256 * 1024
PARTIAL_SUFFIX = ".partial"
PARTIAL_META_SUFFIX = ".partial.json"


@dataclass(frozen=True)
class RemoteFile:
    """One file to download: `name` is its path below the local directory, `key` its name at the source."""

    name: str
    key: str
    size: int
    version: str


@dataclass(frozen=True)
class Listing:
    files: tuple[RemoteFile, ...]
    revision: str | None = None

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass
class Body:
    """A response body: `chunks` are the file's bytes from offset `start` on."""

    start: int
    chunks: Iterator[bytes]


class FileSource(Protocol):
    """What a source must offer for the shared resumable download."""

    def describe(self) -> dict[str, object]: ...

    def list_files(self) -> Listing: ...

    def open(self, file: RemoteFile, offset: int) -> AbstractContextManager[Body]: ...

    def classify(self, error: BaseException) -> LoaderError | None: ...


def local_path(local_dir: Path, name: str) -> Path:
    """`local_dir/name`, refusing names that would escape `local_dir` (absolute, `..`)."""
    relative = PurePosixPath(name)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise ConfigurationError(f"refusing to write {name!r}: it is not a plain relative path")
    return local_dir.joinpath(*relative.parts)


def _storage(action: str, path: Path, error: OSError) -> LocalStorageError:
    return LocalStorageError(
        f"cannot {action} {path}: {error.strerror or error} (is the model volume full or read-only?)"
    )


class PartialFile:
    """The on-disk state of one unfinished download."""

    def __init__(self, dest: Path, file: RemoteFile) -> None:
        self.dest = dest
        self.file = file
        self.data = dest.with_name(dest.name + PARTIAL_SUFFIX)
        self.meta = dest.with_name(dest.name + PARTIAL_META_SUFFIX)

    def resume_offset(self) -> int:
        """Bytes already on disk for this exact version; anything else is discarded first."""
        expected = {"version": self.file.version, "size": self.file.size}
        try:
            recorded = json.loads(self.meta.read_text()) if self.meta.is_file() else None
            size = self.data.stat().st_size if self.data.is_file() else 0
            if recorded == expected and size <= self.file.size:
                return size
            self.dest.parent.mkdir(parents=True, exist_ok=True)
            self.meta.write_text(json.dumps(expected))
            self.data.write_bytes(b"")
        except (OSError, ValueError) as error:
            if isinstance(error, OSError):
                raise _storage("prepare", self.data, error) from error
            self.meta.unlink(missing_ok=True)
            return self.resume_offset()
        return 0

    def finish(self) -> None:
        try:
            os.replace(self.data, self.dest)
            self.meta.unlink(missing_ok=True)
        except OSError as error:
            raise _storage("move into place", self.dest, error) from error


def fetch_file(source: FileSource, partial: PartialFile, progress: Progress, stop: threading.Event) -> None:
    """One attempt: append the missing bytes to the partial file, then move it into place when complete."""
    file = partial.file
    offset = partial.resume_offset()
    if offset < file.size:
        with source.open(file, offset) as body:
            position = _write_body(partial, body, offset, progress, stop)
        if position < file.size:
            raise TransientError(f"{file.name}: the connection ended after {position} of {file.size} bytes")
    partial.finish()


def _write_body(partial: PartialFile, body: Body, offset: int, progress: Progress, stop: threading.Event) -> int:
    size = partial.file.size
    try:
        out = partial.data.open("r+b")
    except OSError as error:
        raise _storage("open", partial.data, error) from error
    with out:
        if body.start < offset:
            progress.discarded(offset - body.start)
        position = body.start
        try:
            out.seek(position)
            out.truncate()
        except OSError as error:
            raise _storage("truncate", partial.data, error) from error
        for chunk in body.chunks:
            if stop.is_set():
                raise DownloadCancelledError(partial.file.name)
            if position + len(chunk) > size:
                partial.meta.unlink(missing_ok=True)
                progress.discarded(position)
                raise SourceChangedError(f"{partial.file.name}: the source sent more than the listed {size} bytes")
            try:
                out.write(chunk)
            except OSError as error:
                raise _storage("write", partial.data, error) from error
            position += len(chunk)
            progress.fetched(len(chunk))
    return position


def already_complete(dest: Path, file: RemoteFile, previous_versions: Mapping[str, str]) -> bool:
    """Whether a final file from an earlier run can be kept (see the module invariants)."""
    if previous_versions.get(file.name, file.version) != file.version:
        return False
    try:
        return dest.is_file() and dest.stat().st_size == file.size
    except OSError:
        return False


def download_all(
    source: FileSource,
    listing: Listing,
    local_dir: Path,
    progress: Progress,
    backoff: Backoff,
    concurrency: int,
    previous_versions: Mapping[str, str],
    check_space: Callable[[Path, int], None] | None = None,
) -> None:
    """Download every listed file below `local_dir`, `concurrency` at a time; raises the first `LoaderError`.

    `check_space(local_dir, bytes_missing)` runs once, before any request, and may raise.
    """
    stop = threading.Event()
    pending: list[PartialFile] = []
    for file in listing.files:
        dest = local_path(local_dir, file.name)
        if already_complete(dest, file, previous_versions):
            progress.resumed(file.size)
            progress.file_done()
        else:
            pending.append(PartialFile(dest, file))
    for partial in pending:
        progress.resumed(_partial_bytes(partial))
    if check_space is not None:
        check_space(local_dir, listing.total_bytes - progress.snapshot().done)

    def one(partial: PartialFile) -> None:
        if stop.is_set():
            raise DownloadCancelledError(partial.file.name)
        retrying(
            lambda: fetch_file(source, partial, progress, stop),
            what=partial.file.name,
            backoff=backoff,
            classify=source.classify,
            progress=lambda: progress.snapshot().done,
            stop=stop,
        )
        progress.file_done()

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="download") as pool:
        futures = [pool.submit(one, partial) for partial in pending]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        if any(f.exception() for f in done):
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
    _raise_first_failure([f.exception() for f in futures if not f.cancelled()])


def _partial_bytes(partial: PartialFile) -> int:
    """Bytes a valid partial already holds, counted as done up front so percentages start where they left off."""
    try:
        recorded = json.loads(partial.meta.read_text())
        size = partial.data.stat().st_size
    except (OSError, ValueError):
        return 0
    valid = recorded == {"version": partial.file.version, "size": partial.file.size} and size <= partial.file.size
    return size if valid else 0


def _raise_first_failure(errors: list[BaseException | None]) -> None:
    real = [e for e in errors if e is not None and not isinstance(e, DownloadCancelledError)]
    if real:
        raise real[0]
