#!/usr/bin/env bash
# Builds the project's container images with buildah, without a Docker engine or a registry, and exports each one to
# an OCI archive that a containerd takes with `ctr -n k8s.io images import <archive>`:
#   manager       llmaz.local/llmaz:<tag>              from Dockerfile
#   loader        llmaz.local/model-loader:<tag>       from Dockerfile.loader (EXTRAS: $LOADER_EXTRAS, default loader)
#   envoy         llmaz.local/envoy:<tag>              from Dockerfile.envoy: the Envoy data plane (config/gateway-envoy)
#   pause         llmaz.local/pause:<tag>              the pod sandbox's PID 1 (hack/images/pause), FROM scratch
#   llama-server  llmaz.local/llama-server:<version>   /app/llama-server and /app/rpc-server (a multi-host group's
#                                                       workers): the static binaries of hack/llamacpp/build.sh
#   prometheus, prometheus-operator, prometheus-config-reloader
#                 llmaz.local/<name>:<version>          the static binaries of hack/cluster/build.sh --prometheus, FROM scratch
#   llmaz-go      llmaz.local/llmaz-go:<version>        Go llmaz's manager, built from its source by hack/llmaz-go/build.sh
#                                                       (which runs this target), FROM scratch. Not part of `all`: it is a
#                                                       comparison subject, not one of the project's images.
# The Python images and llama-server sit on llmaz.local/base:<hash>: Debian bookworm with python3, from debootstrap.
#
# Usage: hack/images/build.sh [manager|loader|envoy|pause|llama-server|prometheus|prometheus-operator|
#                              prometheus-config-reloader|all]...     (no argument: all)
#   stdout: only the index path, $LLMAZ_CACHE/images/index.json, which maps each name built so far to
#           {"image": "<reference>", "archive": "<path of its .oci.tar>"}
#   stderr: progress; each build's own output goes to $LLMAZ_CACHE/images/logs/<name>.log
#   LLAMA_SERVER_BIN=<dir>/llama-server-<version>/llama-server uses that binary, and the rpc-server beside it, instead
#   of hack/llamacpp/build.sh.
#   llmaz-go needs LLMAZ_GO_BIN=<dir>/<version>/manager, a static binary; hack/llmaz-go/build.sh sets it.
#
# Invariants:
# - Tags are content hashes. base: its package list, suite and recipe. manager, loader: what the build context lets in
#   (pyproject.toml, README.md, the lock files requirements/, src/llmaz/ without bytecode caches: the package that
#   ships), the Dockerfile, the base and the build recipe. envoy: its lock file, Dockerfile.envoy, the base and the
#   build recipe (a source change does not rebuild it). pause: its Go sources and recipe. llama-server is tagged
#   with its build directory's version (the llama.cpp version and the build's revision, e.g. 0.3.36-r2), the
#   Prometheus Operator's two images and prometheus with their releases;
#   their archives are keyed by the binaries, the base (llama-server) and the recipe. A change gives a new key;
#   nothing whose archive exists for the current key is rebuilt or re-exported, and an image already in buildah's
#   storage is exported without being rebuilt.
# - An archive appears under its final name only when complete (written to a temporary name, then renamed), and the
#   index is replaced atomically, so an interrupted run is simply re-run. A lock serialises concurrent runs. An
#   image's older archives are deleted once its new one is in place.
# - OCI only: images are committed and exported in OCI format (no Docker media types), with the host's os/arch in
#   their config, which containerd filters on.
# - buildah keeps its storage and layer cache in $LLMAZ_CACHE/buildah. The host paths it writes anyway
#   (/var/lib/containers/cache, /run/containers, /etc/cni/net.d/cni.lock) are removed on exit unless they existed
#   before the run.
# - Network: the Debian mirror of the host's apt sources (debootstrap, once) and the Python package index (pip, in
#   the dependency layers), with the host's CA bundle and pip settings. Nothing else.
# - Needs root (debootstrap, buildah's overlay storage); hack/node/install-packages.sh installs buildah and debootstrap.
set -euo pipefail
# Errors inside $(...) stop the script too, not just the substitution.
shopt -s inherit_errexit

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${LLMAZ_CACHE:-$HOME/.cache/llmaz}"
images_dir="$cache/images"
logs_dir="$images_dir/logs"
store="$cache/buildah"
index="$images_dir/index.json"

