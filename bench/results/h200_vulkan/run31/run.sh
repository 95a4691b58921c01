#!/usr/bin/env bash
# Vulkan (run 31): does shared memory bind the decode pipelines' residency
# on the H200? An experimental build (pad.patch: every decode pipeline
# declares RSSM_VK_SHARED_PAD more bytes of shared memory, touched only
# under a condition never met) timed by rssm bench at 0, 1, 2, 4 and 8 KiB
# more, GDN, fp32 and bf16 state, L = 16, 256 and 16 rows (a second round
# of 4 and 0 KiB).
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/r31; mkdir -p "$O"
for d in .gl/*.deb; do dpkg -x "$d" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
R=.devbin/p31/rssm
RSSM_VK_PIPELINE_STATS=1 RSSM_VK_SHARED_PAD=0 timeout 60 $R bench --backend vulkan --gate gdn --state fp32 --batch 16 \
  --ring-len 16 --positions uniform --cycles 1 >"$O/stats.txt" 2>&1
grep "Register" "$O/stats.txt" | sed 's/spec=[0-9,]* //' | head
for round in 1 2; do
  pads="0 1024 2048 4096 8192"; [ $round = 2 ] && pads="4096 0"
  for pad in $pads; do
    RSSM_VK_SHARED_PAD=$pad timeout 100 $R bench --backend vulkan --gate gdn --state fp32,bf16 --batch 16,256 \
      --ring-len 16 --positions uniform --cycles 3 --out "$O/pad$pad-r$round" >"$O/pad$pad-r$round.txt" 2>&1
    echo "pad $pad round $round: rc $?"
  done
done
python3 - "$O" <<'PY'
import json, sys, glob, os
o = sys.argv[1]
for f in sorted(glob.glob(o + "/pad*-r*.json"), key=lambda p: (int(os.path.basename(p)[3:].split("-")[0]), p)):
    for r in json.load(open(f))["rows"]:
        if r.get("status") == "ok":
            print(os.path.basename(f)[:-5], r["state_dtype"], r["batch"], "packed %.1f replay %.1f empty %.1f full %.1f flush %.1f" % (
                r["packed_layer_us"], r["replay_layer_us"], r["empty_us"] / r["layers"], r["full_us"] / r["layers"], r["flush_us"] / r["layers"]))
PY
tar -C "$OUT" -czf "$OUT/r31.tgz" r31 && rm -rf "$O"
