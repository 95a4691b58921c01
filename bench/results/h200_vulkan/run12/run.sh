#!/usr/bin/env bash
# run8 part 2: Vulkan decode A/B (HEAD's shaders against consecutive row blocks and one exp per GDN entry)
cd "$(dirname "$0")/.." || exit 1
O=$OUT/vk8
mkdir -p "$O"
t0=$(date +%s)
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
timeout 240 .devbin/rssm_vknew conform --backend vulkan --backend vulkan:coopmat >"$O/conform.txt" 2>&1
echo "== conform vknew: rc $?, $(tail -1 "$O/conform.txt") ($(($(date +%s)-t0)) s)"
grep -E " FAIL " "$O/conform.txt" | head
A="--backend vulkan --gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 16,256 --positions uniform --cycles 5"
for round in 1 2; do
  for b in vkbase vknew; do
    ARGS="$A" CLI=.devbin/rssm_$b bash bench/h200/vulkan_tune.sh "$O/r$round" "$b" >"$O/r$round-$b.log" 2>&1
    echo "== $b round $round ($(($(date +%s)-t0)) s)"
  done
done
for round in 1 2; do for b in vkbase vknew; do echo "-- $b r$round"; grep -E "^(gdn|kda) " "$O/r$round/$b.txt"; done; done