suite=bookworm
base_packages="python3,python3-venv,python-is-python3,ca-certificates"
loader_extras="${LOADER_EXTRAS:-loader}"
host_ca=/etc/ssl/certs/ca-certificates.crt

say() { echo "$*" >&2; }
bh() { buildah --root "$store/root" --runroot "$store/run" --storage-driver overlay "$@"; }
die() {
  echo "hack/images/build.sh: $*" >&2
  exit 1
}

targets=()
declare -A wanted=()
for arg in "${@:-all}"; do
  case "$arg" in
    all) names=(manager loader envoy pause llama-server prometheus prometheus-operator prometheus-config-reloader) ;;
    manager | loader | envoy | pause | llama-server | prometheus | prometheus-operator | prometheus-config-reloader | llmaz-go)
      names=("$arg")
      ;;
    *)
      echo "usage: $0 [manager|loader|envoy|pause|llama-server|prometheus|prometheus-operator|prometheus-config-reloader|all]..." >&2
      echo "       LLMAZ_GO_BIN=<dir>/<version>/manager $0 llmaz-go    (hack/llmaz-go/build.sh runs this)" >&2
      exit 2
      ;;
  esac
  for name in "${names[@]}"; do
    [[ -n "${wanted[$name]:-}" ]] || targets+=("$name")
    wanted[$name]=1
  done
done

[[ "$(id -u)" == 0 ]] || die "must run as root (debootstrap, buildah's overlay storage): sudo make image-build"
for cmd in buildah python3 sha256sum flock findmnt; do
  command -v "$cmd" >/dev/null || die "$cmd not found: run hack/node/install-packages.sh (make image-build does)"
done
# Debian's names for amd64 and arm64 are also OCI's and Go's.
arch="$(dpkg --print-architecture)"
case "$arch" in
  amd64 | arm64) ;;
  *) die "unsupported architecture $arch (amd64 or arm64)" ;;
esac

mkdir -p "$logs_dir" "$store"
exec 9>"$images_dir/.lock"
flock 9

# buildah writes these host paths even with its own root and runroot: whatever this run creates, it removes.
side_effects=(/var/lib/containers/cache /var/lib/containers /run/containers
  /etc/cni/net.d/cni.lock /etc/cni/net.d /etc/cni)
declare -A existed=()
for path in "${side_effects[@]}"; do
  [[ -e "$path" ]] && existed[$path]=1
done

containers=()
scratch="$(mktemp -d "$images_dir/.build.XXXXXX")"
cleanup() {
  local c path
  for c in "${containers[@]}"; do
    bh rm "$c" >/dev/null 2>&1 || true
  done
  # debootstrap mounts proc and sys inside the new root; an interrupted run can leave them mounted there.
  findmnt -rn -o TARGET | grep "^$scratch/" | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf --one-file-system "$scratch"
  for path in "${side_effects[@]}"; do
    [[ -n "${existed[$path]:-}" ]] && continue
    case "$path" in
      /var/lib/containers | /etc/cni/net.d | /etc/cni) rmdir "$path" 2>/dev/null || true ;;
      *) rm -rf "$path" ;;
    esac
  done
}
trap cleanup EXIT
# Without this a signal ends bash without the EXIT trap.
trap 'exit 130' INT TERM HUP

image_exists() { bh inspect --type image "$1" >/dev/null 2>&1; }
short_hash() { sha256sum | cut -c1-12; }
# Names and contents of the files under <paths> (relative to <dir>), bytecode caches left out as the build context
# (.dockerignore) leaves them out.
files_digest() { # <dir> <paths...>
  local dir="$1"
  shift
  (cd "$dir" && find "$@" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | LC_ALL=C sort -z |
    xargs -0 -r sha256sum)
}
run_logged() { # <log> <command...>: the command's output to the log, its tail to stderr on failure
  local log="$1"
  shift
  if ! "$@" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "failed: $* (log: $log)"
  fi
}

