#!/usr/bin/env bash
# Debian's Chromium, for the report's browser test and scripts/screenshot-report.
# Idempotent: prints the browser's path and does nothing else when one is on PATH and
# runs. Otherwise installs Debian's `chromium` package with apt-get (as root, or through
# sudo without a password); elsewhere it fails saying what to install.
#
#   scripts/install-chromium.sh     # prints /path/to/chromium
set -euo pipefail
found() {
  local bin
  bin=$(command -v chromium || command -v chromium-browser || true)
  [ -n "$bin" ] && "$bin" --version >/dev/null 2>&1 && echo "$bin"
}
if bin=$(found); then echo "$bin"; exit 0; fi
if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  echo "error: no chromium on PATH, and installing it needs root: apt-get install chromium" >&2
  exit 1
fi
command -v apt-get >/dev/null || { echo "error: no chromium on PATH and no apt-get: install Chromium from your system's packages" >&2; exit 1; }
echo "installing Debian's chromium with apt-get (about a minute once)" >&2
"${as_root[@]}" apt-get update -q >&2
DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -q chromium >&2
bin=$(found) || { echo "error: chromium was installed but does not run" >&2; exit 1; }
echo "$bin"
