#!/usr/bin/env bash
# Vulkan (run 30): the window kernel's workgroups per value head at 256 rows
# (RSSM_VK_ROW_SPLIT, which the window pipeline follows) and 64 rows.
cd "$(dirname "$0")/../../../.." || exit 1
O=$OUT/r30; mkdir -p "$O"
for d in .gl/*.deb; do dpkg -x "$d" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export LD_LIBRARY_PATH=$PWD/.devbin/p29
P=.devbin/p29/batch_run_probe
probe() { # rows layers label [env...]
  local rows=$1 layers=$2 label=$3; shift 3
  env "$@" timeout 60 $P vulkan $rows $layers bench >"$O/probe-$rows-$label.txt" 2>&1
  echo "rows $rows layers $layers $label: rc $?"; tail -2 "$O/probe-$rows-$label.txt"
}
probe 256 1 split2 RSSM_VK_WINDOW=1 RSSM_VK_ROW_SPLIT=2
probe 256 1 split4 RSSM_VK_WINDOW=1 RSSM_VK_ROW_SPLIT=4
probe 64 4 kernel RSSM_VK_WINDOW=1
probe 64 4 steps RSSM_VK_WINDOW=0
tar -C "$OUT" -czf "$OUT/r30.tgz" r30 && rm -rf "$O"
