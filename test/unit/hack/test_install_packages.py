"""hack/node/install-packages.sh names the real cause of a failed apt step, and its fix, from apt's own output.

`apt-output/` holds what apt-get printed. Captured on a Debian bookworm host (apt 2.6), without changing it: a dpkg
admin directory copied to /tmp with an entry in its journal (`updates/`), a lock another apt-get held, `apt-get -s` of
a version and a package that do not exist, and downloads into a temporary archive directory through a proxy that
refused, did not resolve, dropped the connection or answered 404. Written after apt's and dpkg's messages (their
strings, as the binaries hold them): a full disk, a failed maintainer script, unmet dependencies, no candidate.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "hack" / "node" / "install-packages.sh"
OUTPUT = Path(__file__).resolve().parent / "apt-output"
STEP = "downloading hello-traditional=2.10-6"
APT_FAILED = 100  # apt-get's exit status for every error
TIMED_OUT = 124  # timeout(1)'s, once it has stopped apt-get


def explain(status: int, output: Path, step: str = STEP) -> str:
    done = subprocess.run(
        [SCRIPT, "--explain", str(status), str(output), step],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout.count("\n") == 1, f"not one line:\n{done.stdout}"
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("case", "status", "cause", "fix"),
    [
        (
            "dpkg-interrupted",
            APT_FAILED,
            "an earlier install was interrupted before it finished",
            "run `sudo dpkg --configure -a` to finish it",
        ),
        (
            "lock-held-by-apt-get",
            APT_FAILED,
            "another process, pid 27737 (apt-get), holds apt's lock /var/lib/dpkg/lock-frontend",
            "wait for it to finish",
        ),
        ("version-not-found", APT_FAILED, "the mirror has no hello 0.1-0~gone", "fix the version in"),
        ("unknown-package", APT_FAILED, "apt knows no package no-such-package-xyz", "fix its name in"),
        ("no-installation-candidate", APT_FAILED, "no version of hello-traditional can be installed", "fix"),
        (
            "connection-refused",
            APT_FAILED,
            "cannot be reached from here (apt: Could not connect to 127.0.0.1:9",
            "check the network, firewall and any proxy",
        ),
        ("connection-failed", APT_FAILED, "cannot be reached from here (apt: Connection failed", "check the network"),
        (
            "update-connection-refused",
            APT_FAILED,
            "cannot be reached from here (apt: Could not connect to 127.0.0.1:9",
            "check the network",
        ),
        ("name-not-resolved", APT_FAILED, "the host name no-such-proxy.invalid does not resolve", "/etc/resolv.conf"),
        ("timed-out", TIMED_OUT, "took over 900 s and was stopped", "APT_TIMEOUT=<seconds>"),
        (
            "file-gone-from-mirror",
            APT_FAILED,
            "the mirror no longer has a file the local index names",
            "sudo apt-get update",
        ),
        (
            "no-free-space",
            APT_FAILED,
            "the disk is full: not enough free space in /var/cache/apt/archives/",
            "apt-get clean",
        ),
        ("no-space-left-on-device", APT_FAILED, "the disk is full (No space left on device)", "free some space"),
        ("maintainer-script-failed", APT_FAILED, "dpkg could not install a package", "fix what dpkg reports"),
        ("unmet-dependencies", APT_FAILED, "the packages' dependencies cannot be met", "apt-get install -s"),
    ],
)
def test_a_failed_apt_step_is_explained_by_its_cause_and_fix(case: str, status: int, cause: str, fix: str) -> None:
    line = explain(status, OUTPUT / f"{case}.txt")
    assert line.startswith(STEP + " "), line
    assert cause in line, line
    assert fix in line, line


def test_an_interrupted_install_is_not_blamed_on_the_mirror() -> None:
    line = explain(APT_FAILED, OUTPUT / "dpkg-interrupted.txt")
    assert "mirror" not in line, line
    assert "network" not in line, line


def test_an_unexplained_failure_quotes_apt_and_names_the_file_with_its_whole_output() -> None:
    output = OUTPUT / "unexplained.txt"
    line = explain(APT_FAILED, output)
    quoted = "apt: Method http has died unexpectedly!"
    assert line == f"{STEP} failed (exit status 100): {quoted}: apt's whole output is in {output}"


@pytest.fixture
def held_lock(tmp_path: Path) -> Iterator[Path]:
    """A lock file this process holds as apt holds its own (a POSIX record lock)."""
    lock = tmp_path / "lock-frontend"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o640)
    fcntl.lockf(fd, fcntl.LOCK_EX)
    yield lock
    os.close(fd)


def test_a_held_lock_apt_names_without_its_holder_is_traced_to_the_holders_pid(tmp_path: Path, held_lock: Path) -> None:
    output = tmp_path / "apt-output.txt"
    output.write_text(
        f"E: Could not get lock {held_lock} - open (11: Resource temporarily unavailable)\n"
        f"E: Unable to acquire the dpkg frontend lock ({held_lock}), is another process using it?\n"
    )
    line = explain(APT_FAILED, output)
    comm = Path(f"/proc/{os.getpid()}/comm").read_text().strip()
    assert f"another process, pid {os.getpid()} ({comm}), holds apt's lock {held_lock}" in line, line


def test_a_lock_without_a_holder_any_more_says_so(tmp_path: Path) -> None:
    output = tmp_path / "apt-output.txt"
    output.write_text(f"E: Could not get lock {tmp_path / 'lock'} - open (11: Resource temporarily unavailable)\n")
    line = explain(APT_FAILED, output)
    assert f"another apt or dpkg holds apt's lock {tmp_path / 'lock'} (it has ended since" in line, line


def test_explain_needs_a_status_and_a_file() -> None:
    done = subprocess.run([SCRIPT, "--explain", "100"], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2
    assert done.stderr == "usage: hack/node/install-packages.sh --explain STATUS OUTPUT [STEP]\n"


def test_a_holder_apt_names_by_its_pid_alone_is_named_so(tmp_path: Path) -> None:
    output = tmp_path / "apt-output.txt"
    output.write_text("E: Could not get lock /var/lib/dpkg/lock. It is held by process 77\n")
    line = explain(APT_FAILED, output)
    assert "another process, pid 77, holds apt's lock /var/lib/dpkg/lock: wait for it to finish" in line, line
