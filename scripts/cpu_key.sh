#!/usr/bin/env bash
# Print a short key (8 hex digits) for this CPU's instruction sets.
#
#   bash scripts/cpu_key.sh            # e.g. 3f2a9c1e
#
# scripts/setup_env.sh keeps the llama-cpp-python wheel it compiles in a folder named with this key: the
# wheel is built with -march=native, so a wheel compiled on one kind of CPU either crashes on another
# (SIGILL: an AVX-512 build on an AVX2-only CPU) or runs there without its wider vector units (an AVX2
# build on an AVX-512 CPU, silently slower), e.g. with a home folder shared between machines.
# The key hashes the machine type and the sorted instruction-set flags of the first processor listed
# (Linux: the `flags` line of /proc/cpuinfo, `Features` on ARM; macOS: sysctl's feature lists), so
# clock speeds, core counts and load never change it. MAGS_CPUINFO overrides the cpuinfo path (tests).
set -euo pipefail

cpuinfo="${MAGS_CPUINFO:-/proc/cpuinfo}"
desc=""
if [ -r "$cpuinfo" ]; then
    desc="$(grep -m1 -E '^(flags|Features)[[:space:]]*:' "$cpuinfo" | cut -d: -f2- \
        | tr -s ' \t' '\n' | sed '/^$/d' | LC_ALL=C sort -u | tr '\n' ' ' || true)"
elif command -v sysctl >/dev/null 2>&1; then
    desc="$(sysctl -n machdep.cpu.features machdep.cpu.leaf7_features 2>/dev/null | tr '\n' ' ' || true)"
fi
if command -v sha256sum >/dev/null 2>&1; then
    hash() { sha256sum; }
else
    hash() { shasum -a 256; }
fi
printf '%s %s' "$(uname -m)" "${desc:-unknown}" | hash | cut -c1-8
