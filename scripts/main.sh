#!/usr/bin/env bash
# The main job: set up the environment if needed, then run the whole notebook sequence with
# papermill on the default profile into results/default/ (resumes: finished notebooks are skipped).
# Extra arguments go to the pipeline, e.g.  bash scripts/main.sh --run-tag try2 -p seed=1
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup_env.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
exec "${MAGS_VENV:-$ROOT/.venv}/bin/python" -m mags_lib.pipeline --profile default "$@"
