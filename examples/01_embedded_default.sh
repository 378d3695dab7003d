#!/usr/bin/env bash
# The embedded default: results in outputs/default/, report in outputs/default/report/index.html.
set -euo pipefail
.venv/bin/python -m autorl.sweep
