"""hack/node/install-packages.sh against this host's apt: a pinned version that left the mirror, and stale pins.

Each case writes its own package list for `hello` (GNU hello: small, no daemon, nothing depends on it) and runs the
script as `make` does. The fallback case really installs hello, as root, and it is purged before and after.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "node" / "install-packages.sh"
PACKAGE = "hello"
GONE = "0.1-0~gone"  # older than any hello Debian ships, and never on a mirror


def same_release_origins() -> str:
    """A regular expression for the origins of a candidate from Debian's release of this host (its suites)."""
    origin = f"Debian/{re.escape(host_release())}(-updates|-security)?"
    return f"{origin}(,{origin})*"


def run_script(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=900, check=False)


def host_release() -> str:
    fields = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    return fields["VERSION_CODENAME"].strip('"')


def installed_version() -> str | None:
    query = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status} ${Version}", PACKAGE], capture_output=True, text=True, check=False
    )
    status, _, version = query.stdout.rpartition(" ")
    return version if status == "install ok installed" else None


def candidate() -> str:
    policy = subprocess.run(
        ["apt-cache", "policy", PACKAGE], capture_output=True, text=True, check=True, env={**os.environ, "LC_ALL": "C"}
    )
    return next(line.split()[1] for line in policy.stdout.splitlines() if line.strip().startswith("Candidate:"))


def write_list(path: Path, release: str, version: str) -> Path:
    path.write_text(f"# written by {__name__}\nrelease: {release}\n{PACKAGE} {version}\n")
    return path


@pytest.fixture
def without_hello() -> Iterator[None]:
    subprocess.run(["dpkg", "--purge", PACKAGE], capture_output=True, check=True)
    yield
    subprocess.run(["dpkg", "--purge", PACKAGE], capture_output=True, check=True)


def test_a_pin_gone_from_the_mirror_installs_the_same_releases_candidate_and_says_so(
    tmp_path: Path, without_hello: None
) -> None:
    packages = write_list(tmp_path / "packages.txt", host_release(), GONE)

    first = run_script(packages)

    assert first.returncode == 0, first.stderr
    installed = installed_version()
    assert installed is not None, first.stderr
    assert installed != GONE
    notes = [line for line in first.stderr.splitlines() if "has left the mirror" in line]
    assert len(notes) == 1, first.stderr
    assert re.fullmatch(
        re.escape(
            f"hack/node/install-packages.sh: {PACKAGE} {GONE} has left the mirror; installing {PACKAGE} {installed}"
        )
        + f" \\({same_release_origins()}\\) "
        + re.escape(f"instead: test it, then bump {packages}"),
        notes[0],
    ), notes[0]

    again = run_script(packages)  # the replacement stands: no mirror, no apt-get, nothing said
    assert (again.returncode, again.stderr) == (0, "")
    assert installed_version() == installed


def test_a_newer_version_of_another_release_is_refused(tmp_path: Path, without_hello: None) -> None:
    other = "trixie" if host_release() != "trixie" else "bookworm"
    packages = write_list(tmp_path / "packages.txt", other, GONE)

    refused = run_script(packages)

    assert refused.returncode == 1
    assert re.fullmatch(
        re.escape(
            f"hack/node/install-packages.sh: {PACKAGE} {GONE} is not on the mirror and no newer {PACKAGE} of Debian"
            f" {other} replaces it (candidate {candidate()} from "
        )
        + same_release_origins()
        + re.escape(f"): fix the version in {packages} (apt-cache policy {PACKAGE})"),
        refused.stderr.splitlines()[-1],
    ), refused.stderr
    assert installed_version() is None


def test_check_warns_about_each_pin_that_is_no_longer_the_candidate_and_installs_nothing(tmp_path: Path) -> None:
    current = write_list(tmp_path / "current.txt", host_release(), candidate())
    stale = write_list(tmp_path / "stale.txt", host_release(), GONE)
    before = installed_version()

    quiet = run_script("--check", current)
    warned = run_script("--check", current, stale)

    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    assert warned.returncode == 0
    assert len(warned.stderr.splitlines()) == 2, warned.stderr
    assert re.fullmatch(
        re.escape(f"  {PACKAGE} {GONE} -> {candidate()} of ") + same_release_origins() + re.escape(f" ({stale})"),
        warned.stderr.splitlines()[1],
    ), warned.stderr
    assert "no longer apt's candidate" in warned.stderr.splitlines()[0]
    assert installed_version() == before


def test_a_list_without_its_release_is_refused(tmp_path: Path) -> None:
    packages = tmp_path / "packages.txt"
    packages.write_text(f"{PACKAGE} {GONE}\n")

    refused = run_script(packages)

    assert refused.returncode == 1
    assert "has no `release: <codename>` line" in refused.stderr
    assert str(packages) in refused.stderr
