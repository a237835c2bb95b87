# Sourced (not run) by scripts/build-cuda and scripts/check-cuda-build, from the
# repository root: puts CUDA 13.0's nvcc on PATH and the libraries the GPU build links
# against on LIBRARY_PATH, on a machine with no GPU and no CUDA toolkit. nvcc, the
# runtime, cuBLAS, cuBLASLt, cuRAND and NVRTC come from PyPI into a virtual environment
# under ~/.cache/jury/cuda-toolkit (reused on later runs), unless an `nvcc` is already on
# PATH. The driver library (libcuda.so.1) has no PyPI package: the link uses a stub
# generated from the toolkit's cuda.h, as the toolkit's own lib64/stubs does; the GPU
# machine's driver provides the real one. Sets CUDA_COMPUTE_CAP (default 90: H100, H200)
# and CARGO_TARGET_DIR (default ~/.cache/jury-cuda-target: a CUDA build shares nothing
# with the CPU one).
if ! command -v nvcc >/dev/null; then
  venv=${XDG_CACHE_HOME:-$HOME/.cache}/jury/cuda-toolkit
  cu13() { ls -d "$venv"/lib/python3*/site-packages/nvidia/cu13 2>/dev/null | head -1; }
  if [ -z "$(cu13)" ] || [ ! -e "$(cu13)/bin/nvcc" ] || [ ! -e "$(cu13)/lib/libcublas.so.13" ]; then
    echo "fetching the CUDA 13.0 compiler and libraries from PyPI into $venv" >&2
    "${PYTHON:-python3}" -m venv "$venv"
    # 13.0: the newest CUDA that mistralrs-quant 0.8.1's and cudarc's build scripts know,
    # and what the GPU machines' driver (580) runs; it loads no PTX from a newer compiler.
    "$venv/bin/pip" install -q 'nvidia-cuda-nvcc==13.0.88' 'nvidia-cuda-runtime==13.0.88' \
      'nvidia-cuda-crt==13.0.88' 'nvidia-nvvm==13.0.88' 'nvidia-cuda-cccl==13.0.85' \
      'nvidia-cuda-nvrtc==13.0.88' 'nvidia-curand>=10.4,<10.5' 'nvidia-cublas>=13.0,<13.1'
  fi
  cuda=$(cu13)
  # Unversioned names for the linker, and the driver stub: every driver function cuda.h
  # declares, under the names its #defines give them (cuMemAlloc -> cuMemAlloc_v2).
  link=${XDG_CACHE_HOME:-$HOME/.cache}/jury/cuda-link
  mkdir -p "$link"
  for lib in cudart.so.13 nvrtc.so.13 curand.so.10 cublas.so.13 cublasLt.so.13; do
    ln -sf "$cuda/lib/lib$lib" "$link/lib${lib%.so.*}.so"
  done
  if [ ! -f "$link/libcuda.so" ] || [ "$cuda/include/cuda.h" -nt "$link/libcuda.so" ]; then
    {
      grep -oE "CUresult CUDAAPI cu[A-Za-z0-9_]+" "$cuda/include/cuda.h" | awk '{print $3}'
      grep -E "^#define cu[A-Za-z0-9_]+ +cu[A-Za-z0-9_]+ *$" "$cuda/include/cuda.h" | awk '{print $3}'
    } | sort -u | awk '{print "void " $1 "(void) {}"}' > "$link/cuda-stub.c"
    cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$link/libcuda.so" "$link/cuda-stub.c"
  fi
  export PATH="$cuda/bin:$PATH" CUDA_HOME="$cuda" CUDA_ROOT="$cuda" LIBRARY_PATH="$link${LIBRARY_PATH:+:$LIBRARY_PATH}"
fi
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/jury-cuda-target}
nvcc --version | tail -1
