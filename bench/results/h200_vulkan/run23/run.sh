#!/usr/bin/env bash
# Vulkan (run 23): subgroups per decode workgroup (vk_abi.h's
# RSSM_VK_SUBGROUPS) 2, 4 (as built) and 8: .devbin/rssm_N, Vulkan only,
# built on Debian from 84f1210 with that constant changed. A quick
# conformance of each, then `rssm bench` of the three in turn, twice.
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/r23; mkdir -p "$O"
for d in .gl/*.deb; do dpkg -x "$d" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
for n in 2 8; do
  timeout 60 .devbin/rssm_$n conform --quick --backend vulkan >"$O/conform-$n.txt" 2>&1
  echo "conform $n rc $?: $(tail -1 "$O/conform-$n.txt")"
done
ARGS="--backend vulkan --gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 16,256 --positions uniform --cycles 3"
for r in 1 2; do for n in 4 2 8; do
  # shellcheck disable=SC2086
  timeout 100 .devbin/rssm_$n bench $ARGS --out "$O/bench-$n-$r" >"$O/bench-$n-$r.txt" 2>&1
  echo "bench $n round $r: rc $?"
done; done
python3 - "$O" <<'PY'
import json, sys
o = sys.argv[1]
ns = ("4", "2", "8")
runs = {n: [json.load(open(f"{o}/bench-{n}-{r}.json"))["rows"] for r in (1, 2)] for n in ns}
print(f"{'gate':4} {'state':5} {'batch':>5}  us/layer, rounds 1 and 2, subgroups 4, 2, 8: packed | replay | empty, full, flush (round 1)")
for i, x in enumerate(runs["4"][0]):
    per = lambda n, r, k: runs[n][r][i].get(k, float('nan')) / runs[n][r][i]["layers"]
    f = lambda k: "  ".join(f"{per(n, 0, k):.1f} {per(n, 1, k):.1f}" for n in ns)
    e = lambda n: " ".join(f"{per(n, 0, k):.1f}" for k in ("empty_us", "full_us", "flush_us"))
    print(f"{x['gate']:4} {x['state_dtype']:5} {x['batch']:5}  {f('packed_us')} | {f('replay_us')} | " + " / ".join(e(n) for n in ns))
PY
tar -C "$OUT" -czf "$OUT/r23.tgz" r23 && rm -rf "$O"
