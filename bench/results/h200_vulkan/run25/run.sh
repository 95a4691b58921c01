#!/usr/bin/env bash
# Vulkan (run 25): rssm_batch_run's device time per step (every layer in one
# dispatch, one submission per step) against rssm_batch_time_steps's program
# of the same cycle (layer by layer in one command buffer), GDN fp32, L = 16,
# 8 layers, 16 and 256 rows, and rssm_batch_verify windows of 4 tokens
# (on a GPU one rssm_batch_run per token): bench/h200/batch_run_probe.c,
# built on Debian against the Vulkan build's librssm (.devbin/probe/).
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/r25; mkdir -p "$O"
for d in .gl/*.deb; do dpkg -x "$d" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
# The first call (call1/):
for rows in 16 256; do
  timeout 120 .devbin/probe/batch_run_probe vulkan $rows 8 >"$O/probe-$rows.txt" 2>&1
  echo "rows $rows: rc $?: $(tail -2 "$O/probe-$rows.txt" | tr '\n' ' ')"
done
RSSM_VK_ONE_DISPATCH=0 timeout 120 .devbin/probe/batch_run_probe vulkan 16 8 >"$O/probe-16-two.txt" 2>&1
echo "rows 16, two pipelines: rc $?: $(tail -2 "$O/probe-16-two.txt" | tr '\n' ' ')"
tar -C "$OUT" -czf "$OUT/r25.tgz" r25 && rm -rf "$O"
# The second and third calls (call2/, call3/), the same setup, then:
#   for rows in 16 256; do .devbin/probe/batch_run_probe vulkan $rows 8 bench; done
#   for c in "16 raw" "16 bf16" "16 bench" "16 none" "256 raw" "256 bf16"; do
#     set -- $c; .devbin/probe/batch_run_probe vulkan $1 8 $2; done
# each into probe-ROWS-MODE.txt (the probe's modes: bench = raw gates and
# bf16 activations, raw, bf16, none = the preset's).
