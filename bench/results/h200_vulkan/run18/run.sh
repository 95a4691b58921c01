#!/usr/bin/env bash
# Vulkan (run 18): the results of record (results.md, summary.json beside
# notes.md) after run 17's `_s16` modules: conformance of every Vulkan
# variant, `rssm bench` of `vulkan` and `vulkan:coopmat`, and of CUDA with the
# same arguments in the same call, then the report against the targets
# (docs/h200.md). .devbin/rssm: built on Debian with CUDA and Vulkan on, from
# the commit that brought this script; .gl/: the loader packages (docs/h200.md).
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/r18
export CLI=$PWD/.devbin/rssm
export BENCH_ARGS="--gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 1,16,128,256 --positions uniform,staggered --cycles 5"
STAGES="vulkan bench" CONFORM_TIMEOUT=200 BENCH_TIMEOUT=200 bash bench/h200/run.sh "$O" >"$O.log" 2>&1
grep "^== " "$O.log"
python3 bench/h200/vulkan_report.py "$O/bench.json" "$O/bench-vulkan.json" "$O/bench-vulkan-coopmat.json" "$O/report"
sed -n '/## Targets/,/## All rows/p' "$O/report/results.md"
