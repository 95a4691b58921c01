#!/usr/bin/env bash
# The benchmark of the backends that run on this project's machines without a
# GPU: the CPU backend and Vulkan on lavapipe (Mesa's CPU driver). One run:
# builds, then `rssm bench` per backend (each configuration is checked against
# the float64 oracle before it is timed; copy bandwidth is measured in the same
# run), and writes CSV + JSON + the printed tables to bench/results/local/.
# The H200 benchmark is bench/h200/run.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=bench/results/local
mkdir -p "$out"
tools/setup
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" >/dev/null

{
  echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  build/rssm info
} | tee "$out/machine.txt"

# CPU: the Qwen3.5 GDN and Kimi-Linear KDA head shapes, batch 16 and 64, L=16,
# fp32 and bf16 state, 4 timed cycles, the bench's default state per step: four
# times the last-level cache (docs/bench.md), so none of it stays cached.
build/rssm bench --backend cpu --batch 16,64 --ring-len 16 --gate gdn,kda --state fp32,bf16 \
  --cycles 4 --out "$out/cpu" | tee "$out/cpu.txt"

# lavapipe is slow: batch 16, L=16, fp32 state, 2 cycles, 32 MiB.
if build/rssm info --started | grep -qx vulkan; then
  build/rssm bench --backend vulkan --batch 16 --ring-len 16 --gate gdn,kda --state fp32 \
    --cycles 2 --state-mib 32 --out "$out/lavapipe" | tee "$out/lavapipe.txt"
fi
