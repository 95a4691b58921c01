#!/usr/bin/env bash
# Vulkan (run 20): the persistent read-only kernel (shaders/stream.glsl, the
# first form of run21/stream.patch: each subgroup's units' words in
# registers, the walk unrolled whole; not kept, notes.md). One binary
# (.devbin/rssm_s: Vulkan only, built on Debian with that patch on 65f5f80);
# the old read-only pipeline is RSSM_VK_STREAM=0. Conformance with the stream kernel, the driver's
# statistics of its pipelines, `rssm bench` with it off and on alternating
# twice, then its workgroups per layer swept (RSSM_VK_STREAM_GROUPS).
# .gl/: the loader packages (docs/h200.md).
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/r20; mkdir -p "$O"
for d in .gl/*.deb; do dpkg -x "$d" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
CLI=$PWD/.devbin/rssm_s
timeout 240 "$CLI" conform --backend vulkan >"$O/conform.txt" 2>&1
echo "conform rc $?: $(tail -1 "$O/conform.txt")"
grep -E " FAIL " "$O/conform.txt" | head
RSSM_VK_PIPELINE_STATS=1 timeout 120 "$CLI" bench --backend vulkan --gate gdn,kda --state fp32,bf16 --ring-len 16 \
  --batch 16,256 --positions uniform --cycles 1 >"$O/stats.txt" 2>&1
grep -E "decode_stream|decode_replay" "$O/stats.txt" | grep -iE "regist|pipeline" | head -24
ARGS="--backend vulkan --gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 16,256 --positions uniform --cycles 5"
for r in 1 2; do for s in 0 1; do
  # shellcheck disable=SC2086
  RSSM_VK_STREAM=$s timeout 200 "$CLI" bench $ARGS --out "$O/bench-s$s-$r" >"$O/bench-s$s-$r.txt" 2>&1
  echo "bench stream=$s round $r: rc $?"
done; done
for g in 264 528 792 1056 1584 2112; do
  RSSM_VK_STREAM_GROUPS=$g timeout 100 "$CLI" bench --backend vulkan --gate gdn,kda --state fp32,bf16 --ring-len 16 \
    --batch 256 --positions uniform --cycles 3 --out "$O/groups-$g" >"$O/groups-$g.txt" 2>&1
  echo "groups $g: rc $?"
done
python3 - "$O" <<'PY'
import json, sys, os
o = sys.argv[1]
runs = {s: [json.load(open(f"{o}/bench-s{s}-{r}.json"))["rows"] for r in (1, 2)] for s in (0, 1)}
print(f"{'gate':4} {'state':5} {'batch':>5}  us/layer: packed s0 r1, s0 r2, s1 r1, s1 r2 | replay the same | empty, full, flush s0 r1 / s1 r1")
for i, a in enumerate(runs[0][0]):
    per = lambda s, r, k: runs[s][r][i].get(k, float('nan')) / runs[s][r][i]["layers"]
    f = lambda k: " ".join(f"{per(s, r, k):7.2f}" for s in (0, 1) for r in (0, 1))
    e = lambda s: " ".join(f"{per(s, 0, k):7.2f}" for k in ("empty_us", "full_us", "flush_us"))
    print(f"{a['gate']:4} {a['state_dtype']:5} {a['batch']:5}  {f('packed_us')} | {f('replay_us')} | {e(0)} / {e(1)}")
for g in (264, 528, 792, 1056, 1584, 2112):
    p = f"{o}/groups-{g}.json"
    if not os.path.exists(p):
        continue
    rows = json.load(open(p))["rows"]
    print(g, " ".join(f"{r['gate']}/{r['state_dtype']} {r['replay_us'] / r['layers']:.1f}" for r in rows))
PY