# The first mirror the host's apt sources give for the suite (deb822 .sources first, then one-line .list files).
debian_mirror() {
  local file uri
  for file in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$file" ]] || continue
    uri="$(awk -v suite="$suite" '
      BEGIN { RS = ""; FS = "\n" }
      {
        types = uris = suites = ""
        for (i = 1; i <= NF; i++) {
          line = $i
          gsub(/[ \t]+/, " ", line)
          if (line ~ /^Types:/) types = " " substr(line, 7) " "
          else if (line ~ /^URIs:/) uris = substr(line, 6)
          else if (line ~ /^Suites:/) suites = " " substr(line, 8) " "
        }
        if (types ~ / deb / && suites ~ (" " suite " ")) { split(uris, u, " "); print u[1]; exit }
      }' "$file")"
    [[ -n "$uri" ]] && echo "$uri" && return
  done
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "$file" ]] || continue
    uri="$(sed -e 's/\[[^]]*\]//' "$file" | awk -v suite="$suite" '$1 == "deb" && $3 == suite { print $2; exit }')"
    [[ -n "$uri" ]] && echo "$uri" && return
  done
  return 1
}

# What goes into the base root filesystem (hashed into the base tag, so editing it gives a new base).
base_recipe() { # <rootfs> <mirror>
  local root="$1"
  debootstrap --variant=minbase --include="$base_packages" "$suite" "$root" "$2"
  # Running Python needs none of apt's lists and caches, logs, documentation (the copyright files stay) or the
  # command-line tools' message translations (a third of /usr).
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old
  rm -rf "$root"/var/log/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/lintian
  find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
  find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  # debootstrap copies in the host's name and resolver; container runtimes provide both.
  rm -f "$root/etc/hostname" "$root/etc/resolv.conf"
}

base_tag="$({ echo "$suite $base_packages $arch"; declare -f base_recipe; } | short_hash)"
base_ref="llmaz.local/base:$base_tag"

build_base() {
  image_exists "$base_ref" && return
  local mirror="${DEBIAN_MIRROR:-}" rootfs="$scratch/rootfs" c start=$SECONDS
  [[ -n "$mirror" ]] || mirror="$(debian_mirror)" ||
    die "no Debian mirror for $suite in /etc/apt/sources.list*: set DEBIAN_MIRROR"
  command -v debootstrap >/dev/null || die "debootstrap not found: run hack/node/install-packages.sh"
  say "building base image $base_ref: debootstrap $suite from $mirror (~40 s, once)"
  run_logged "$logs_dir/base.log" base_recipe "$rootfs" "$mirror"
  # Devices, proc and sys come from the container runtime.
  tar --numeric-owner -C "$rootfs" --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
    -cf "$scratch/rootfs.tar" .
  rm -rf --one-file-system "$rootfs"
  c="$(bh from --quiet scratch)"
  containers+=("$c")
  bh add --quiet "$c" "$scratch/rootfs.tar" / >/dev/null
  rm -f "$scratch/rootfs.tar"
  bh config --os linux --arch "$arch" --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd '["python3"]' "$c"
  bh commit --quiet --rm --format oci "$c" "$base_ref" >/dev/null
  say "built $base_ref in $((SECONDS - start)) s"
}

# The host's pip settings, which the dependency layers need to reach the package index the host reaches: each from
# PIP_<NAME> in the environment, else from pip's configuration files.
pip_config=""
pip_setting() { # <option name, e.g. index-url>
  local env_name="PIP_$(tr 'a-z-' 'A-Z_' <<<"$1")"
  if [[ -n "${!env_name:-}" ]]; then
    echo "${!env_name}"
    return
  fi
  awk -v key="$1" '
    { name = $0; sub(/=.*/, "", name); value = substr($0, length(name) + 2) }
    name == "global." key || name == "install." key || name == "site." key {
      gsub(/^'\''|'\''$/, "", value)
      found = value
    }
    END { print found }' <<<"$pip_config"
}
pip_build_args() {
  local option value
  for option in index-url extra-index-url trusted-host default-timeout; do
    value="$(pip_setting "$option")"
    [[ -z "$value" ]] || echo "--build-arg=PIP_$(tr 'a-z-' 'A-Z_' <<<"$option")=$value"
  done
}

