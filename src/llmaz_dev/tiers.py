"""`make test`'s runner: the checks, the builds and the test tiers in order, timed, with where the time went.

    python -m llmaz_dev.tiers [--only STEP ...] [--pytest-args "..."]

Steps run one after another, except a stage's steps, which run side by side: the unit and integration tiers share
nothing (no fixed port, no file, no cluster: the unit tier starts none), so they overlap. The node tier comes last
and alone: one real node per machine. A step that fails lets the steps running beside it finish, then ends the run.

Each step is a `make` target or a pytest run. Steps that run side by side print each line with the step's name
before it; a step alone prints as it would alone. Every pytest run writes a JUnit report under `.dev/test-reports`,
from which the summary takes each tier's slowest tests. The last lines are the summary: each step's wall time and
result, the slowest tests, and one closing `tests: N passed, N failed` line over every tier.

Signals: SIGINT and SIGTERM reach the children (each in a process group of its own, so a terminal's Ctrl-C arrives
once, passed on by the runner), which stop what they started; the runner then ends with the status of an
interrupted run. It changes no signal disposition it inherited for the children (an ignored SIGINT,
under `setsid ... &`, stays ignored for them, as it would be without this runner).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REPORTS = REPO / ".dev" / "test-reports"
SLOWEST = 10


@dataclass(frozen=True, slots=True)
class Step:
    """One thing `make test` does: a make target, or a pytest tier (`tier` names its JUnit report)."""

    name: str
    command: tuple[str, ...]
    tier: str | None = None


@dataclass(slots=True)
class Outcome:
    step: Step
    seconds: float = 0.0
    returncode: int | None = None
    counts: dict[str, int] = field(default_factory=dict)
    slowest: list[tuple[float, str]] = field(default_factory=list)


def _make(target: str, *variables: str) -> Step:
    return Step(target, ("make", "--no-print-directory", target, *variables))


def _tier(name: str, python: str, paths: Sequence[str], pytest_args: Sequence[str], env: str = "") -> Step:
    report = REPORTS / f"{name}.xml"
    command = [python, "-m", "pytest", *paths, f"--junitxml={report}", "-o", "junit_family=xunit2", *pytest_args]
    if env:
        command = ["env", env, *command]
    return Step(name, tuple(command), tier=name)


def plan(python: str, pytest_args: Sequence[str]) -> list[list[Step]]:
    """The stages of `make test`, in order; the steps of one stage run side by side."""
    builds = ["kustomize", "helm", "cluster-bins", "e2e-bins", "node-bins", "image-build", "example-crds"]
    return [
        [_make("debian-pins")],
        [_make("lint")],
        [_make("kustomize-build")],
        *([_make(b)] for b in builds),
        [
            _tier("unit", python, ["test/unit"], pytest_args),
            _tier("integration", python, ["test/integration"], pytest_args),
        ],
        [_tier("e2e-simulated", python, ["test/e2e"], pytest_args, env="E2E_CLUSTER=simulated")],
        [_tier("e2e-node", python, ["test/e2e"], pytest_args, env="E2E_CLUSTER=node")],
    ]


class _Runner:
    def __init__(self) -> None:
        self.children: list[subprocess.Popen[bytes]] = []
        self.lock = threading.Lock()
        self.interrupted: int | None = None

    def forward(self, signum: int, _frame: object) -> None:
        self.interrupted = signum
        with self.lock:
            for child in self.children:
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(signum)

    def run_stage(self, steps: list[Step]) -> list[Outcome]:
        outcomes = [Outcome(step) for step in steps]
        prefix = len(steps) > 1
        threads = [threading.Thread(target=self._run, args=(o, prefix)) for o in outcomes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return outcomes

    def _run(self, outcome: Outcome, prefix: bool) -> None:
        step = outcome.step
        started = time.monotonic()
        print(f"==> {step.name}: {shlex.join(step.command)}", flush=True)
        with self.lock:
            if self.interrupted is not None:
                return
            child = subprocess.Popen(
                step.command,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if prefix else None,
                stderr=subprocess.STDOUT if prefix else None,
                # A group of its own: a terminal's Ctrl-C reaches the runner alone, which passes it on once.
                process_group=0,
            )
            self.children.append(child)
        if prefix and child.stdout is not None:
            for line in iter(child.stdout.readline, b""):
                sys.stdout.buffer.write(f"[{step.name}] ".encode() + line)
                sys.stdout.flush()
        outcome.returncode = child.wait()
        outcome.seconds = time.monotonic() - started
        with self.lock:
            self.children.remove(child)
        if step.tier is not None:
            outcome.counts, outcome.slowest = read_report(REPORTS / f"{step.tier}.xml")


def read_report(path: Path) -> tuple[dict[str, int], list[tuple[float, str]]]:
    """Counts (passed, failed, errors, skipped) and the slowest tests of a JUnit report; empty when it is missing."""
    if not path.exists():
        return {}, []
    root = ET.parse(path).getroot()
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    times: list[tuple[float, str]] = []
    for case in root.iter("testcase"):
        if case.find("failure") is not None:
            counts["failed"] += 1
        elif case.find("error") is not None:
            counts["errors"] += 1
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        times.append((float(case.get("time") or 0.0), name))
    return counts, sorted(times, reverse=True)[:SLOWEST]


def summary(stages: list[list[Outcome]], total: float) -> list[str]:
    """The closing lines: each step's time and result, each tier's slowest tests, and the tests' closing line."""
    lines = ["", "make test: where the time went (wall clock)", ""]
    lines.append(f"  {'step':<16} {'seconds':>8}  result")
    for stage in stages:
        for outcome in stage:
            beside = (
                " (beside " + ", ".join(o.step.name for o in stage if o is not outcome) + ")" if len(stage) > 1 else ""
            )
            if outcome.returncode is None:
                result = "not run"
            elif outcome.counts:
                c = outcome.counts
                result = f"{c['passed']} passed, {c['failed'] + c['errors']} failed" + (
                    f", {c['skipped']} skipped" if c["skipped"] else ""
                )
            else:
                result = "ok" if outcome.returncode == 0 else f"failed (exit {outcome.returncode})"
            lines.append(f"  {outcome.step.name:<16} {outcome.seconds:>8.0f}  {result}{beside}")
    lines.append(f"  {'total':<16} {total:>8.0f}")
    for stage in stages:
        for outcome in stage:
            if outcome.slowest:
                lines += ["", f"  slowest tests of {outcome.step.name}:"]
                lines += [f"    {seconds:7.1f} s  {name}" for seconds, name in outcome.slowest]
    tiers = [o for stage in stages for o in stage if o.counts]
    passed = sum(o.counts["passed"] for o in tiers)
    failed = sum(o.counts["failed"] + o.counts["errors"] for o in tiers)
    lines += ["", f"tests: {passed} passed, {failed} failed"]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmaz_dev.tiers", description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="run only these steps (repeatable)")
    parser.add_argument("--pytest-args", default="", help="more pytest arguments for every tier")
    args = parser.parse_args(argv)
    stages = plan(sys.executable, shlex.split(args.pytest_args))
    if args.only:
        stages = [[s for s in stage if s.name in args.only] for stage in stages]
        stages = [stage for stage in stages if stage]
    REPORTS.mkdir(parents=True, exist_ok=True)
    for report in REPORTS.glob("*.xml"):
        report.unlink()
    runner = _Runner()
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, runner.forward)
    started = time.monotonic()
    done: list[list[Outcome]] = []
    failed = False
    for stage in stages:
        if failed or runner.interrupted is not None:
            done.append([Outcome(step) for step in stage])
            continue
        outcomes = runner.run_stage(stage)
        done.append(outcomes)
        failed = any(o.returncode != 0 for o in outcomes)
    print("\n".join(summary(done, time.monotonic() - started)), flush=True)
    if runner.interrupted is not None:
        return 128 + runner.interrupted
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
