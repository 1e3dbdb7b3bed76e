"""Reading the index of images hack/images/build.sh built, without building anything."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from llmaz_dev.envtest import AssetsMissingError
from llmaz_dev.envtest.images import IMAGE_NAMES, LocalImage, available_images, find_images, index_path


@pytest.fixture
def images_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLMAZ_CACHE", str(tmp_path / "cache"))
    directory = tmp_path / "cache" / "images"
    directory.mkdir(parents=True)
    return directory


def write_index(images_dir: Path, entries: dict[str, str], *, archives: bool = True) -> None:
    """An index as build.sh writes it: `name -> reference`, each archive named after the reference's tag."""
    index = {}
    for name, image in entries.items():
        archive = images_dir / f"{name}-{image.rsplit(':', 1)[1]}.oci.tar"
        if archives:
            archive.write_bytes(b"oci")
        index[name] = {"image": image, "archive": str(archive)}
    (images_dir / "index.json").write_text(json.dumps(index))


def test_every_name_resolves_to_its_image_and_archive(images_dir: Path) -> None:
    refs = {
        "manager": "llmaz.local/llmaz:0123456789ab",
        "loader": "llmaz.local/model-loader:ba9876543210",
        "envoy": "llmaz.local/envoy:5a5a5a5a5a5a",
        "pause": "llmaz.local/pause:abcdefabcdef",
        "llama-server": "llmaz.local/llama-server:0.3.36",
        "prometheus": "llmaz.local/prometheus:v2.42.0",
        "prometheus-operator": "llmaz.local/prometheus-operator:v0.85.0",
        "prometheus-config-reloader": "llmaz.local/prometheus-config-reloader:v0.85.0",
    }
    write_index(images_dir, refs)

    found = find_images()

    assert index_path() == images_dir / "index.json"
    assert set(found) == set(IMAGE_NAMES)
    assert found["manager"] == LocalImage(
        name="manager", image=refs["manager"], archive=images_dir / "manager-0123456789ab.oci.tar"
    )
    assert found["llama-server"].image == "llmaz.local/llama-server:0.3.36"


def test_only_the_names_asked_for_are_needed(images_dir: Path) -> None:
    write_index(images_dir, {"pause": "llmaz.local/pause:abcdefabcdef"})

    assert list(find_images(["pause"])) == ["pause"]
    with pytest.raises(AssetsMissingError, match=r"image 'manager' is not in .*index\.json.*make image-build"):
        find_images(["pause", "manager"])


def test_a_missing_index_names_the_build_command(images_dir: Path) -> None:
    with pytest.raises(AssetsMissingError) as raised:
        find_images(["manager", "pause"])

    message = str(raised.value)
    assert str(images_dir / "index.json") in message
    assert "`make image-build` (hack/images/build.sh manager pause)" in message


def test_a_deleted_archive_is_missing_too(images_dir: Path) -> None:
    write_index(images_dir, {"manager": "llmaz.local/llmaz:0123456789ab"}, archives=False)

    with pytest.raises(AssetsMissingError, match=r"archive of image 'manager' .*manager-0123456789ab\.oci\.tar.* gone"):
        find_images(["manager"])


@pytest.mark.parametrize("content", ["{not json", "[]", '{"manager": "llmaz.local/llmaz:x"}', '{"manager": {}}'])
def test_a_malformed_index_is_reported_not_raised_as_a_type_error(images_dir: Path, content: str) -> None:
    (images_dir / "index.json").write_text(content)

    with pytest.raises(AssetsMissingError, match="make image-build"):
        find_images(["manager"])


def test_available_images_are_those_with_an_archive_and_none_before_a_build(images_dir: Path) -> None:
    assert available_images() == {}

    write_index(images_dir, {"pause": "llmaz.local/pause:abcdefabcdef", "manager": "llmaz.local/llmaz:0123456789ab"})
    (images_dir / "manager-0123456789ab.oci.tar").unlink()

    assert list(available_images()) == ["pause"]


def test_the_build_script_builds_exactly_these_names() -> None:
    script = Path(__file__).resolve().parents[3] / "hack" / "images" / "build.sh"
    usage = subprocess.run([script, "--no-such-image"], capture_output=True, text=True, check=False)

    assert usage.returncode == 2
    assert f"[{'|'.join(IMAGE_NAMES)}|all]" in usage.stderr
