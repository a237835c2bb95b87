#!/usr/bin/env bash
# mistral.rs's OpenAI-compatible server (`mistralrs serve`, crate mistralrs-cli 0.8.1, the
# version jury's in-process judge links), for the server-judge tests. Built from the
# crate as crates.io publishes it (sha256 checked), as a workspace of its own that uses
# jury's Cargo.lock, jury's patched mistralrs-core and openai-harmony (at the same path
# relative to the workspace root, through a link), jury's profile and jury's target
# directory. jury-judge turns on the features the server turns on in the crates both
# share, and the lines below the reverse (jury's features the server does not ask for),
# so each shared crate, mistralrs-core included, compiles once for both: after jury's
# build this compiles only the server's own crates (docs/benchmarks/build.md, "The
# tests' mistral.rs server from jury's build"). The binary is kept in
# $HOME/.cache/servers/mistralrs-0.8.1-ID/bin, ID naming jury's patches, manifest and
# lock file (a change to any builds a new server). Idempotent: prints the binary's path
# and does nothing else when it is already installed and runs.
#
#   scripts/servers/install-mistralrs-server.sh     # prints /path/to/mistralrs
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
root=${JURY_SERVERS_DIR:-$HOME/.cache/servers}
id=$(cat "$repo"/crates/vendor/*.diff "$repo/Cargo.toml" "$repo/Cargo.lock" | sha256sum | cut -c1-12)
dest=$root/mistralrs-0.8.1-$id
bin=$dest/bin/mistralrs
installed() { [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; }
. "$(dirname "$0")/once.sh"
once mistralrs-0.8.1
src=$root/mistralrs-cli-0.8.1
sum=26bc2a0267ea22fa09eb61c6e78257f58d2704671c9666527ccb91a29275939c
if [ ! -f "$src/Cargo.toml.published" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  curl -sSfL -o "$tmp/crate.tar.gz" https://static.crates.io/crates/mistralrs-cli/0.8.1/download
  echo "$sum  $tmp/crate.tar.gz" | sha256sum -c --quiet
  tar -C "$tmp" -xzf "$tmp/crate.tar.gz"
  mv "$tmp/mistralrs-cli-0.8.1/Cargo.toml" "$tmp/mistralrs-cli-0.8.1/Cargo.toml.published"
  rm -rf "$src" && mv "$tmp/mistralrs-cli-0.8.1" "$src"
fi
# The published manifest, then: its own workspace; jury's patched crates; jury's profile
# for dependencies (the workspace Cargo.toml's, without jury's own crates' entries); the
# server itself at opt-level 1 like jury's wiring crates; and the features jury's test
# build turns on in crates the server shares (compared unit by unit with `cargo +nightly
# build --unit-graph -Z unstable-options` of both, which, unlike `cargo tree`, keeps the
# host's features apart; a list out of date costs build time, never a different server).
{
  cat "$src/Cargo.toml.published"
  printf '\n[workspace]\n\n[patch.crates-io]\n'
  printf 'mistralrs-core = { path = "crates/vendor/mistralrs-core" }\n'
  printf 'openai-harmony = { path = "crates/vendor/openai-harmony" }\n\n'
  sed -n '/^\[profile\.dev\.package\."\*"\]/,/^\[profile\.release\]/p' "$repo/Cargo.toml" |
    sed '/^\[profile\.release\]/d; /^\[profile\.dev\.package\.jury-/,/^opt-level/d'
  cat <<'TOML'
[profile.dev.package.mistralrs-cli]
opt-level = 1

[target.'cfg(all())'.dependencies]
bytemuck = { version = "1", features = ["avx512_simd"] }
fastrand = "2"
gemm = { version = "=0.19.0", features = ["x86-v4"] }
getrandom = { version = "0.4", features = ["std", "sys_rng"] }
minijinja = { version = "2", features = ["loader"] }
pulp = { version = "0.22", features = ["x86-v4"] }
rand_chacha = "0.9"
serde_json = { version = "1", features = ["float_roundtrip"] }
TOML
} > "$src/Cargo.toml"
# jury's patched crates at the same path relative to the workspace root as in jury's
# workspace: cargo names a path crate's build by that relative path, so only then is the
# server's mistralrs-core jury's.
mkdir -p "$src/crates"
ln -sfn "$repo/crates/vendor" "$src/crates/vendor"
cp "$repo/Cargo.lock" "$src/Cargo.lock"
# Run from a test, this inherits the variables cargo sets for the test (its package's
# name, version and folder); build scripts that watch them (ring's) would then rebuild
# the shared crates in place, and jury's next build would rebuild them back.
while read -r var; do unset "$var"; done < <(compgen -e | grep -E '^(CARGO_(PKG_|MANIFEST_|CRATE_|BIN_|PRIMARY_PACKAGE|TARGET_TMPDIR)|OUT_DIR$)')
target=$("$repo/scripts/target-dir")
echo "building mistralrs-cli 0.8.1 into $target (jury's build reused where it is there)" >&2
CARGO_TARGET_DIR=$target cargo build -q --manifest-path "$src/Cargo.toml" --bin mistralrs >&2
mkdir -p "$dest/bin"
cp "$target/debug/mistralrs" "$bin.tmp" && mv "$bin.tmp" "$bin"
installed || { echo "error: $bin does not run" >&2; exit 1; }
echo "$bin"
