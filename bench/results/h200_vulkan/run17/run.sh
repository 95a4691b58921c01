#!/usr/bin/env bash
# Vulkan (run 17): a bf16 state's packed step and a replay step's read-only
# rows in blocks of eight rows held as their bf16 words (shaders/decode.comp
# RSSM_STATE16, the `_s16` modules), so that a subgroup has as many bytes in
# flight per block as an fp32 block of four, against the binary of the commit
# before; both built on Debian with Vulkan only (bench/results/h200_vulkan/notes.md,
# run 17). .devbin/rssm_vkb: commit 832182d; .devbin/rssm_vkn: the commit that
# brought the `_s16` modules.
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/vk17
mkdir -p "$O"
t0=$(date +%s)
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
timeout 200 .devbin/rssm_vkn conform --backend vulkan --backend vulkan:coopmat >"$O/conform.txt" 2>&1
echo "== conform: rc $?, $(tail -1 "$O/conform.txt") ($(($(date +%s)-t0)) s)"
grep -E " FAIL " "$O/conform.txt" | head
A="--backend vulkan --gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 1,16,256 --positions uniform --cycles 5"
for b in vkb vkn; do
  ARGS="$A" CLI=.devbin/rssm_$b bash bench/h200/vulkan_tune.sh "$O/r1" "$b" >"$O/r1-$b.log" 2>&1
done
echo "== round 1 ($(($(date +%s)-t0)) s)"
A2="--backend vulkan --gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 256 --positions uniform --cycles 5"
for b in vkn vkb; do
  ARGS="$A2" CLI=.devbin/rssm_$b bash bench/h200/vulkan_tune.sh "$O/r2" "$b" >"$O/r2-$b.log" 2>&1
done
echo "== round 2, batch 256 ($(($(date +%s)-t0)) s)"
for b in vkb vkn; do sed 's/rssm vulkan pipeline //' "$O/r1/$b.pipelines.txt" | grep CS | grep -o "decode_[a-z0-9_]*\|Register Count=[0-9]*\|Shared Memory Size=[0-9]*" | paste -d' ' - - - | sort | uniq -c | sed "s/^/$b /"; done
for round in 1 2; do for b in vkb vkn; do [ -f "$O/r$round/$b.txt" ] || continue; echo "-- $b r$round"; grep -E "^(gdn|kda) " "$O/r$round/$b.txt"; done; done
