#!/usr/bin/env bash
# Vulkan (run 15): the ring's share of every row's readout formed once per
# workgroup before the row passes (shaders/decode.comp stage 1b) and the gates
# read with q and k, against the binary of the commit before, both built on
# Debian with Vulkan only, each twice in turn (bench/results/h200_vulkan/notes.md,
# run 15). .devbin/rssm_vkb: commit 3cb191f; .devbin/rssm_vkn: it with decode.patch
# (this folder's; measured slower and not kept).
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/vk15
mkdir -p "$O"
t0=$(date +%s)
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
timeout 200 .devbin/rssm_vkn conform --backend vulkan --backend vulkan:coopmat >"$O/conform.txt" 2>&1
echo "== conform: rc $?, $(tail -1 "$O/conform.txt") ($(($(date +%s)-t0)) s)"
grep -E " FAIL " "$O/conform.txt" | head
A="--backend vulkan --gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 1,16,256 --positions uniform --cycles 5"
for round in 1 2; do
  for b in vkb vkn; do
    ARGS="$A" CLI=.devbin/rssm_$b bash bench/h200/vulkan_tune.sh "$O/r$round" "$b" >"$O/r$round-$b.log" 2>&1
  done
  echo "== round $round ($(($(date +%s)-t0)) s)"
  [ $(($(date +%s)-t0)) -gt 400 ] && break
done
for b in vkb vkn; do sed 's/rssm vulkan pipeline //' "$O/r1/$b.pipelines.txt" | grep CS | grep -o "decode_[a-z_]*\|Register Count=[0-9]*\|Local Memory Size=[0-9]*\|Shared Memory Size=[0-9]*" | paste -d' ' - - - - | sort | uniq -c | sed "s/^/$b /"; done
for round in 1 2; do for b in vkb vkn; do [ -f "$O/r$round/$b.txt" ] || continue; echo "-- $b r$round"; grep -E "^(gdn|kda) " "$O/r$round/$b.txt"; done; done
