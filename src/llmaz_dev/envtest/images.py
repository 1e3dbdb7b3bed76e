"""The project's container images as OCI archives, built without a Docker engine by `make image-build`.

Invariants:
- `hack/images/build.sh` writes `$LLMAZ_CACHE/images/index.json`, mapping each logical name (`IMAGE_NAMES`) to
  `{"image": "<reference>", "archive": "<path of an OCI archive>"}`; a cluster imports the archive
  (`ctr -n k8s.io images import <archive>`), after which pods can run `image` with no registry.
- Nothing here builds or imports: a name missing from the index, an index that cannot be read, or an archive that
  is gone is an AssetsMissingError naming the command that provides it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from llmaz_dev.envtest._assets import AssetsMissingError, cache_root

IMAGE_NAMES = (
    "manager",
    "loader",
    "envoy",
    "pause",
    "llama-server",
    "prometheus",
    "prometheus-operator",
    "prometheus-config-reloader",
)


@dataclass(frozen=True)
class LocalImage:
    """One built image: its logical name, the reference pods use, and the OCI archive that carries it."""

    name: str
    image: str
    archive: Path


def index_path() -> Path:
    return cache_root() / "images" / "index.json"


def find_images(names: Iterable[str] = IMAGE_NAMES) -> dict[str, LocalImage]:
    """The images `names` from the index, each with its archive on disk; raise AssetsMissingError otherwise."""
    wanted = list(names)
    hint = f"run `make image-build` (hack/images/build.sh {' '.join(wanted)})"
    index = _read_index(hint)
    if index is None:
        raise AssetsMissingError(f"no image index at {index_path()}: {hint}")
    found: dict[str, LocalImage] = {}
    for name in wanted:
        image = _local_image(name, index.get(name))
        if image is None:
            raise AssetsMissingError(f"image {name!r} is not in {index_path()}: {hint}")
        if not image.archive.is_file():
            raise AssetsMissingError(f"the archive of image {name!r} ({image.archive}) is gone: {hint}")
        found[name] = image
    return found


def available_images() -> dict[str, LocalImage]:
    """Every indexed image whose archive is on disk, whatever its name; empty when nothing was built yet."""
    index = _read_index("run `make image-build` (hack/images/build.sh)")
    if index is None:
        return {}
    images = (_local_image(name, entry) for name, entry in index.items())
    return {image.name: image for image in images if image is not None and image.archive.is_file()}


def _read_index(hint: str) -> dict[str, object] | None:
    """The index as a JSON object, None when there is none; AssetsMissingError when it cannot be used."""
    path = index_path()
    try:
        index = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise AssetsMissingError(f"unreadable image index {path} ({error}): {hint}") from None
    if not isinstance(index, dict):
        raise AssetsMissingError(f"image index {path} is not a JSON object: {hint}")
    return index


def _local_image(name: str, entry: object) -> LocalImage | None:
    if not isinstance(entry, dict):
        return None
    image, archive = entry.get("image"), entry.get("archive")
    if not isinstance(image, str) or not image or not isinstance(archive, str) or not archive:
        return None
    return LocalImage(name=name, image=image, archive=Path(archive))
