#!/usr/bin/env bash
# Vulkan (run 26): the one-dispatch window kernel (shaders/window.glsl) on the
# GPU, forced by RSSM_VK_WINDOW=1, against one step per token (=0), device
# time of rssm_batch_verify windows of 4 and 8 tokens after half a second of
# them, beside a program of the steps they stand for
# (bench/h200/batch_run_probe.c, built on Debian against the Vulkan build's
# librssm, .devbin/p26/); the driver's statistics of the window pipeline; the
# SM clock every 100 ms.
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/r26; mkdir -p "$O"
for d in .gl/*.deb; do dpkg -x "$d" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export LD_LIBRARY_PATH=$PWD/.devbin/p26
P=.devbin/p26/batch_run_probe
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 100 >"$O/clocks.csv" 2>&1 &
SMI=$!
RSSM_VK_WINDOW=1 RSSM_VK_PIPELINE_STATS=1 timeout 60 $P vulkan 16 1 bench >"$O/stats-16.txt" 2>&1
echo "stats: rc $?"; grep -A30 -i "window" "$O/stats-16.txt" | head -40
for rows in 16 256; do
  for w in 1 0; do
    RSSM_VK_WINDOW=$w timeout 150 $P vulkan $rows 8 bench >"$O/probe-$rows-w$w.txt" 2>&1
    echo "rows $rows window $w: rc $?"; tail -3 "$O/probe-$rows-w$w.txt"
  done
done
kill $SMI
tar -C "$OUT" -czf "$OUT/r26.tgz" r26 && rm -rf "$O"
