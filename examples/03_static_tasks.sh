#!/usr/bin/env bash
# The scripted agent on gsm8k, humaneval and alpacaeval (offline fixtures) with a short recipe.
set -euo pipefail
.venv/bin/python -m autorl.sweep task=gsm8k,humaneval,alpacaeval \
  agent.sft.max_steps=60 agent.grpo.max_steps=4 out_dir=outputs/examples
.venv/bin/python -m autorl.report outputs/examples/default-*/
