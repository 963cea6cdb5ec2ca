#!/usr/bin/env bash
# The test command: set up the environment if needed, then run the whole test suite, slow tests
# (real models, every notebook in the smoke profile) included, on 2 pytest-xdist workers (measured
# on the 2-core machine: 71 s with -n 2 against 104-134 s serially for the same tests). Extra
# arguments go to pytest (the 25 slowest tests are listed at the end), e.g.  bash scripts/test.sh -m "not slow",
# bash scripts/test.sh tests/test_pipeline.py, or -n 0 to run serially.
# Tests are distributed by file (--dist loadfile), so a module fixture (the agent on the real models,
# the smoke run of every notebook, the real export) is built once, on the worker that runs that file.
# (--dist loadgroup with @pytest.mark.xdist_group does not group under pytest 9: xdist 3.8 renames
# item._nodeid, which pytest 9 no longer reads, and both workers built the smoke run at once.)
# --no-loadscope-reorder: files go out in the order tests/conftest.py sorts them (the smoke-run file, then the
# other slow ones, first), not xdist's default of the files with the most tests first (which started the smoke
# run, the longest piece, only after a dozen short files).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup_env.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
# The suite starts many Python processes (workers, notebook kernels, worker pools) that import the library:
# with PYTHONDONTWRITEBYTECODE set (these machines set it) each compiled mags_lib's sources again (0.4 s of the
# 1.3 s that importing its agent, training, game, textworld, export and consolidation modules takes, measured).
# Bytecode goes to __pycache__/ folders, which git ignores.
unset PYTHONDONTWRITEBYTECODE
exec "${MAGS_VENV:-$ROOT/.venv}/bin/python" -m pytest -n 2 --dist loadfile --no-loadscope-reorder --durations=25 "$@"
