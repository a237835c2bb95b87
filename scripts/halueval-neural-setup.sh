# Sourced (not run) by scripts/reproduce-halueval-neural and scripts/finetune-seeds, from
# the repository root: writes the authors' HaluEval dialogue judge outputs with each
# example's dialogue as context into $data (judgments.csv, labels.csv, contexts.csv;
# `jury import`, built by `cargo run`, whatever JURY names),
# fetches the encoder, and sets $jury to JURY=PATH or to this checkout's `jury` binary.
src=../shared/data/skillagg-judge-outputs/halueval_dialogue
dialogues=../shared/data/halueval/dialogue_data.json
[ -d "$src" ] && [ -f "$dialogues" ] || { echo "error: $src or $dialogues not found (not redistributed)" >&2; exit 2; }
scripts/fetch-encoder.sh >/dev/null
if [ -n "${JURY:-}" ]; then
  jury=$JURY
  [ -x "$jury" ] || { echo "error: JURY=$jury is not an executable" >&2; exit 2; }
else
  cargo build -q -p jury-cli --bin jury
  target_dir=$(scripts/target-dir)
  jury="$target_dir/debug/jury"
fi
# CONTEXT_STYLE: paper (the authors' prompt-shaped text, default) or fields (jury-v1's
# fields joined by " || ", shortest first, as `jury run` writes them;
# docs/reproduction/skill-aggregation.md says which tables used another order).
style=${CONTEXT_STYLE:-paper}
data=out/reproduce-halueval-neural/data-$style
mkdir -p "$data"
cargo run -q -p jury-cli --bin jury -- import skillagg-halueval --input "$src" --out "$data" \
  --dialogues "$dialogues" --context-style "$style" --force >/dev/null
