#!/usr/bin/env bash
# Builds a fully static, CPU-only llama.cpp `llama-server`, and `rpc-server` (the RPC backend's worker, which a
# multi-host leader's `llama-server --rpc` drives), from the llama.cpp vendored in the llama-cpp-python sdist, for
# the tests and the images that serve a real (tiny) model on this machine.
#
# Usage: hack/llamacpp/build.sh            build if missing; the last stdout line is llama-server's path
#        hack/llamacpp/build.sh --print    print llama-server's path only (rpc-server is beside it)
#
# Invariants:
# - The version comes only from hack/llamacpp/version (`llama-cpp-python==<v>`); the sdist is keyed by it,
#   $LLMAZ_CACHE/src/llama_cpp_python-<v>.tar.gz (fetched once from PyPI), and the outputs by it and by this
#   script's build revision: $LLMAZ_CACHE/bin/llama-server-<v>-r<revision>/{llama-server,rpc-server,
#   vocab-llama-spm.gguf}. Raise the revision whenever the options or the outputs change: a directory built before
#   lacks what is new, and a new name has it rebuilt while the old one stays for whatever still uses it.
# - The binary is portable: static (no NSS, so give it a numeric --host), SSE4.2 only (no AVX/AVX2/FMA/F16C/BMI2),
#   no OpenMP, no OpenSSL, and no web UI (the default build downloads one, and only PyPI is reachable).
# - Everything is built into a scratch dir and the whole output directory appears by rename, so an interrupted
#   build is simply re-run. A lock serialises concurrent runs. Nothing is rebuilt when the binary exists.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${LLMAZ_CACHE:-$HOME/.cache/llmaz}"

pin="$(grep -Ev '^[[:space:]]*(#|$)' "$here/version" | head -n1 | tr -d '[:space:]')"
version="${pin#llama-cpp-python==}"
if [[ "$pin" != "llama-cpp-python==$version" || -z "$version" ]]; then
  echo "$here/version: expected one line 'llama-cpp-python==<version>', got '$pin'" >&2
  exit 1
fi
# 2: the RPC backend and rpc-server.
build_revision=2
out_dir="$cache/bin/llama-server-$version-r$build_revision"
binary="$out_dir/llama-server"
complete() { [[ -x "$binary" && -x "$out_dir/rpc-server" ]]; }

case "${1:-}" in
  --print) echo "$binary"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--print]" >&2; exit 2 ;;
esac

if complete; then
  echo "$binary"
  exit 0
fi

src_dir="$cache/src"
mkdir -p "$src_dir" "$cache/bin"
exec 9>"$cache/bin/.llama-server.lock"
flock 9
# Another run may have finished while this one waited for the lock.
if complete; then
  echo "$binary"
  exit 0
fi

scratch="$(mktemp -d "$cache/bin/.llama-server-build.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT

sdist="$src_dir/llama_cpp_python-$version.tar.gz"
if [[ ! -f "$sdist" ]]; then
  echo "fetching the llama-cpp-python $version sdist from PyPI (~77 MB, once)" >&2
  "${PYTHON:-python3}" -m pip download --quiet --no-deps --no-binary :all: "$pin" -d "$scratch/download" >&2
  mv "$scratch/download/"*.tar.gz "$sdist"
fi

echo "building llama-server and rpc-server $version (~7 min on 2 cores, once)" >&2
mkdir "$scratch/src"
tar -xzf "$sdist" -C "$scratch/src" --strip-components=1
llama="$scratch/src/vendor/llama.cpp"
cmake -S "$llama" -B "$scratch/build" \
  -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF \
  -DCMAKE_EXE_LINKER_FLAGS=-static \
  -DGGML_NATIVE=OFF \
  -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF \
  -DGGML_OPENMP=OFF \
  -DGGML_RPC=ON \
  -DGGML_RPC_RDMA=OFF \
  -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF >&2
# The RPC worker's target is ggml-rpc-server; it is staged under its usual name, rpc-server.
cmake --build "$scratch/build" -j2 --target llama-server ggml-rpc-server >&2

staged="$scratch/out"
mkdir -p "$staged"
strip -o "$staged/llama-server" "$scratch/build/bin/llama-server"
strip -o "$staged/rpc-server" "$scratch/build/bin/ggml-rpc-server"
cp "$llama/models/ggml-vocab-llama-spm.gguf" "$staged/vocab-llama-spm.gguf"
"$staged/llama-server" --version >&2
"$staged/rpc-server" --help 2>&1 | sed -n 1p >&2
# Only a complete build is ever renamed into place, so anything already there without the binaries is debris.
rm -rf "$out_dir"
mv -T "$staged" "$out_dir"

echo "$binary"
