#!/usr/bin/env bash
# Builds a fully static, CPU-only llama.cpp `llama-server` from the llama.cpp vendored in the llama-cpp-python
# sdist, for the tests and the images that serve a real (tiny) model on this machine.
#
# Usage: hack/llamacpp/build.sh            build if missing; the last stdout line is the binary's path
#        hack/llamacpp/build.sh --print    print the binary's path only
#
# Invariants:
# - The version comes only from hack/llamacpp/version (`llama-cpp-python==<v>`); outputs are keyed by it:
#   $LLMAZ_CACHE/src/llama_cpp_python-<v>.tar.gz (the sdist, fetched once from PyPI) and
#   $LLMAZ_CACHE/bin/llama-server-<v>/{llama-server,vocab-llama-spm.gguf}.
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
out_dir="$cache/bin/llama-server-$version"
binary="$out_dir/llama-server"

case "${1:-}" in
  --print) echo "$binary"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--print]" >&2; exit 2 ;;
esac

if [[ -x "$binary" ]]; then
  echo "$binary"
  exit 0
fi

src_dir="$cache/src"
mkdir -p "$src_dir" "$cache/bin"
exec 9>"$cache/bin/.llama-server.lock"
flock 9
# Another run may have finished while this one waited for the lock.
if [[ -x "$binary" ]]; then
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

echo "building llama-server $version (~6 min on 2 cores, once)" >&2
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
  -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF >&2
cmake --build "$scratch/build" -j2 --target llama-server >&2

staged="$scratch/out"
mkdir -p "$staged"
strip -o "$staged/llama-server" "$scratch/build/bin/llama-server"
cp "$llama/models/ggml-vocab-llama-spm.gguf" "$staged/vocab-llama-spm.gguf"
"$staged/llama-server" --version >&2
# Only a complete build is ever renamed into place, so anything already there without the binary is debris.
rm -rf "$out_dir"
mv -T "$staged" "$out_dir"

echo "$binary"
