#!/usr/bin/env bash
# Start a Ray head (token auth is on by default in Ray 2.60), run a sweep on it, stop it by PID.
set -euo pipefail
TMP=$(mktemp -d /tmp/ray-example-XXXX)
.venv/bin/ray start --head --port 6399 --temp-dir "$TMP" --num-cpus 2 --include-dashboard false \
  --disable-usage-stats
# Stop only this head's processes, found by its temp dir (never `ray stop`: it stops every Ray
# process on the machine).
trap 'for pid in $(pgrep -f "$TMP"); do kill "$pid" 2>/dev/null || true; done' EXIT
.venv/bin/python -m autorl.sweep cluster.address=127.0.0.1:6399 agent.sft.max_steps=60 \
  out_dir=outputs/examples
