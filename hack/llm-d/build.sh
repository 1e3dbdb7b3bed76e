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
# The steps it shares with hack/llmaz-go/build.sh (source, key, cache, lock) are hack/lib/gobuild.sh's.
set -euo pipefail
shopt -s inherit_errexit

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/gobuild.sh
source "$here/../lib/gobuild.sh" hack/llm-d/build.sh llm-d

[[ $# -eq 0 ]] || {
  echo "usage: LLMD_SRC=<llm-d-router checkout or git dir> GIE_SRC=<gateway-api-inference-extension checkout or git dir> [LLMD_REF=v0.10.0] [GIE_REF=v1.5.0] $0" >&2
  exit 2
}

gie_module=sigs.k8s.io/gateway-api-inference-extension

# resolve <variable name> <path> <ref> <file that must exist> <what it is>: prints the commit.
resolve() {
  local commit
  commit="$(gobuild_commit "$1" "$2" "$3" "$3" "$5" "$5")"
  git -C "$2" cat-file -e "$commit:$4" 2>/dev/null || die "$3 in $1=$2 has no $4: is it $5?"
  echo "$commit"
}

llmd_ref="${LLMD_REF:-v0.10.0}"
gie_ref="${GIE_REF:-v1.5.0}"
llmd_commit="$(resolve LLMD_SRC "${LLMD_SRC:-}" "$llmd_ref" cmd/epp/main.go "llm-d-router (github.com/llm-d/llm-d-router)")"
gie_commit="$(resolve GIE_SRC "${GIE_SRC:-}" "$gie_ref" go.mod "gateway-api-inference-extension ($gie_module)")"
git -C "$GIE_SRC" show "$gie_commit:go.mod" | grep -qx "module $gie_module" ||
  die "$gie_ref in GIE_SRC=$GIE_SRC is not the module $gie_module"

version="$(gobuild_version "$llmd_ref-gie-$gie_ref")"
dir="$root/$version"

gobuild_go "the EPP is built from llm-d-router's Go module"

# Everything a build depends on besides the commits: editing this function gives a new key, hence a rebuild.
build_epp() { # <llm-d tree> <gie tree, relative to it> <output binary>
  # GOWORK=off and GOFLAGS set here: a workspace or flags of the caller's must not change what is built. The replace
  # is written into the exported copy's go.mod only; -mod=mod lets go record it (go.sum already pins GIE's own deps).
  (cd "$1" && GOWORK=off go mod edit -replace="$gie_module=$2" &&
    CGO_ENABLED=0 GOOS=linux GOARCH="$arch" GOWORK=off GOFLAGS="-mod=mod -buildvcs=false" \
      go build -trimpath -ldflags="-s -w" -o "$3" ./cmd/epp)
}
key="$(gobuild_key build_epp "$llmd_commit" "$gie_commit")"

built() { [[ -x "$1/epp" ]]; }

populate() { # <scratch directory>
  gobuild_export "$LLMD_SRC" "$llmd_commit" "$1/src"
  gobuild_export "$GIE_SRC" "$gie_commit" "$1/gie"
  echo "building llm-d EPP $llmd_ref (commit ${llmd_commit:0:12}) with GIE $gie_ref (commit ${gie_commit:0:12})" \
    "using $go_version for linux/$arch" >&2
  # The replace is relative (../gie), so the tree stays buildable after the scratch directory is renamed.
  build_epp "$1/src" ../gie "$1/epp" >&2 || die "go build of llm-d EPP $llmd_ref failed (its output is above)"
}

gobuild_cached "$dir" "$key" built populate "llm-d EPP $llmd_ref with GIE $gie_ref" "llm-d EPP $llmd_ref"

printf '%s=%s\n' version "$version" llmd_commit "$llmd_commit" gie_commit "$gie_commit" binary "$dir/epp"
