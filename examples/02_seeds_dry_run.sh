#!/usr/bin/env bash
# Three seeds of the default cell, printed as a table; nothing runs.
set -euo pipefail
.venv/bin/python -m autorl.sweep task=gsm8k seed=0,1,2 dry_run=true
