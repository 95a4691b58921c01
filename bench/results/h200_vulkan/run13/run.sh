#!/usr/bin/env bash
# Vulkan: a replay step as one dispatch of every row against two (RSSM_VK_ONE_DISPATCH), small batches
cd "$(dirname "$0")/.." || exit 1
O=$OUT/vk9
mkdir -p "$O"
t0=$(date +%s)
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
timeout 240 .devbin/rssm_vk1 conform --backend vulkan --backend vulkan:coopmat >"$O/conform.txt" 2>&1
echo "== conform: rc $?, $(tail -1 "$O/conform.txt") ($(($(date +%s)-t0)) s)"
grep -E " FAIL " "$O/conform.txt" | head
A="--backend vulkan --gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 1,4,16,64 --positions uniform --cycles 5"
for round in 1 2; do
  ARGS="$A" CLI=.devbin/rssm_vk1 bash bench/h200/vulkan_tune.sh "$O/r$round" "two RSSM_VK_ONE_DISPATCH=0" "one RSSM_VK_ONE_DISPATCH=1" >"$O/r$round.log" 2>&1
  echo "== round $round ($(($(date +%s)-t0)) s)"
done
for round in 1 2; do for b in two one; do echo "-- $b r$round"; grep -E "^(gdn|kda) " "$O/r$round/$b.txt" | cut -c1-60,150-; done; done
