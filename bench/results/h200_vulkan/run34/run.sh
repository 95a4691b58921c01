#!/usr/bin/env bash
# Vulkan (run 34): a replay step's flush rows at staggered positions, where
# every step has rows/L of them: the two pipelines in order (read-only rows,
# then the flush rows), one pipeline of every row (RSSM_VK_ONE_DISPATCH=1),
# the flush rows' dispatch first (RSSM_VK_FLUSH_FIRST=1), the flush rows'
# pipeline split over 4 workgroups a head (RSSM_VK_FLUSH_SPLIT=4), and both
# of the last two; two rounds; then conformance with the last. .devbin/p34/rssm:
# built on Debian with CUDA and Vulkan on, from the commit with this script.
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/r34; mkdir -p "$O"
t0=$(date +%s)
for d in .gl/*.deb; do dpkg -x "$d" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export CLI=$PWD/.devbin/p34/rssm
export ARGS="--backend vulkan --gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 16,64,256 --positions staggered --cycles 3"
for round in 1 2; do
  bash bench/h200/vulkan_tune.sh "$O/r$round" "two" "one RSSM_VK_ONE_DISPATCH=1" "ffirst RSSM_VK_FLUSH_FIRST=1" \
    "fsplit4 RSSM_VK_FLUSH_SPLIT=4" "ffirst4 RSSM_VK_FLUSH_FIRST=1 RSSM_VK_FLUSH_SPLIT=4" >"$O/r$round.log" 2>&1
  echo "== round $round ($(($(date +%s)-t0)) s)"
  [ $(($(date +%s)-t0)) -gt 330 ] && break
done
RSSM_VK_FLUSH_FIRST=1 RSSM_VK_FLUSH_SPLIT=4 timeout 90 $CLI conform --quick --backend vulkan >"$O/conform.txt" 2>&1
echo "== conform: rc $?, $(tail -1 "$O/conform.txt") ($(($(date +%s)-t0)) s)"
for r in "$O"/r*/; do for b in two one ffirst fsplit4 ffirst4; do
  [ -f "$r/$b.txt" ] || continue
  echo "-- $b $(basename "$r")"; grep -E "^(gdn|kda) " "$r/$b.txt" | awk '{print $1, $2, $4, $5, $(NF-5), $(NF-4), $NF}'
done; done
tar -C "$OUT" -czf "$OUT/r34.tgz" r34 && rm -rf "$O"
