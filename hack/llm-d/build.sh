#!/usr/bin/env bash
# Builds llm-d's Endpoint Picker (EPP) from its own source, as the peer llmaz's routing is measured against
# (bench/suite/routing_bench.py, strategy "llm-d EPP"). None of it is shipped, and none of it enters this repository:
# both sources are given at run time and the binary stays in the cache, keyed by the two refs:
#   binary  $LLMAZ_CACHE/llm-d/<version>/epp          llm-d-router's cmd/epp
#   source  $LLMAZ_CACHE/llm-d/<version>/src          its tree at LLMD_REF, go.mod with the replace below
#   gie     $LLMAZ_CACHE/llm-d/<version>/gie          the Gateway API Inference Extension tree at GIE_REF
#
# Usage: LLMD_SRC=<checkout or git dir of llm-d-router> GIE_SRC=<checkout or git dir of gateway-api-inference-extension>
#        [LLMD_REF=v0.10.0] [GIE_REF=v1.5.0] hack/llm-d/build.sh
#   stdout: key=value lines: version, llmd_commit, gie_commit, binary.  stderr: progress and go's own output.
#
# Invariants:
# - llm-d-router's go.mod requires sigs.k8s.io/gateway-api-inference-extension at a version; the build replaces that
#   module with the GIE tree at GIE_REF (a directory replace, added to the exported copy only), so the GIE source is
#   the one given, not one fetched by version.
# - <version> is "<LLMD_REF>-gie-<GIE_REF>" with every character outside [A-Za-z0-9_.-] replaced by '-'. Its
#   directory is used as it is when its build.key names the same two commits, Go version, platform and recipe.
#   A version's directory appears complete or not at all (built in a scratch directory, then renamed); a lock
#   serialises concurrent runs.
# - Sources are taken with `git archive` of the named commits, so local changes in a checkout are not built.
# - The machine's Go builds it (GOTOOLCHAIN=local: no toolchain download); go refuses with its own message when the
#   module's go directive asks for a newer one. Static (CGO_ENABLED=0), as llm-d's own Dockerfile.epp builds it.
# - Network: the Go module proxy and checksum database of the machine's go env, for the dependencies go.sum pins.
set -euo pipefail
shopt -s inherit_errexit

cache="${LLMAZ_CACHE:-$HOME/.cache/llmaz}"
root="$cache/llm-d"

die() {
  echo "hack/llm-d/build.sh: $*" >&2
  exit 1
}

[[ $# -eq 0 ]] || {
  echo "usage: LLMD_SRC=<llm-d-router checkout or git dir> GIE_SRC=<gateway-api-inference-extension checkout or git dir> [LLMD_REF=v0.10.0] [GIE_REF=v1.5.0] $0" >&2
  exit 2
}

gie_module=sigs.k8s.io/gateway-api-inference-extension

# resolve <variable name> <path> <ref> <file that must exist> <what it is>: prints the commit.
resolve() {
  local name="$1" src="$2" ref="$3" must="$4" what="$5" commit
  [[ -n "$src" ]] || die "set $name to a checkout or a git directory of $what"
  [[ -d "$src" ]] || die "$name=$src is not a directory: give a checkout or a git directory of $what"
  git -C "$src" rev-parse --git-dir >/dev/null 2>&1 ||
    die "$name=$src is not a git checkout or git directory: clone or fetch $what and give its path"
  commit="$(git -C "$src" rev-parse --verify --quiet "$ref^{commit}")" ||
    die "$name=$src has no commit named $ref (its tags: git -C $src tag)"
  git -C "$src" cat-file -e "$commit:$must" 2>/dev/null || die "$ref in $name=$src has no $must: is it $what?"
  echo "$commit"
}

llmd_ref="${LLMD_REF:-v0.10.0}"
gie_ref="${GIE_REF:-v1.5.0}"
llmd_commit="$(resolve LLMD_SRC "${LLMD_SRC:-}" "$llmd_ref" cmd/epp/main.go "llm-d-router (github.com/llm-d/llm-d-router)")"
gie_commit="$(resolve GIE_SRC "${GIE_SRC:-}" "$gie_ref" go.mod "gateway-api-inference-extension ($gie_module)")"
git -C "$GIE_SRC" show "$gie_commit:go.mod" | grep -qx "module $gie_module" ||
  die "$gie_ref in GIE_SRC=$GIE_SRC is not the module $gie_module"

version="$(tr -c 'A-Za-z0-9_.\n-' '-' <<<"$llmd_ref-gie-$gie_ref")"
version="${version#[.-]}"
dir="$root/$version"

command -v go >/dev/null || die "go not found: the EPP is built from llm-d-router's Go module"
export GOTOOLCHAIN=local
go_version="$(go env GOVERSION)"
arch="$(go env GOHOSTARCH)"

# Everything a build depends on besides the commits: editing this function gives a new key, hence a rebuild.
build_epp() { # <llm-d tree> <gie tree, relative to it> <output binary>
  # GOWORK=off and GOFLAGS set here: a workspace or flags of the caller's must not change what is built. The replace
  # is written into the exported copy's go.mod only; -mod=mod lets go record it (go.sum already pins GIE's own deps).
  (cd "$1" && GOWORK=off go mod edit -replace="$gie_module=$2" &&
    CGO_ENABLED=0 GOOS=linux GOARCH="$arch" GOWORK=off GOFLAGS="-mod=mod -buildvcs=false" \
      go build -trimpath -ldflags="-s -w" -o "$3" ./cmd/epp)
}
key="$(printf '%s\n' "$llmd_commit" "$gie_commit" "$go_version" "linux/$arch" "$(declare -f build_epp)" |
  sha256sum | cut -c1-16)"

mkdir -p "$root"
exec 9>"$root/.lock"
flock 9

scratch=""
trap '[[ -z "$scratch" ]] || rm -rf "$scratch"' EXIT
trap 'exit 130' INT TERM HUP

if [[ -x "$dir/epp" && "$(cat "$dir/build.key" 2>/dev/null)" == "$key" ]]; then
  echo "llm-d EPP $llmd_ref with GIE $gie_ref is already built in $dir" >&2
else
  start=$SECONDS
  scratch="$(mktemp -d "$root/.build.XXXXXX")"
  chmod 0755 "$scratch"
  mkdir "$scratch/src" "$scratch/gie"
  git -C "$LLMD_SRC" archive --format=tar "$llmd_commit" | tar -C "$scratch/src" -xf -
  git -C "$GIE_SRC" archive --format=tar "$gie_commit" | tar -C "$scratch/gie" -xf -
  echo "building llm-d EPP $llmd_ref (commit ${llmd_commit:0:12}) with GIE $gie_ref (commit ${gie_commit:0:12})" \
    "using $go_version for linux/$arch" >&2
  # The replace is relative (../gie), so the tree stays buildable after the scratch directory is renamed.
  build_epp "$scratch/src" ../gie "$scratch/epp" >&2 ||
    die "go build of llm-d EPP $llmd_ref failed (its output is above)"
  echo "$key" >"$scratch/build.key"
  rm -rf "$dir"
  mv "$scratch" "$dir"
  scratch=""
  echo "built llm-d EPP $llmd_ref in $dir in $((SECONDS - start)) s" >&2
fi

printf '%s=%s\n' version "$version" llmd_commit "$llmd_commit" gie_commit "$gie_commit" binary "$dir/epp"
