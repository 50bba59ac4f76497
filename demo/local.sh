#!/usr/bin/env bash
# A whole training run on this machine with the stand-in trainer: init, train, runs ls, events.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
ob="$here/.venv/bin/overbrainer"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$ob" init "$work/project" >/dev/null
mkdir -p "$work/venv/bin"
ln -s "$here/overbrainer/testing/axolotl" "$work/venv/bin/axolotl"
head -n 1 "$work/project/data/train.jsonl" > "$work/project/data/eval.jsonl"
export OVERBRAINER_TARGETS__LOCAL__VENV="$work/venv"
export FAKE_AXOLOTL_STEPS=20 FAKE_AXOLOTL_STEP_SECONDS=0.15

echo "\$ overbrainer train"
"$ob" -C "$work/project" train
echo
echo "\$ overbrainer runs ls"
"$ob" -C "$work/project" runs ls
run="$("$ob" -C "$work/project" runs ls --json | tail -n 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')"
echo
echo "\$ overbrainer events $run"
"$ob" -C "$work/project" events "$run"
