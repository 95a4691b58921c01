#!/usr/bin/env bash
# Vulkan (run 29): the window kernel dispatched in parts of 4 tokens
# (pipelines whose shared arrays hold 4: shaders/window.glsl's WINDOW_T),
# forced onto the GPU by RSSM_VK_WINDOW=1, against one step per token (=0),
# the window's device time now from the end of its inputs' copy.
#   - conformance of the verify cases with the kernel;
#   - bench/h200/batch_run_probe.c (.devbin/p29/, built on Debian against the
#     Vulkan build's librssm): windows of 4 and 8 tokens after half a second
#     of them, beside a program of the steps they stand for, GDN fp32, 16 rows
#     x 8 layers and 256 rows x 1 layer; at 256 rows parts of 2 and 8 tokens
#     too (RSSM_VK_WINDOW_TOKENS);
#   - rssm bench --verify 4,8 (GDN and KDA, fp32, 16 and 256 rows) with and
#     without the kernel.
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/r29; mkdir -p "$O"
for d in .gl/*.deb; do dpkg -x "$d" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export LD_LIBRARY_PATH=$PWD/.devbin/p29
P=.devbin/p29/batch_run_probe R=.devbin/p29/rssm
RSSM_VK_WINDOW=1 RSSM_VK_PIPELINE_STATS=1 timeout 60 $P vulkan 16 1 bench >"$O/stats-16.txt" 2>&1
echo "stats: rc $?"; grep "window.*Register" "$O/stats-16.txt" | sed 's/spec=[0-9,]*,\([0-9]*\) /T \1 /'
RSSM_VK_WINDOW=1 timeout 150 $R conform --quick --backend vulkan --case verify >"$O/conform.txt" 2>&1
echo "conform: rc $?"; tail -1 "$O/conform.txt"
probe() { # rows layers label [env...]
  local rows=$1 layers=$2 label=$3; shift 3
  env "$@" timeout 100 $P vulkan $rows $layers bench >"$O/probe-$rows-$label.txt" 2>&1
  echo "rows $rows layers $layers $label: rc $?"; tail -2 "$O/probe-$rows-$label.txt"
}
probe 16 8 kernel RSSM_VK_WINDOW=1
probe 16 8 steps RSSM_VK_WINDOW=0
probe 256 1 kernel RSSM_VK_WINDOW=1
probe 256 1 steps RSSM_VK_WINDOW=0
probe 256 1 parts2 RSSM_VK_WINDOW=1 RSSM_VK_WINDOW_TOKENS=2
probe 256 1 parts8 RSSM_VK_WINDOW=1 RSSM_VK_WINDOW_TOKENS=8
for w in 1 0; do
  RSSM_VK_WINDOW=$w timeout 170 $R bench --backend vulkan --gate gdn,kda --state fp32 --batch 16,256 --ring-len 16 \
    --positions uniform --cycles 3 --verify 4,8 --accept 100 --out "$O/bench-w$w" >"$O/bench-w$w.txt" 2>&1
  echo "bench window $w: rc $?"; grep -A12 -i "verify" "$O/bench-w$w.txt" | tail -8
done
tar -C "$OUT" -czf "$OUT/r29.tgz" r29 && rm -rf "$O"
