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
# Concurrent callers (the browser tests run in parallel) take turns: a second apt-get
# would fail on apt's own lock. The one after the first finds the browser installed.
if command -v flock >/dev/null; then
  exec 9>"${TMPDIR:-/tmp}/jury-install-chromium.lock"
  flock 9
  if bin=$(found); then echo "$bin"; exit 0; fi
fi
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
# Wait for another apt process (an unattended upgrade) instead of failing on its lock.
wait_lock=(-o DPkg::Lock::Timeout=600)
"${as_root[@]}" apt-get "${wait_lock[@]}" update -q >&2
DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get "${wait_lock[@]}" install -y -q chromium >&2
bin=$(found) || { echo "error: chromium was installed but does not run" >&2; exit 1; }
echo "$bin"