# Builds <dockerfile> as <ref> with the layer cache; the host's CA bundle (or pip's own cert file) stands in for the
# image's during RUN, so pip can cross a TLS proxy only the host trusts; the image keeps Debian's bundle.
python_image() { # <name> <dockerfile> <ref> [extra bud arguments...]
  local name="$1" dockerfile="$2" ref="$3" cert args=() start=$SECONDS
  shift 3
  image_exists "$ref" && return
  [[ -n "$pip_config" ]] || pip_config="$(python3 -m pip config list 2>/dev/null || true)"
  cert="$(pip_setting cert)"
  [[ -f "$cert" ]] || cert="$host_ca"
  if [[ -f "$cert" ]]; then
    args+=(-v "$cert:/etc/ssl/certs/ca-certificates.crt:ro" --build-arg PIP_CERT=/etc/ssl/certs/ca-certificates.crt)
  fi
  mapfile -t -O "${#args[@]}" args < <(pip_build_args)
  say "building $name image $ref (~30 s the first time, ~10 s after a source change)"
  run_logged "$logs_dir/$name.log" bh bud --isolation chroot --network host --pull=never --layers --force-rm \
    --format oci --build-arg "PYTHON_IMAGE=$base_ref" "${args[@]}" "$@" -f "$context/$dockerfile" -t "$ref" "$context"
  say "built $ref in $((SECONDS - start)) s"
}

# The build context, copied once per run: the tag is computed from, and the image built from, the same files even
# while someone edits the tree.
context="$scratch/context"
snapshot_context() {
  [[ -d "$context" ]] && return
  mkdir -p "$context"
  (cd "$repo" && tar --exclude=__pycache__ --exclude='*.pyc' -cf - pyproject.toml README.md requirements .dockerignore \
    Dockerfile Dockerfile.loader Dockerfile.envoy src/llmaz) | tar -C "$context" -xf -
}

context_tag() { # <dockerfile> [more key material...]
  local dockerfile="$1"
  shift
  snapshot_context
  {
    files_digest "$context" pyproject.toml README.md requirements src/llmaz .dockerignore "$dockerfile"
    printf '%s\n' "$base_ref" "$@"
    declare -f python_image
  } | short_hash
}

# A static binary alone in an otherwise empty image, its entrypoint, run as <user>. The tag may stay while the binary
# under it changes: the previous image goes first (by both its names, or :latest would keep it).
static_image() { # <ref> <binary> <path in the image> <user>
  local c
  bh rmi "$1" "${1%:*}:latest" >/dev/null 2>&1 || true
  c="$(bh from --quiet scratch)"
  containers+=("$c")
  bh copy --quiet --chmod 0755 "$c" "$2" "$3" >/dev/null
  bh config --os linux --arch "$arch" --entrypoint "[\"$3\"]" --user "$4" "$c"
  bh commit --quiet --rm --format oci "$c" "$1" >/dev/null
}

build_pause() { # <ref>
  image_exists "$1" && return
  local start=$SECONDS
  command -v go >/dev/null || die "go not found: the pause image's binary is built from hack/images/pause"
  say "building pause image $1"
  # Static (no cgo), so it runs from an empty image; the local toolchain only, and no module downloads (stdlib only).
  (cd "$here/pause" && CGO_ENABLED=0 GOOS=linux GOARCH="$arch" GOTOOLCHAIN=local GOFLAGS=-buildvcs=false GOPROXY=off \
    go build -trimpath -ldflags "-s -w" -o "$scratch/pause" .)
  # 65535: the user Kubernetes' own pause image runs as; nothing in the sandbox needs root.
  static_image "$1" "$scratch/pause" /pause 65535:65535
  say "built $1 in $((SECONDS - start)) s"
}

# The directories of the Prometheus Operator's binaries and of Prometheus's, one per line, built if missing.
prometheus_dirs() {
  "$repo/hack/cluster/build.sh" --prometheus | tail -n 2 || die "hack/cluster/build.sh --prometheus failed"
}

