"""Resumable parallel downloads, against an in-memory source.

`MemorySource` is a fake of the loader's own `FileSource` protocol (no network library is faked): it serves byte
ranges of in-memory files, records the offsets asked for, and can be told to ignore ranges, cut a body short, send
extra bytes or fail permanently.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from llmaz.loader.errors import (
    ConfigurationError,
    LoaderError,
    NotFoundError,
    SourceChangedError,
    TransientError,
)
from llmaz.loader.progress import Progress
from llmaz.loader.retry import Backoff
from llmaz.loader.transfer import Body, Listing, RemoteFile, download_all, local_path

NO_WAIT = Backoff(max_attempts=3, base=0.0, cap=0.0)


class MemorySource:
    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.offsets: list[tuple[str, int]] = []
        self.ignore_ranges = False
        self.cut_after: int | None = None  # bytes served before the body ends early, once
        self.always_cut_after: int | None = None  # the same, on every request
        self.extra = b""
        self.missing: set[str] = set()

    def listing(self, version: str = "v1") -> Listing:
        return Listing(tuple(RemoteFile(n, n, len(d), version) for n, d in sorted(self.files.items())))

    def describe(self) -> dict[str, object]:
        return {"type": "memory"}

    def list_files(self) -> Listing:
        return self.listing()

    @contextmanager
    def open(self, file: RemoteFile, offset: int) -> Iterator[Body]:
        self.offsets.append((file.name, offset))
        if file.name in self.missing:
            raise NotFoundError(f"{file.name} is gone")
        start = 0 if self.ignore_ranges else offset
        data = self.files[file.name][start:] + self.extra
        if self.cut_after is not None:
            data, self.cut_after = data[: self.cut_after], None
        if self.always_cut_after is not None:
            data = data[: self.always_cut_after]
        yield Body(start=start, chunks=iter([data[i : i + 1000] for i in range(0, len(data), 1000)]))

    def classify(self, error: BaseException) -> LoaderError | None:
        return None


def download(source: MemorySource, root: Path, listing: Listing | None = None, **kwargs: object) -> Progress:
    listing = listing or source.listing()
    progress = Progress(listing.total_bytes, len(listing.files))
    download_all(source, listing, root, progress, NO_WAIT, 2, kwargs.pop("versions", {}))  # type: ignore[arg-type]
    return progress


def write_partial(root: Path, name: str, data: bytes, version: str = "v1", size: int = 0) -> None:
    (root / f"{name}.partial").write_bytes(data)
    (root / f"{name}.partial.json").write_text(json.dumps({"version": version, "size": size}))


FILES = {"a.bin": bytes(range(256)) * 40, "sub/dir/b.txt": b"hello" * 300, "c.json": b"{}"}


def test_every_file_lands_at_its_relative_path_and_no_partials_remain(tmp_path: Path) -> None:
    progress = download(MemorySource(FILES), tmp_path)

    assert {p.relative_to(tmp_path).as_posix(): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == FILES
    assert progress.snapshot().fetched == sum(map(len, FILES.values()))


def test_a_partial_of_the_same_version_resumes_at_its_size(tmp_path: Path) -> None:
    source = MemorySource({"a.bin": FILES["a.bin"]})
    write_partial(tmp_path, "a.bin", FILES["a.bin"][:4000], size=len(FILES["a.bin"]))

    progress = download(source, tmp_path)

    assert source.offsets == [("a.bin", 4000)]
    assert (tmp_path / "a.bin").read_bytes() == FILES["a.bin"]
    assert progress.snapshot().fetched == len(FILES["a.bin"]) - 4000


def test_a_partial_of_another_version_restarts_from_zero(tmp_path: Path) -> None:
    source = MemorySource({"a.bin": FILES["a.bin"]})
    write_partial(tmp_path, "a.bin", b"\xff" * 4000, version="old", size=len(FILES["a.bin"]))

    download(source, tmp_path)

    assert source.offsets == [("a.bin", 0)]
    assert (tmp_path / "a.bin").read_bytes() == FILES["a.bin"]


def test_a_source_that_ignores_the_range_overwrites_from_byte_zero(tmp_path: Path) -> None:
    source = MemorySource({"a.bin": FILES["a.bin"]})
    source.ignore_ranges = True
    write_partial(tmp_path, "a.bin", FILES["a.bin"][:4000], size=len(FILES["a.bin"]))

    progress = download(source, tmp_path)

    assert (tmp_path / "a.bin").read_bytes() == FILES["a.bin"]
    assert progress.snapshot().done == len(FILES["a.bin"])


def test_a_source_that_keeps_restarting_from_zero_and_cutting_off_runs_out_of_attempts(tmp_path: Path) -> None:
    source = MemorySource({"a.bin": FILES["a.bin"]})
    source.ignore_ranges = True
    source.always_cut_after = 3000
    write_partial(tmp_path, "a.bin", FILES["a.bin"][:3000], size=len(FILES["a.bin"]))

    with pytest.raises(TransientError, match="gave up after 3 attempts"):
        download(source, tmp_path)


def test_a_body_that_ends_early_is_retried_from_where_it_stopped(tmp_path: Path) -> None:
    source = MemorySource({"a.bin": FILES["a.bin"]})
    source.cut_after = 3000

    download(source, tmp_path)

    assert source.offsets == [("a.bin", 0), ("a.bin", 3000)]
    assert (tmp_path / "a.bin").read_bytes() == FILES["a.bin"]


def test_a_body_longer_than_listed_means_the_source_changed_and_never_becomes_the_final_file(tmp_path: Path) -> None:
    source = MemorySource({"a.bin": FILES["a.bin"]})
    source.extra = b"trailing"

    with pytest.raises(SourceChangedError, match=f"more than the listed {len(FILES['a.bin'])} bytes"):
        download(source, tmp_path)

    assert not (tmp_path / "a.bin").exists()
    assert source.offsets == [("a.bin", 0)]


def test_an_existing_file_of_the_listed_size_is_kept_without_a_request(tmp_path: Path) -> None:
    source = MemorySource({"c.json": b"{}"})
    (tmp_path / "c.json").write_bytes(b"[]")

    download(source, tmp_path)

    assert source.offsets == []
    assert (tmp_path / "c.json").read_bytes() == b"[]"


def test_an_existing_file_recorded_with_another_version_is_downloaded_again(tmp_path: Path) -> None:
    source = MemorySource({"c.json": b"{}"})
    (tmp_path / "c.json").write_bytes(b"[]")

    download(source, tmp_path, versions={"c.json": "v0"})

    assert (tmp_path / "c.json").read_bytes() == b"{}"


def test_a_permanent_failure_is_raised_without_retrying(tmp_path: Path) -> None:
    source = MemorySource({"a.bin": FILES["a.bin"], "c.json": b"{}"})
    source.missing = {"a.bin"}

    with pytest.raises(NotFoundError, match=r"a\.bin is gone"):
        download(source, tmp_path)

    assert source.offsets.count(("a.bin", 0)) == 1


@pytest.mark.parametrize("name", ["../escape", "/etc/passwd", "a/../../b", ""])
def test_names_that_would_leave_the_target_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigurationError):
        local_path(tmp_path, name)
