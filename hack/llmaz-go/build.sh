#!/usr/bin/env bash
# Builds a release of Go llmaz from its own source, to compare ours against (benchmarks, migration checks). None of it
# is shipped, and none of it enters this repository: the source is given at run time and everything built stays in
# the cache, keyed by version:
#   binary  $LLMAZ_CACHE/llmaz-go/<version>/manager               its cmd/, built from its own Go module
#   crds    $LLMAZ_CACHE/llmaz-go/<version>/src/config/crd/bases  the CRDs of the same version
#   source  $LLMAZ_CACHE/llmaz-go/<version>/src                   its whole tree at <ref> (config/, chart/ install it)
#   image   llmaz.local/llmaz-go:<version>                        the binary alone, run as upstream's image runs it
#                                                                 (hack/images/build.sh llmaz-go)
#
# Usage: LLMAZ_GO_SRC=<checkout or git dir> [LLMAZ_GO_REF=v0.1.4] hack/llmaz-go/build.sh [binary|image]
#   binary: the binary, CRDs and source; image (default): those and the image (root and buildah, as make image-build).
#   stdout: key=value lines: version, commit, binary, crds, source; with the image also image, archive, index.
#   stderr: progress, and the go command's own output.
#
# Invariants:
# - <version> is LLMAZ_GO_REF with every character an image tag cannot hold replaced by '-'. Its directory is used
#   as it is when its build.key names the same commit, Go version, target platform and recipe: a second run with the
#   same ref builds nothing. The image is hack/images/build.sh's, keyed by the binary's hash, so it is not rebuilt
#   either. The index holds one llmaz-go image at a time; each version's binary and CRDs stay.
# - The source is taken with `git archive` of the commit LLMAZ_GO_REF names, so local changes in a checkout are not
#   built. A version's directory appears complete or not at all (built in a scratch directory, then renamed); a lock
#   serialises concurrent runs.
# - The machine's Go builds it (GOTOOLCHAIN=local: no toolchain download); go refuses with its own message when the
#   module's go directive asks for a newer one. Static (no cgo), so it runs from an empty image, as upstream's runs
#   from distroless/static.
# - Network: the Go module proxy and checksum database, for the dependencies the module's go.sum pins. Nothing else.
# The steps it shares with hack/llm-d/build.sh (source, key, cache, lock) are hack/lib/gobuild.sh's.
set -euo pipefail
shopt -s inherit_errexit

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=hack/lib/gobuild.sh
source "$here/../lib/gobuild.sh" hack/llmaz-go/build.sh llmaz-go

case "${1:-image}" in
  binary) with_image=false ;;
  image) with_image=true ;;
  *)
    echo "usage: LLMAZ_GO_SRC=<checkout or git dir> [LLMAZ_GO_REF=v0.1.4] $0 [binary|image]" >&2
    exit 2
    ;;
esac

src="${LLMAZ_GO_SRC:-}"
ref="${LLMAZ_GO_REF:-v0.1.4}"
commit="$(gobuild_commit LLMAZ_GO_SRC "$src" "$ref" "LLMAZ_GO_REF=$ref" "llmaz (github.com/InftyAI/llmaz)" llmaz)"
git -C "$src" cat-file -e "$commit:go.mod" 2>/dev/null && git -C "$src" cat-file -e "$commit:cmd" 2>/dev/null ||
  die "$ref in LLMAZ_GO_SRC=$src has no go.mod and cmd/: is it llmaz?"

version="$(gobuild_version "$ref")"
[[ -n "$version" ]] || die "LLMAZ_GO_REF=$ref gives no usable version name"
dir="$root/$version"

gobuild_go "the manager is built from llmaz's Go module"

# Everything a build depends on besides the commit: editing this function gives a new key, hence a rebuild.
build_manager() { # <source tree> <output binary>
  # GOWORK=off and GOFLAGS set here: a workspace or flags of the caller's must not change what is built.
  (cd "$1" && CGO_ENABLED=0 GOOS=linux GOARCH="$arch" GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" \
    go build -trimpath -o "$2" ./cmd)
}
key="$(gobuild_key build_manager "$commit")"

built() { [[ -x "$1/manager" && -d "$1/src/config/crd/bases" ]]; }

populate() { # <scratch directory>
  gobuild_export "$src" "$commit" "$1/src"
  [[ -n "$(find "$1/src/config/crd/bases" -maxdepth 1 -name '*.yaml' 2>/dev/null)" ]] ||
    die "$ref has no CRDs in config/crd/bases"
  echo "building llmaz $ref (commit ${commit:0:12}) with $go_version for linux/$arch" >&2
  build_manager "$1/src" "$1/manager" || die "go build of llmaz $ref failed (its output is above)"
}

gobuild_cached "$dir" "$key" built populate "llmaz $ref (commit ${commit:0:12})" "llmaz $ref"

printf '%s=%s\n' version "$version" commit "$commit" binary "$dir/manager" crds "$dir/src/config/crd/bases" \
  source "$dir/src"

$with_image || exit 0
index="$(LLMAZ_GO_BIN="$dir/manager" "$repo/hack/images/build.sh" llmaz-go | tail -n 1)" ||
  die "hack/images/build.sh llmaz-go failed"
python3 - "$index" <<'EOF'
import json
import sys

with open(sys.argv[1]) as f:
    entry = json.load(f)["llmaz-go"]
print(f"image={entry['image']}\narchive={entry['archive']}\nindex={sys.argv[1]}")
EOF