llama_binary() {
  if [[ -n "${LLAMA_SERVER_BIN:-}" ]]; then
    echo "$LLAMA_SERVER_BIN"
    return
  fi
  [[ -x "$repo/hack/llamacpp/build.sh" ]] ||
    die "hack/llamacpp/build.sh not found: it builds llama-server (or set LLAMA_SERVER_BIN to a static one)"
  local out
  out="$("$repo/hack/llamacpp/build.sh")" || die "hack/llamacpp/build.sh failed"
  echo "${out##*$'\n'}"
}

build_llama_server() { # <ref> <llama-server binary> <rpc-server binary>
  local c start=$SECONDS
  say "building llama-server image $1"
  # The tag stays while the binary under it changes: the previous image goes first (by both its names, or :latest
  # would keep it).
  bh rmi "$1" "${1%:*}:latest" >/dev/null 2>&1 || true
  c="$(bh from --quiet --pull=never "$base_ref")"
  containers+=("$c")
  bh copy --quiet --chmod 0755 "$c" "$2" /app/llama-server >/dev/null
  bh copy --quiet --chmod 0755 "$c" "$3" /app/rpc-server >/dev/null
  # The llamacpp BackendRuntime runs `./llama-server` from the working directory. Non-root: it writes nothing but
  # what a pod mounts.
  # The base's CMD goes first: an entrypoint would take it as an argument.
  bh config --cmd '' "$c"
  bh config --os linux --arch "$arch" --workingdir /app --entrypoint '["/app/llama-server"]' \
    --env HOME=/tmp --user 65532:65532 --port 8080 "$c"
  bh commit --quiet --rm --format oci "$c" "$1" >/dev/null
  say "built $1 in $((SECONDS - start)) s"
}

records=()
# Exports <ref> to its archive unless the archive exists for <key>; <build...> makes the image first.
export_image() { # <name> <ref> <key> <build command...>
  local name="$1" ref="$2" key="$3" archive old start
  shift 3
  archive="$images_dir/$name-${ref##*:}.oci.tar"
  if [[ ! -f "$archive" || "$(cat "$archive.key" 2>/dev/null)" != "$key" ]]; then
    "$@"
    bh tag "$ref" "${ref%:*}:latest"
    start=$SECONDS
    rm -f "$archive.tmp"
    run_logged "$logs_dir/$name-push.log" bh push --quiet --format oci --compression-format gzip --compression-level 1 \
      "$ref" "oci-archive:$archive.tmp:$ref"
    mv "$archive.tmp" "$archive"
    echo "$key" >"$archive.key.tmp" && mv "$archive.key.tmp" "$archive.key"
    say "exported $ref to $archive ($(du -m "$archive" | cut -f1) MB) in $((SECONDS - start)) s"
    for old in "$images_dir/$name"-*.oci.tar; do
      [[ "$old" == "$archive" ]] || rm -f "$old" "$old.key"
    done
    # Older tags of the repository go too; their layers stay while the layer cache (unnamed images) uses them.
    for old in $(bh images --noheading --format '{{.Name}}:{{.Tag}}' --filter "reference=${ref%:*}"); do
      [[ "$old" == "${ref%:*}:"* && "$old" != "$ref" && "$old" != "${ref%:*}:latest" ]] || continue
      bh rmi "$old" >/dev/null 2>&1 || true
    done
  fi
  records+=("$name" "$ref" "$archive")
}

