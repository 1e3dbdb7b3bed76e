#!/usr/bin/env bash
# Installs Open WebUI (from PyPI) and selenium into a venv of their own for `make test-webui`, so their ~250
# dependencies never touch the project's .venv.
#
# Usage: hack/webui/install.sh VENV           install if missing or stale; the last stdout line is VENV's python
#        hack/webui/install.sh --lock VENV    install ignoring constraints.txt, then rewrite constraints.txt from
#                                             what was installed (after bumping a version in requirements.txt)
#
# Invariants:
# - Versions come only from this directory: requirements.txt (open-webui, selenium) and constraints.txt (every
#   other package, frozen from a working install by --lock).
# - No PyTorch: open-webui is installed without its dependencies, then its own requirements less the two that need
#   torch (accelerate, sentence-transformers: local embedding and reranking models, which test-webui turns off).
#   PyPI's torch would pull ~3 GB of CUDA libraries.
# - VENV/.installed holds the hash of this script and both lists; when it matches nothing is done and no index is
#   asked. Otherwise VENV is rebuilt from scratch, so an interrupted install is simply re-run. A lock serialises
#   concurrent runs. Every pip step is bounded (WEBUI_INSTALL_TIMEOUT seconds each, default 1800).
# - Every failure is one line that names the cause and the fix.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
lock=false
if [[ "${1:-}" == --lock ]]; then
  lock=true
  shift
fi
venv="${1:?usage: hack/webui/install.sh [--lock] VENV}"
python="${PYTHON:-python3}"
step_timeout="${WEBUI_INSTALL_TIMEOUT:-1800}"
excluded=(accelerate sentence-transformers)

say() { echo "[test-webui] $*" >&2; }
die() {
  echo "hack/webui/install.sh: $*" >&2
  exit 1
}
fingerprint() { cat "${BASH_SOURCE[0]}" "$here/requirements.txt" "$here/constraints.txt" | sha256sum | cut -d' ' -f1; }
installed() { [[ $lock == false && -f "$venv/.installed" && "$(cat "$venv/.installed")" == "$(fingerprint)" ]]; }

if installed; then
  echo "$venv/bin/python"
  exit 0
fi
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
# Another run may have finished while this one waited for the lock.
if installed; then
  echo "$venv/bin/python"
  exit 0
fi

"$python" -c 'import sys; sys.exit(not ((3, 11) <= sys.version_info[:2] <= (3, 12)))' 2>/dev/null ||
  die "Open WebUI needs Python 3.11 or 3.12; $python is $("$python" -V 2>&1): run with PYTHON=python3.11"
webui="$(grep -E '^open-webui==' "$here/requirements.txt")" || die "$here/requirements.txt names no open-webui==<version>"
selenium="$(grep -E '^selenium==' "$here/requirements.txt")" || die "$here/requirements.txt names no selenium==<version>"

started=$SECONDS
say "installing $webui and $selenium into $venv (once: ~1 GB from PyPI, a few minutes)"
rm -rf "$venv"
"$python" -m venv "$venv" || die "$python -m venv failed (Debian: apt-get install python3-venv)"
pip=(timeout "$step_timeout" "$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install --quiet --upgrade pip || die "pip could not upgrade itself in $venv: is the package index reachable?"

# pip prints one "Collecting" line per package it resolves: those are the progress; the whole output is kept in a
# log for a failure.
log="$venv/install.log"
run_pip() {
  local what="$1" rc=0
  shift
  "${pip[@]}" install --progress-bar off "$@" >"$log" 2>&1 &
  local pid=$!
  tail -n +1 -f --pid="$pid" "$log" | awk '
    /^Collecting / { sub(/ \(from .*$/, ""); print "[test-webui]   " $0; fflush() }
    /^Installing collected packages: / {
      n = split($0, names, ", ")
      print "[test-webui]   installing " n " package" (n == 1 ? "" : "s")
      fflush()
    }
  ' >&2 || true
  wait "$pid" || rc=$?
  ((rc != 124)) || die "$what: timed out after ${step_timeout} s (WEBUI_INSTALL_TIMEOUT); the log is $log"
  if ((rc != 0)); then
    tail -n 20 "$log" >&2
    die "$what failed (exit $rc; the log is $log): is the package index reachable?"
  fi
}

run_pip "pip install --no-deps $webui" --no-deps "$webui"
# open-webui's own requirements (no extras) less the excluded ones, and selenium.
reqs="$venv/requirements.txt"
"$venv/bin/python" - "${excluded[@]}" >"$reqs" <<'EOF'
import re
import sys
from importlib.metadata import requires

excluded = set(sys.argv[1:])
for line in requires("open-webui") or []:
    spec, _, marker = line.partition(";")
    name = re.split(r"[\s\[=<>!~(]", spec.strip(), maxsplit=1)[0]
    if "extra" not in marker and re.sub(r"[-_.]+", "-", name).lower() not in excluded:
        print(line)
EOF
echo "$selenium" >>"$reqs"
constraints=(-c "$here/constraints.txt")
if [[ $lock == true ]]; then constraints=(); fi
say "installing the $(($(wc -l <"$reqs") - 1)) requirements of $webui (less ${excluded[*]}), $selenium and their dependencies"
run_pip "pip install -r $reqs" -r "$reqs" "${constraints[@]}"

if [[ $lock == true ]]; then
  {
    sed -n '/^#/p' "$here/constraints.txt"
    "$venv/bin/python" -m pip --disable-pip-version-check freeze --exclude open-webui --exclude selenium
  } >"$here/constraints.txt.new"
  mv "$here/constraints.txt.new" "$here/constraints.txt"
  say "wrote $here/constraints.txt ($(grep -cv '^#' "$here/constraints.txt") packages)"
fi
fingerprint >"$venv/.installed"
say "installed in $((SECONDS - started)) s ($(du -sh "$venv" | cut -f1))"
echo "$venv/bin/python"
