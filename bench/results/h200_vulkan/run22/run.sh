#!/usr/bin/env bash
# Vulkan (run 22): decode.comp's read-only rows with a block's ring d
# loaded with the block (RD_AHEAD where PREFETCH is on: rd_ahead.patch over
# run21/stream.patch; not kept, notes.md), against the same kernel without.
# .devbin/rssm_a: before, .devbin/rssm_b: after (Vulkan only, built on
# Debian); RSSM_VK_STREAM=0 in both (decode.comp's read-only pipeline).
# Conformance of the new build, its registers, then `rssm bench`
# alternating twice.
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/r22; mkdir -p "$O"
for d in .gl/*.deb; do dpkg -x "$d" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export RSSM_VK_STREAM=0
timeout 200 .devbin/rssm_b conform --backend vulkan >"$O/conform.txt" 2>&1
echo "conform rc $?: $(tail -1 "$O/conform.txt")"
RSSM_VK_PIPELINE_STATS=1 timeout 100 .devbin/rssm_b bench --backend vulkan --gate gdn,kda --state fp32,bf16 \
  --ring-len 16 --batch 256 --positions uniform --cycles 1 >"$O/stats.txt" 2>&1
grep -E "decode_replay" "$O/stats.txt" | grep -E "Regist" | sed -E 's/spec=[0-9,]*//' | head -8
ARGS="--backend vulkan --gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 16,128,256 --positions uniform --cycles 5"
for r in 1 2; do for s in a b; do
  # shellcheck disable=SC2086
  timeout 200 .devbin/rssm_$s bench $ARGS --out "$O/bench-$s-$r" >"$O/bench-$s-$r.txt" 2>&1
  echo "bench $s round $r: rc $?"
done; done
python3 - "$O" <<'PY'
import json, sys
o = sys.argv[1]
runs = {s: [json.load(open(f"{o}/bench-{s}-{r}.json"))["rows"] for r in (1, 2)] for s in "ab"}
print(f"{'gate':4} {'state':5} {'batch':>5}  us/layer: packed a r1, a r2, b r1, b r2 | replay the same | empty, full, flush a r1 / b r1")
for i, x in enumerate(runs["a"][0]):
    per = lambda s, r, k: runs[s][r][i].get(k, float('nan')) / runs[s][r][i]["layers"]
    f = lambda k: " ".join(f"{per(s, r, k):7.2f}" for s in "ab" for r in (0, 1))
    e = lambda s: " ".join(f"{per(s, 0, k):7.2f}" for k in ("empty_us", "full_us", "flush_us"))
    print(f"{x['gate']:4} {x['state_dtype']:5} {x['batch']:5}  {f('packed_us')} | {f('replay_us')} | {e('a')} / {e('b')}")
PY
tar -C "$OUT" -czf "$OUT/r22.tgz" r22 && rm -rf "$O"