for name in "${targets[@]}"; do
  case "$name" in
    manager)
      build_base
      ref="llmaz.local/llmaz:$(context_tag Dockerfile)"
      export_image manager "$ref" "$ref" python_image manager Dockerfile "$ref"
      ;;
    envoy)
      build_base
      snapshot_context
      ref="llmaz.local/envoy:$({ files_digest "$context" requirements/envoy.txt Dockerfile.envoy .dockerignore
        printf '%s\n' "$base_ref"; declare -f python_image; } | short_hash)"
      export_image envoy "$ref" "$ref" python_image envoy Dockerfile.envoy "$ref"
      ;;
    loader)
      build_base
      ref="llmaz.local/model-loader:$(context_tag Dockerfile.loader "EXTRAS=$loader_extras")"
      export_image loader "$ref" "$ref" python_image loader Dockerfile.loader "$ref" --build-arg "EXTRAS=$loader_extras"
      ;;
    pause)
      ref="llmaz.local/pause:$({ files_digest "$here/pause" .; echo "$arch"; declare -f build_pause static_image; } |
        short_hash)"
      export_image pause "$ref" "$ref" build_pause "$ref"
      ;;
    llama-server)
      binary="$(llama_binary)"
      [[ -x "$binary" ]] || die "llama-server binary $binary not found or not executable"
      rpc_binary="$(dirname "$binary")/rpc-server"
      [[ -x "$rpc_binary" ]] ||
        die "$rpc_binary not found or not executable: hack/llamacpp/build.sh builds it beside llama-server"
      version="$(basename "$(dirname "$binary")")"
      [[ "$version" == llama-server-?* ]] || die "$binary: expected it in a llama-server-<version>/ directory"
      version="${version#llama-server-}"
      # The base has no libraries llama-server could link against: only a static binary runs there.
      for static in "$binary" "$rpc_binary"; do
        ! ldd "$static" >/dev/null 2>&1 || die "$static is dynamically linked: the image needs a static build"
      done
      build_base
      key="$({ sha256sum <"$binary"; sha256sum <"$rpc_binary"; echo "$base_ref"; declare -f build_llama_server; } |
        short_hash)"
      export_image llama-server "llmaz.local/llama-server:$version" "$key" \
        build_llama_server "llmaz.local/llama-server:$version" "$binary" "$rpc_binary"
      ;;
    prometheus | prometheus-operator | prometheus-config-reloader)
      mapfile -t dirs < <(prometheus_dirs)
      ((${#dirs[@]} == 2)) || die "hack/cluster/build.sh --prometheus printed no directories"
      case "$name" in
        prometheus) dir="${dirs[1]}" binary="${dirs[1]}/prometheus" ;;
        prometheus-operator) dir="${dirs[0]}" binary="${dirs[0]}/operator" ;;
        *) dir="${dirs[0]}" binary="${dirs[0]}/prometheus-config-reloader" ;;
      esac
      version="$(basename "$dir")"
      version="v${version##*-v}"
      key="$({ sha256sum <"$binary"; echo "$arch"; declare -f static_image; } | short_hash)"
      # 65534 (nobody), as upstream's images: none writes anything but what its pod mounts.
      export_image "$name" "llmaz.local/$name:$version" "$key" static_image "llmaz.local/$name:$version" "$binary" \
        "/bin/${binary##*/}" 65534:65534
      ;;
    llmaz-go)
      binary="${LLMAZ_GO_BIN:-}"
      [[ -n "$binary" ]] || die "llmaz-go needs LLMAZ_GO_BIN=<dir>/<version>/manager: run hack/llmaz-go/build.sh instead"
      [[ -x "$binary" ]] || die "LLMAZ_GO_BIN=$binary is not an executable file"
      ! ldd "$binary" >/dev/null 2>&1 || die "LLMAZ_GO_BIN=$binary is dynamically linked: the image needs a static build"
      version="$(basename "$(dirname "$binary")")"
      key="$({ sha256sum <"$binary"; echo "$arch"; declare -f static_image; } | short_hash)"
      # /manager as 65532 (distroless's nonroot), as upstream's image: its Deployment runs `/manager`.
      export_image llmaz-go "llmaz.local/llmaz-go:$version" "$key" static_image "llmaz.local/llmaz-go:$version" \
        "$binary" /manager 65532:65532
      ;;
  esac
done

python3 - "$index" "${records[@]}" <<'EOF'
import json
import os
import sys

path, fields = sys.argv[1], sys.argv[2:]
try:
    with open(path) as f:
        index = json.load(f)
except (FileNotFoundError, ValueError):
    index = {}
for name, image, archive in zip(fields[0::3], fields[1::3], fields[2::3]):
    index[name] = {"image": image, "archive": archive}
with open(path + ".tmp", "w") as f:
    json.dump(index, f, indent=2, sort_keys=True)
    f.write("\n")
os.replace(path + ".tmp", path)
EOF
echo "$index"
