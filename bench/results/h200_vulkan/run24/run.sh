#!/usr/bin/env bash
# Vulkan (run 24): 1. is the speculative-decode verify window bound by
# arithmetic on the H200 (where cooperative matrices would pay) or by the
# state's bytes? `rssm bench --verify` of windows of 4 and 8 tokens, all
# accepted, on `vulkan` (.devbin/rssm_4: the CLI of 84f1210, Vulkan
# only, kernels unchanged since) and on `cuda` (.devbin/rssm_new), fp32
# state, batches 16 and 256.
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/r24; mkdir -p "$O"
for d in .gl/*.deb; do dpkg -x "$d" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
STAGES=${STAGES:-verify prefetch window}  # the calls ran some stages each
if [[ " $STAGES " == *" verify "* ]]; then
ARGS="--gate gdn,kda --state fp32 --ring-len 16 --batch 16,256 --positions uniform --verify 4,8 --accept 100 --cycles 3"
for b in "rssm_4 vulkan" "rssm_new cuda"; do
  set -- $b
  # shellcheck disable=SC2086
  timeout 150 .devbin/$1 bench --backend $2 $ARGS --out "$O/bench-$2" >"$O/bench-$2.txt" 2>&1
  echo "bench $2: rc $?"
done
for b in vulkan cuda; do echo "== $b"; sed -n '/verify/,$p' "$O/bench-$b.txt" | head -30; done
fi
# 2. The flush pipeline with a second block of rows in flight
#    (RSSM_VK_PREFETCH=1: the read-only and packed pipelines have it
#    already; vk_pipeline.c leaves it out of the flush for registers),
#    against the default, alternating, two rounds, fp32 and bf16 state.
if [[ " $STAGES " == *" prefetch "* ]]; then
ARGS="--backend vulkan --gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 16,256 --positions uniform --cycles 3"
for r in 1 2; do for p in default 1; do
  # shellcheck disable=SC2086
  if [ $p = default ]; then env -u RSSM_VK_PREFETCH RSSM_VK_PIPELINE_STATS=1 timeout 100 .devbin/rssm_4 bench $ARGS --out "$O/pf-$p-$r" >"$O/pf-$p-$r.txt" 2>&1
  else RSSM_VK_PREFETCH=1 RSSM_VK_PIPELINE_STATS=1 timeout 100 .devbin/rssm_4 bench $ARGS --out "$O/pf-$p-$r" >"$O/pf-$p-$r.txt" 2>&1; fi
  echo "bench prefetch $p round $r: rc $?"
done; done
grep -h "decode_replay .*\[CS\]" "$O/pf-default-1.txt" "$O/pf-1-1.txt" | sed 's/spec=\([0-9]*,\)\{12\}\([0-9]*\),\([0-9]*\),\([0-9]*\),\([0-9]*\),.*\[CS\]/flush_rows=\2 spb=\3 split=\4 prefetch=\5/' | sort | uniq -c | head
python3 - "$O" <<'PY'
import json, sys
o = sys.argv[1]
vs = ("default", "1")
runs = {p: [json.load(open(f"{o}/pf-{p}-{r}.json"))["rows"] for r in (1, 2)] for p in vs}
print("us per step per layer, rounds 1 and 2, prefetch in the flush: default | on")
print(f"{'gate':4} {'state':5} {'batch':>5}  {'flush':>27}  {'replay':>27}  {'empty':>13}")
for i, x in enumerate(runs["default"][0]):
    per = lambda p, r, k: runs[p][r][i].get(k, float("nan")) / runs[p][r][i]["layers"]
    f = lambda k: " | ".join(f"{per(p, 0, k):6.1f} {per(p, 1, k):6.1f}" for p in vs)
    print(f"{x['gate']:4} {x['state_dtype']:5} {x['batch']:5}  {f('flush_us')}  {f('replay_us')}  {per('default', 0, 'empty_us'):6.1f} {per('1', 0, 'empty_us'):6.1f}")
PY
fi
# 3. The verify's step per token on the GPU (vk_batch_verify hands the
#    window back to common code there): GDN fp32, windows of 4, as before
#    and with each step's layers dispatched one by one with two pipelines
#    (RSSM_VK_ONE_DISPATCH=0), and the replay program's own figures beside.
if [[ " $STAGES " == *" window "* ]]; then
ARGS="--backend vulkan --gate gdn --state fp32 --ring-len 16 --batch 16,256 --positions uniform --verify 4 --accept 100 --cycles 3"
for v in default 0; do
  # shellcheck disable=SC2086
  if [ $v = default ]; then timeout 120 .devbin/rssm_4 bench $ARGS >"$O/win-$v.txt" 2>&1
  else RSSM_VK_ONE_DISPATCH=0 timeout 120 .devbin/rssm_4 bench $ARGS >"$O/win-$v.txt" 2>&1; fi
  echo "window, one dispatch $v: rc $?"; grep -E "^gdn " "$O/win-$v.txt"
done
fi
tar -C "$OUT" -czf "$OUT/r24.tgz" r24 && rm -rf "$O"
