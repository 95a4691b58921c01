#!/usr/bin/env bash
# Vulkan (run 32): the window kernel's GPU form of phase C (a part's tokens'
# sums reduced independently, then each token's window terms in order:
# shaders/window.glsl's SPLIT_SUMS), forced onto the GPU by RSSM_VK_WINDOW=1,
# against one step per token (=0): conformance of the verify cases, and
# bench/h200/batch_run_probe.c (.devbin/p32/) at 16 rows x 8 layers, 64 x 4
# and 256 x 1, as runs 29-30. The shader change: split_sums.patch (not kept).
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/r32; mkdir -p "$O"
for d in .gl/*.deb; do dpkg -x "$d" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export LD_LIBRARY_PATH=$PWD/.devbin/p32
P=.devbin/p32/batch_run_probe R=.devbin/p32/rssm
RSSM_VK_WINDOW=1 RSSM_VK_PIPELINE_STATS=1 timeout 60 $P vulkan 16 1 bench >"$O/stats-16.txt" 2>&1
echo "stats: rc $?"; grep "window.*Register" "$O/stats-16.txt" | sed 's/spec=[0-9,]*,\([0-9]*\) /T \1 /'
RSSM_VK_WINDOW=1 timeout 100 $R conform --quick --backend vulkan --case verify >"$O/conform.txt" 2>&1
echo "conform: rc $?"; tail -1 "$O/conform.txt"
probe() { # rows layers label [env...]
  local rows=$1 layers=$2 label=$3; shift 3
  env "$@" timeout 60 $P vulkan $rows $layers bench >"$O/probe-$rows-$label.txt" 2>&1
  echo "rows $rows layers $layers $label: rc $?"; tail -2 "$O/probe-$rows-$label.txt"
}
probe 256 1 kernel RSSM_VK_WINDOW=1
probe 256 1 steps RSSM_VK_WINDOW=0
probe 16 8 kernel RSSM_VK_WINDOW=1
probe 64 4 kernel RSSM_VK_WINDOW=1
tar -C "$OUT" -czf "$OUT/r32.tgz" r32 && rm -rf "$O"
