#!/usr/bin/env bash
# Vulkan (run 16): a block's eight row sums reduced by a reduce-scatter and a
# broadcast (shaders/decode.comp subgroup_sum_rows: 17 shuffles for a subgroup
# of 32) where two vec4 subgroupAdds took 40, against the binary of the commit
# before; both built on Debian with Vulkan only (bench/results/h200_vulkan/notes.md,
# run 16). .devbin/rssm_vkb: commit 3cb191f; .devbin/rssm_vkn: the commit that
# brought subgroup_sum_rows.
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/vk16
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
for b in vkb vkn; do sed 's/rssm vulkan pipeline //' "$O/r1/$b.pipelines.txt" | grep CS | grep -o "decode_[a-z_]*\|Register Count=[0-9]*\|Shared Memory Size=[0-9]*" | paste -d' ' - - - | sort | uniq -c | sed "s/^/$b /"; done
for round in 1 2; do for b in vkb vkn; do [ -f "$O/r$round/$b.txt" ] || continue; echo "-- $b r$round"; grep -E "^(gdn|kda) " "$O/r$round/$b.txt"; done; done
