#!/usr/bin/env bash
# Vulkan (run 14): the ring's d staged in shared memory (RSSM_VK_STAGE_RING), a portable
# flush's KK_j in shared memory (RSSM_VK_KK_SHARED), and the flush prefetching
# its next block (RSSM_VK_PREFETCH=1), against the rule of HEAD (all off), one
# binary, each configuration twice in turn
# (an experimental decode.comp, not kept: bench/results/h200_vulkan/notes.md, run 14,
# says what each option did; the environment variables exist only in that binary)
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/vk14
mkdir -p "$O"
t0=$(date +%s)
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
RSSM_VK_STAGE_RING=1 RSSM_VK_KK_SHARED=1 timeout 150 .devbin/rssm_vkx conform --backend vulkan --backend vulkan:coopmat >"$O/conform.txt" 2>&1
echo "== conform (stage, kk): rc $?, $(tail -1 "$O/conform.txt") ($(($(date +%s)-t0)) s)"
grep -E " FAIL " "$O/conform.txt" | head
A="--backend vulkan --gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 16,256 --positions uniform --cycles 5"
for round in 1 2; do
  ARGS="$A" CLI=.devbin/rssm_vkx bash bench/h200/vulkan_tune.sh "$O/r$round" "base" "stage RSSM_VK_STAGE_RING=1" \
    "kk RSSM_VK_KK_SHARED=1" "both RSSM_VK_STAGE_RING=1 RSSM_VK_KK_SHARED=1" \
    "bothpf RSSM_VK_STAGE_RING=1 RSSM_VK_KK_SHARED=1 RSSM_VK_PREFETCH=1" >"$O/r$round.log" 2>&1
  echo "== round $round ($(($(date +%s)-t0)) s)"
  [ $(($(date +%s)-t0)) -gt 330 ] && break
done
for round in 1 2; do for b in base stage kk both bothpf; do [ -f "$O/r$round/$b.txt" ] || continue; echo "-- $b r$round"; grep -E "^(gdn|kda) " "$O/r$round/$b.txt"; done; done
for b in base both bothpf; do echo "-- $b"; sed 's/rssm vulkan pipeline //' "$O/r1/$b.pipelines.txt" | grep CS | grep -o "decode_[a-z_]* spec=[0-9]*,[0-9]*,[0-9]*,[0-9]*,[0-9]*,[0-9]*,[0-9]*,[0-9]*,[0-9]*,[0-9]*,[0-9]*,[0-9]*,[0-9]*\|Register Count=[0-9]*\|Local Memory Size=[0-9]*\|Shared Memory Size=[0-9]*" | paste -d' ' - - - - | sort -u; done
