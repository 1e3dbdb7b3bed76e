"""Backoff arithmetic and retry decisions, progress lines, and the completion marker."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from llmaz.loader import marker
from llmaz.loader.config import Target
from llmaz.loader.errors import NotFoundError, SourceChangedError, TransientError
from llmaz.loader.progress import Snapshot, human_bytes, progress_fields
from llmaz.loader.retry import Backoff, retrying
from llmaz.loader.transfer import Listing, RemoteFile

NO_WAIT = Backoff(max_attempts=3, base=0.0, cap=0.0)


def test_backoff_doubles_up_to_the_cap_with_jitter_between_half_and_full() -> None:
    backoff = Backoff(max_attempts=9, base=1.0, cap=10.0)

    assert [backoff.delay(n, jitter=1.0) for n in (1, 2, 3, 4, 5)] == [1.0, 2.0, 4.0, 8.0, 10.0]
    assert backoff.delay(3, jitter=0.0) == 2.0


def failing(errors: list[Exception], result: str = "ok") -> tuple[list[int], Callable[[], str]]:
    calls: list[int] = []

    def operation() -> str:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return result

    return calls, operation


def test_transient_failures_are_retried_until_success() -> None:
    calls, operation = failing([TransientError("a"), TransientError("b")])

    assert retrying(operation, what="x", backoff=NO_WAIT, classify=lambda e: None) == "ok"
    assert len(calls) == 3


def test_retries_stop_after_max_attempts_without_progress() -> None:
    calls, operation = failing([TransientError("down")] * 5)

    with pytest.raises(TransientError, match="down \\(gave up after 3 attempts\\)"):
        retrying(operation, what="x", backoff=NO_WAIT, classify=lambda e: None)
    assert len(calls) == 3


def test_an_attempt_that_made_progress_resets_the_count() -> None:
    counter = iter(range(100))
    calls, operation = failing([TransientError("cut")] * 5)

    retrying(
        operation,
        what="x",
        backoff=NO_WAIT,
        classify=lambda e: None,
        progress=lambda: next(counter),
    )

    assert len(calls) == 6


@pytest.mark.parametrize("error", [NotFoundError("gone"), SourceChangedError("changed")])
def test_permanent_and_source_changed_failures_are_not_retried(error: Exception) -> None:
    calls, operation = failing([error])

    with pytest.raises(type(error)):
        retrying(operation, what="x", backoff=NO_WAIT, classify=lambda e: None)
    assert len(calls) == 1


def test_unclassified_errors_escape_unchanged() -> None:
    _calls, operation = failing([KeyError("bug")])

    with pytest.raises(KeyError):
        retrying(operation, what="x", backoff=NO_WAIT, classify=lambda e: None)


def test_progress_lines_report_rate_over_the_interval_and_eta() -> None:
    before = Snapshot(done=1000, fetched=0, total=11_000, files_done=0, files_total=2)
    after = Snapshot(done=3000, fetched=2000, total=11_000, files_done=1, files_total=2)

    fields = progress_fields(before, after, elapsed=2.0)

    assert fields["rate_bytes_per_second"] == 1000
    assert fields["eta_seconds"] == 8
    assert fields["percent"] == 27.3
    assert (fields["files_done"], fields["files_total"]) == (1, 2)


def test_a_stalled_download_has_no_eta() -> None:
    still = Snapshot(done=5, fetched=5, total=10, files_done=0, files_total=1)

    assert progress_fields(still, still, elapsed=5.0)["eta_seconds"] is None


def test_sizes_are_shown_in_binary_units() -> None:
    assert [human_bytes(n) for n in (512, 1536, 3 * 1024**3)] == ["512 B", "1.5 KiB", "3.0 GiB"]


LISTING = Listing((RemoteFile("config.json", "config.json", 2, "e1"), RemoteFile("w/a.bin", "w/a.bin", 3, "e2")), "c1")
SOURCE: dict[str, object] = {"type": "modelhub", "modelID": "a/b", "revision": "main", "allowPatterns": ["*"]}


def write_files(root: Path) -> None:
    (root / "w").mkdir(parents=True)
    (root / "config.json").write_bytes(b"{}")
    (root / "w" / "a.bin").write_bytes(b"abc")


def test_a_marker_proves_completion_only_for_the_same_source_with_every_file_present(tmp_path: Path) -> None:
    target = Target(tmp_path / "models--a--b", tmp_path / "models--a--b", single_file=False)
    write_files(target.local_dir)
    path = marker.marker_path(target)
    marker.write(path, SOURCE, LISTING)

    read = marker.read(path)

    assert read is not None
    assert read.revision == "c1"
    assert read.versions() == {"config.json": "e1", "w/a.bin": "e2"}
    assert read.satisfies(json.loads(json.dumps(SOURCE)), target.local_dir)
    assert not read.satisfies({**SOURCE, "revision": "v2"}, target.local_dir)
    (target.local_dir / "w" / "a.bin").write_bytes(b"ab")
    assert not read.satisfies(SOURCE, target.local_dir)


def test_single_file_markers_sit_next_to_their_file_and_unreadable_markers_count_as_absent(tmp_path: Path) -> None:
    target = Target(tmp_path / "q4.gguf", tmp_path, single_file=True)
    path = marker.marker_path(target)
    path.write_text("{not json")

    assert path == tmp_path / ".q4.gguf.llmaz-download.json"
    assert marker.read(path) is None
