"""Build the Go subjects into the cache, only when missing. They are benchmark baselines, never shipped.

- The Go llmaz manager, from its module at the first version in LLMAZ_GO_VERSIONS (default
  "v0.1.4 v0.1.1 v0.1.0") that the module proxy serves, built in a throwaway module under
  $LLMAZ_CACHE/bench-build/. Its own CRDs come from the same module. The checksum database has no entry for
  some llmaz releases (v0.1.1), so llmaz alone is exempt from it (GONOSUMDB); its dependencies are still
  verified, and the binary is a local benchmark subject, never shipped. BENCH_GO_SRC (a checkout or git
  directory of llmaz, with BENCH_GO_REF, default v0.1.4) builds it from that source instead, with
  hack/llmaz-go/build.sh, for releases the proxy does not serve. LLMAZ_GO_BINARY (with LLMAZ_GO_CRDS) uses a
  binary built elsewhere.
- bench/go-noop, the controller-runtime no-op controller, bench/go-load, the admission load generator,
  bench/go-gwload, the gateway load generator, and bench/go-enginesim, the paced engine the gateway scenario's
  streams come from, each keyed by a hash of its sources.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from suite.settings import BENCH_DIR, REPO

LLMAZ_MODULE = "github.com/inftyai/llmaz"


_NO_SUMDB_FOR_LLMAZ = {"GONOSUMDB": LLMAZ_MODULE}


class GoUnavailableError(RuntimeError):
    """A Go subject could not be built; the message says why."""


@dataclass(frozen=True, slots=True)
class GoLlmaz:
    binary: Path
    crd_dir: Path
    version: str
    notes: list[str] = field(default_factory=list)
    """Why earlier versions in the list were skipped (e.g. the proxy refused them)."""
    origin: str = "the Go module proxy"
    """Where its source came from."""


def _go(args: list[str], cwd: Path, timeout: float = 1800, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        ["go", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    if proc.returncode != 0:
        raise GoUnavailableError(f"go {' '.join(args)}: {proc.stderr.strip()[-600:]}")
    return proc.stdout


def llmaz_manager(cache: Path) -> GoLlmaz:
    if os.environ.get("LLMAZ_GO_BINARY"):
        crd_dir = os.environ.get("LLMAZ_GO_CRDS", "")
        if not crd_dir:
            raise GoUnavailableError("LLMAZ_GO_BINARY needs LLMAZ_GO_CRDS (the CRD directory of the same version)")
        return GoLlmaz(
            Path(os.environ["LLMAZ_GO_BINARY"]), Path(crd_dir), os.environ.get("LLMAZ_GO_VERSION", "?"),
            origin="LLMAZ_GO_BINARY",
        )  # fmt: skip
    if os.environ.get("BENCH_GO_SRC"):
        return _build_from_source(cache, os.environ["BENCH_GO_SRC"], os.environ.get("BENCH_GO_REF", ""))
    notes: list[str] = []
    for version in os.environ.get("LLMAZ_GO_VERSIONS", "v0.1.4 v0.1.1 v0.1.0").split():
        try:
            binary, crds = _build_llmaz(cache, version)
            return GoLlmaz(binary, crds, version, notes)
        except GoUnavailableError as err:
            notes.append(f"{version}: {err}")
    raise GoUnavailableError("; ".join(notes))


def _build_llmaz(cache: Path, version: str) -> tuple[Path, Path]:
    work = cache / "bench-build" / f"llmaz-go-{version}"
    binary = cache / "bin" / "bench" / f"llmaz-manager-{version}"
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "go.mod").exists():
        (work / "go.mod").write_text("module llmazbench.local/build\n\ngo 1.23.0\n")
    if not binary.exists():
        _go(["get", f"{LLMAZ_MODULE}/cmd@{version}"], work, env=_NO_SUMDB_FOR_LLMAZ)
        binary.parent.mkdir(parents=True, exist_ok=True)
        _go(["build", "-trimpath", "-o", str(binary), f"{LLMAZ_MODULE}/cmd"], work, env=_NO_SUMDB_FOR_LLMAZ)
    module_dir = Path(json.loads(_go(["list", "-m", "-json", LLMAZ_MODULE], work, env=_NO_SUMDB_FOR_LLMAZ))["Dir"])
    return binary, module_dir / "config" / "crd" / "bases"


def _build_from_source(cache: Path, source: str, ref: str) -> GoLlmaz:
    """The manager and CRDs hack/llmaz-go/build.sh builds from `source` at `ref` (its default when empty)."""
    env = {**os.environ, "LLMAZ_GO_SRC": source, "LLMAZ_CACHE": str(cache)}
    if ref:
        env["LLMAZ_GO_REF"] = ref
    script = REPO / "hack" / "llmaz-go" / "build.sh"
    proc = subprocess.run([script, "binary"], capture_output=True, text=True, timeout=1800, check=False, env=env)
    if proc.returncode != 0:
        raise GoUnavailableError(f"BENCH_GO_SRC={source}: {script.name}: {proc.stderr.strip()[-600:]}")
    built = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    try:
        return GoLlmaz(
            Path(built["binary"]), Path(built["crds"]), built["version"],
            origin=f"its source, commit {built['commit'][:12]} (BENCH_GO_SRC)",
        )  # fmt: skip
    except KeyError as missing:
        raise GoUnavailableError(f"{script} printed no {missing} line: {proc.stdout.strip()[-300:]}") from None


def go_noop(cache: Path) -> Path:
    return _local_program(cache, "go-noop", ("go.mod", "go.sum", "main.go"))


def go_load(cache: Path) -> Path:
    return _local_program(cache, "go-load", ("go.mod", "main.go"))


def go_gwload(cache: Path) -> Path:
    return _local_program(cache, "go-gwload", ("go.mod", "main.go"))


def go_enginesim(cache: Path) -> Path:
    return _local_program(cache, "go-enginesim", ("go.mod", "main.go"))


def _local_program(cache: Path, name: str, files: tuple[str, ...]) -> Path:
    source = BENCH_DIR / name
    digest = hashlib.sha256()
    for file in files:
        digest.update((source / file).read_bytes())
    binary = cache / "bin" / "bench" / f"{name}-{digest.hexdigest()[:12]}"
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        _go(["build", "-trimpath", "-o", str(binary), "."], source)
    return binary
