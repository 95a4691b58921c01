#!/usr/bin/env bash
# Vulkan (run 28): the window kernel with pipelines for 4 and 8 tokens
# (shaders/window.glsl's WINDOW_T) beside the ring's 15, forced onto the GPU
# by RSSM_VK_WINDOW=1, against one step per token (=0): device time of
# rssm_batch_verify windows of 4 and 8 tokens after half a second of them,
# beside a program of the steps they stand for (bench/h200/batch_run_probe.c,
# built on Debian against the Vulkan build's librssm, .devbin/p28/), and the
# driver's statistics of the window pipelines.
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/r28; mkdir -p "$O"
for d in .gl/*.deb; do dpkg -x "$d" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export LD_LIBRARY_PATH=$PWD/.devbin/p28
P=.devbin/p28/batch_run_probe
RSSM_VK_WINDOW=1 RSSM_VK_PIPELINE_STATS=1 timeout 60 $P vulkan 16 1 bench >"$O/stats-16.txt" 2>&1
echo "stats: rc $?"; grep "window.*Register" "$O/stats-16.txt" | sed 's/spec=[0-9,]*,\([0-9]*\) /T \1 /'
for rows in ${ROWS:-16 256}; do
  layers=$([ $rows = 16 ] && echo 8 || echo 1)
  for w in ${WINS:-1 0}; do
    RSSM_VK_WINDOW=$w timeout 100 $P vulkan $rows $layers bench >"$O/probe-$rows-w$w.txt" 2>&1
    echo "rows $rows layers $layers window $w: rc $?"; tail -2 "$O/probe-$rows-w$w.txt"
  done
done
tar -C "$OUT" -czf "$OUT/r28.tgz" r28 && rm -rf "$O"
