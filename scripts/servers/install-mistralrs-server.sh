#!/usr/bin/env bash
# mistral.rs's OpenAI-compatible server (`mistralrs serve`, crate mistralrs-cli 0.8.1, the
# version jury's in-process judge links) built from crates.io into $HOME/.cache.
# Idempotent: prints the binary's path and does nothing else when it is already installed
# and runs. The first build takes about 14 minutes on 2 cores (829 s measured) (its own target directory,
# kept until the build succeeds, so an interrupted build resumes).
#
#   scripts/servers/install-mistralrs-server.sh     # prints /path/to/mistralrs
set -euo pipefail
root=${JURY_SERVERS_DIR:-$HOME/.cache/servers}
dest=$root/mistralrs-0.8.1
bin=$dest/bin/mistralrs
if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
  echo "$bin"; exit 0
fi
mkdir -p "$dest"
echo "building mistralrs-cli 0.8.1 from crates.io (about 14 minutes once)" >&2
CARGO_TARGET_DIR=$root/mistralrs-target cargo install -q --locked --version 0.8.1 \
  --root "$dest" mistralrs-cli >&2
rm -rf "$root/mistralrs-target"
"$bin" --version >/dev/null 2>&1 || { echo "error: $bin does not run" >&2; exit 1; }
echo "$bin"
