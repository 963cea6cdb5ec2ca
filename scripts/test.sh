#!/usr/bin/env bash
# The test command: set up the environment if needed, then run the whole test suite, slow tests
# (real models, every notebook in the smoke profile) included, on 2 pytest-xdist workers (measured
# on the 2-core machine: 71 s with -n 2 against 104-134 s serially for the same tests). Extra
# arguments go to pytest, e.g.  bash scripts/test.sh -m "not slow",
# bash scripts/test.sh tests/test_pipeline.py, or -n 0 to run serially. Tests marked
# @pytest.mark.xdist_group("name") run on one worker, so a module fixture they share (the agent on
# the real models, the smoke run of every notebook) is built once, not once per worker.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup_env.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
exec "${MAGS_VENV:-$ROOT/.venv}/bin/python" -m pytest -n 2 --dist loadgroup "$@"
