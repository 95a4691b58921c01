#!/usr/bin/env bash
# The CUDA io helpers without branches on the dtype (notes.md, "2026-12-04"):
# .devbin/rssm_old (the CLI of 4e397cb, CUDA on, Vulkan off) against
# .devbin/rssm_new (the same with cuda/kernel_common.cuh's io_value,
# load_io and store_io forming both 16-bit conversions and selecting one),
# both built on Debian; alternating, two rounds, replay and packed at
# batches 4 and 256, bf16 and fp32 state.
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/ab; mkdir -p "$O"
# The new binary's conformance first (every CUDA variant, fp16 io among the
# cases: the helpers read and write every io dtype).
timeout 240 .devbin/rssm_new conform --quick >"$O/conform.txt" 2>&1
echo "conform --quick (rssm_new): rc $?: $(tail -1 "$O/conform.txt")"
A="--backend cuda --gate gdn,kda --state bf16,fp32 --ring-len 16 --batch 4,256 --positions uniform --cycles 3"
for r in 1 2; do for b in rssm_old rssm_new; do
  # shellcheck disable=SC2086
  timeout 60 .devbin/$b bench $A --out "$O/$b-$r" >"$O/$b-$r.txt" 2>&1
  echo "bench $b round $r: rc $?"
done; done
python3 - "$O" <<'PY'
import json, sys
o = sys.argv[1]
runs = {b: [json.load(open(f"{o}/{b}-{r}.json"))["rows"] for r in (1, 2)] for b in ("rssm_old", "rssm_new")}
print("us per step per layer, rounds 1 and 2: old | new")
print(f"{'gate':4} {'state':5} {'batch':>5}  {'replay old':>13} {'replay new':>13}  {'packed old':>13} {'packed new':>13}")
for i, x in enumerate(runs["rssm_old"][0]):
    per = lambda b, r, k: runs[b][r][i][k] / runs[b][r][i]["layers"]
    f = lambda b, k: f"{per(b, 0, k):6.1f} {per(b, 1, k):6.1f}"
    print(f"{x['gate']:4} {x['state_dtype']:5} {x['batch']:5}  {f('rssm_old', 'replay_us')} {f('rssm_new', 'replay_us')}"
          f"  {f('rssm_old', 'packed_us')} {f('rssm_new', 'packed_us')}")
PY
tar -C "$OUT" -czf "$OUT/ab.tgz" ab && rm -rf "$O"
