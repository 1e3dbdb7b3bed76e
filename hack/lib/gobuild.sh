# shellcheck shell=bash
# What hack/llm-d/build.sh and hack/llmaz-go/build.sh share: building a Go binary from a git source given at run time
# into the cache, keyed by the commits, the machine's Go and the recipe. Sourced, never run:
#   source hack/lib/gobuild.sh <the script as errors name it> <its directory under $LLMAZ_CACHE>
# It sets `root` (that directory) and defines `die`; the functions below set `go_version` and `arch`.
#
# Invariants (each script's header states them for its own build):
# - A source is taken with `git archive` of a named commit, so local changes in a checkout are not built.
# - A version's directory appears complete or not at all (built in a scratch directory, then renamed); its build.key
#   is the hash of the commits, Go version, platform and the build function's text; a lock on $root/.lock serialises
#   concurrent runs and stays held until the script exits.
# - The machine's Go builds (GOTOOLCHAIN=local: no toolchain download).

gobuild_script="$1"
root="${LLMAZ_CACHE:-$HOME/.cache/llmaz}/$2"

die() {
  echo "$gobuild_script: $*" >&2
  exit 1
}

# gobuild_commit <variable> <its path> <ref> <the ref as errors name it> <what it is> <its short name>: prints the
# commit `ref` names in the checkout or git directory at `path`, or dies saying what to give instead.
gobuild_commit() {
  local name="$1" src="$2" ref="$3" ref_named="$4" what="$5" short="$6"
  [[ -n "$src" ]] || die "set $name to a checkout or a git directory of $what"
  [[ -d "$src" ]] || die "$name=$src is not a directory: give a checkout or a git directory of $short"
  git -C "$src" rev-parse --git-dir >/dev/null 2>&1 ||
    die "$name=$src is not a git checkout or git directory: clone or fetch $short and give its path"
  git -C "$src" rev-parse --verify --quiet "$ref^{commit}" ||
    die "$name=$src has no commit named $ref_named (its tags: git -C $src tag)"
}

# gobuild_version <refs>: the cache directory name of a build: every character outside [A-Za-z0-9_.-] replaced by
# '-', and no leading '.' or '-'.
gobuild_version() {
  local version
  version="$(tr -c 'A-Za-z0-9_.\n-' '-' <<<"$1")"
  echo "${version#[.-]}"
}

# gobuild_go <what go is needed for>: the machine's go, never a downloaded toolchain; sets go_version and arch.
gobuild_go() {
  command -v go >/dev/null || die "go not found: $1"
  export GOTOOLCHAIN=local
  go_version="$(go env GOVERSION)"
  arch="$(go env GOHOSTARCH)"
}

# gobuild_key <build function> <commit>...: the build.key of building these commits with that function, this Go and
# platform. Editing the function gives a new key, hence a rebuild.
gobuild_key() {
  printf '%s\n' "${@:2}" "$go_version" "linux/$arch" "$(declare -f "$1")" | sha256sum | cut -c1-16
}

# gobuild_export <git dir> <commit> <directory>: the commit's tree, extracted into the new directory.
gobuild_export() {
  mkdir "$3"
  git -C "$1" archive --format=tar "$2" | tar -C "$3" -xf -
}

# gobuild_cached <dir> <key> <complete> <populate> <what is built> <what is built, short>: under the lock, keeps
# `dir` when the function `complete <dir>` holds and its build.key is `key`; otherwise calls `populate <scratch>` to
# fill a scratch directory with everything the build makes, and renames it to `dir`. Progress goes to stderr.
gobuild_cached() {
  local dir="$1" key="$2" complete="$3" populate="$4" what="$5" short="$6" start
  mkdir -p "$root"
  exec 9>"$root/.lock"
  flock 9

  gobuild_scratch=""
  trap '[[ -z "$gobuild_scratch" ]] || rm -rf "$gobuild_scratch"' EXIT
  trap 'exit 130' INT TERM HUP

  if "$complete" "$dir" && [[ "$(cat "$dir/build.key" 2>/dev/null)" == "$key" ]]; then
    echo "$what is already built in $dir" >&2
    return
  fi
  start=$SECONDS
  gobuild_scratch="$(mktemp -d "$root/.build.XXXXXX")"
  chmod 0755 "$gobuild_scratch"
  "$populate" "$gobuild_scratch"
  echo "$key" >"$gobuild_scratch/build.key"
  rm -rf "$dir"
  mv "$gobuild_scratch" "$dir"
  gobuild_scratch=""
  echo "built $short in $dir in $((SECONDS - start)) s" >&2
}
