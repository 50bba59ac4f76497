#!/usr/bin/env bash
# A whole Runpod run on this machine, no GPU and no Runpod account needed: the fake Runpod
# API on loopback, a fake pod behind it (a real SSH server on loopback, a real shell, the
# real bootstrap and watchdog), the stand-in trainer — and the real `overbrainer train`
# against them, through OVERBRAINER_RUNPOD__BASE_URL. Then `runs ls` and `events` for the
# run, and the fake server stops.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
py="$here/.venv/bin/python"
ob="$here/.venv/bin/overbrainer"
work="$(mktemp -d)"
server=""

stop_server() {
    if [ -n "$server" ]; then
        kill -TERM "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
        server=""
    fi
}
trap 'stop_server; rm -rf "$work"' EXIT

# 1. The fake Runpod API with living pods; it prints its URL, then an account key.
# (The watchdog checks every 5 s here instead of every minute, so its log says more.)
"$py" -m overbrainer.testing.fake_pod --print-url --workspace "$work/pods" \
    --provisioning-seconds 1 --starting-seconds 1 --env OVERBRAINER_INTERVAL=5 \
    >"$work/server.out" 2>"$work/server.err" &
server=$!
for _ in $(seq 1 300); do
    [ "$(wc -l <"$work/server.out")" -ge 2 ] && break
    if ! kill -0 "$server" 2>/dev/null; then
        cat "$work/server.err" >&2
        echo "demo: the fake Runpod server did not start" >&2
        exit 1
    fi
    sleep 0.1
done
url="$(sed -n 1p "$work/server.out")"
key="$(sed -n 2p "$work/server.out")"
[ -n "$key" ] || { echo "demo: the fake Runpod server gave no URL and key" >&2; exit 1; }

# 2. A project whose training target is a Runpod pod. The pod's trainer is the stand-in
# (a venv of our own: the fake pod runs no image, so the image below is never pulled).
"$ob" init "$work/project" >/dev/null
head -n 1 "$work/project/data/train.jsonl" >"$work/project/data/eval.jsonl"
sed -i 's/^target = "local"/target = "gpu"/' "$work/project/overbrainer.toml"
cat >>"$work/project/overbrainer.toml" <<'EOF'

[targets.gpu]
kind = "runpod"
gpu_types = ["NVIDIA GeForce RTX 4090", "NVIDIA A40"]
max_hours = 1
image = "ghcr.io/example/axolotl@sha256:0000000000000000000000000000000000000000000000000000000000000000"
retrieve_grace_minutes = 5
EOF
mkdir -p "$work/venv/bin"
cat >"$work/venv/bin/axolotl" <<EOF
#!/bin/sh
FAKE_AXOLOTL_STEPS=20 FAKE_AXOLOTL_STEP_SECONDS=0.15 exec "$py" "$here/overbrainer/testing/axolotl" "\$@"
EOF
chmod +x "$work/venv/bin/axolotl"
export OVERBRAINER_RUNPOD__BASE_URL="$url"
export OVERBRAINER_RUNPOD__API_KEY="$key"
export OVERBRAINER_TARGETS__GPU__VENV="$work/venv"

# 3. The real command, unmodified.
echo "\$ overbrainer train        # on target gpu: a Runpod pod (the fake one at $url)"
"$ob" -C "$work/project" train
echo
echo "\$ overbrainer runs ls"
"$ob" -C "$work/project" runs ls
run="$("$ob" -C "$work/project" runs ls --json | tail -n 1 |
    "$py" -c 'import json, sys; print(json.load(sys.stdin)["id"])')"
echo
echo "\$ overbrainer events $run"
"$ob" -C "$work/project" events "$run"
echo
echo "\$ overbrainer pod ls"
"$ob" -C "$work/project" pod ls
stop_server
