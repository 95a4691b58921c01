#!/usr/bin/env bash
# Vulkan (run 33): the window kernel's next block of rows loaded before the
# current block's tokens (shaders/window.glsl with PREFETCH, which a GPU's
# read-only pipelines have) against without (RSSM_VK_PREFETCH=0), forced onto
# the GPU by RSSM_VK_WINDOW=1: bench/h200/batch_run_probe.c (.devbin/p33/)
# at 256 rows x 1 layer, 64 x 4 and 16 x 8, as runs 29-30; then conformance
# of the verify cases with the kernel. The shader change: prefetch.patch (not
# kept).
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/r33; mkdir -p "$O"
for d in .gl/*.deb; do dpkg -x "$d" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export LD_LIBRARY_PATH=$PWD/.devbin/p33
P=.devbin/p33/batch_run_probe R=.devbin/p33/rssm
probe() { # rows layers label [env...]
  local rows=$1 layers=$2 label=$3; shift 3
  env "$@" timeout 40 $P vulkan $rows $layers bench >"$O/probe-$rows-$label.txt" 2>&1
  echo "rows $rows layers $layers $label: rc $?"; tail -2 "$O/probe-$rows-$label.txt"
}
probe 256 1 prefetch RSSM_VK_WINDOW=1 RSSM_VK_PIPELINE_STATS=1
grep "window.*Register" "$O/probe-256-prefetch.txt" | sed 's/spec=[0-9,]* //'
probe 256 1 noprefetch RSSM_VK_WINDOW=1 RSSM_VK_PREFETCH=0
probe 64 4 prefetch RSSM_VK_WINDOW=1
probe 16 8 prefetch RSSM_VK_WINDOW=1
probe 16 8 noprefetch RSSM_VK_WINDOW=1 RSSM_VK_PREFETCH=0
RSSM_VK_WINDOW=1 timeout 40 $R conform --quick --backend vulkan --case verify >"$O/conform.txt" 2>&1
echo "conform: rc $?"; tail -1 "$O/conform.txt"
tar -C "$OUT" -czf "$OUT/r33.tgz" r33 && rm -rf "$O"
