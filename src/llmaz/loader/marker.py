"""The completion marker: proof that a target holds a finished download of one exact source.

A directory target keeps it inside the directory (`<dir>/.llmaz-download.json`); a single-file target next to the
file (`<parent>/.<file name>.llmaz-download.json`), so several single-file models can share `/workspace/models/`.

Invariants:
- The marker is written last, atomically (temporary file + rename), only after every file is in place; a marker on
  disk therefore always describes a complete download.
- A restarted loader skips all work, without touching the network, only when the marker's source description equals
  the current one (secrets are never part of it) and every recorded file is present with its recorded size.
- An unreadable marker counts as absent.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from llmaz.loader.config import Target
from llmaz.loader.errors import LocalStorageError
from llmaz.loader.transfer import Listing, local_path

MARKER_NAME = ".llmaz-download.json"


def marker_path(target: Target) -> Path:
    if target.single_file:
        return target.model_path.with_name(f".{target.model_path.name}{MARKER_NAME}")
    return target.model_path / MARKER_NAME


@dataclass(frozen=True)
class Marker:
    source: dict[str, object]
    revision: str | None
    files: tuple[tuple[str, int, str], ...]  # (name, size, version)
    completed_at: str

    def versions(self) -> dict[str, str]:
        return {name: version for name, _, version in self.files}

    def satisfies(self, source: dict[str, object], local_dir: Path) -> bool:
        """True when this marker proves `source` is fully present below `local_dir`."""
        if self.source != source:
            return False
        try:
            return all(_size(local_path(local_dir, name)) == size for name, size, _ in self.files)
        except Exception:
            return False


def _size(path: Path) -> int | None:
    return path.stat().st_size if path.is_file() else None


def read(path: Path) -> Marker | None:
    try:
        raw = json.loads(path.read_text())
        return Marker(
            source=dict(raw["source"]),
            revision=raw.get("revision"),
            files=tuple((str(f["name"]), int(f["size"]), str(f["version"])) for f in raw["files"]),
            completed_at=str(raw.get("completedAt", "")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write(path: Path, source: dict[str, object], listing: Listing) -> Marker:
    marker = Marker(
        source=source,
        revision=listing.revision,
        files=tuple((f.name, f.size, f.version) for f in listing.files),
        completed_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    document = {
        "source": marker.source,
        "revision": marker.revision,
        "files": [{"name": n, "size": s, "version": v} for n, s, v in marker.files],
        "completedAt": marker.completed_at,
    }
    temporary = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
        os.replace(temporary, path)
    except OSError as error:
        raise LocalStorageError(f"cannot write the completion marker {path}: {error.strerror or error}") from error
    return marker
