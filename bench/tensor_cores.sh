#!/usr/bin/env bash
# The GPU run of the bulk kernel's tensor-core data path (docs/design.md §8,
# "The tensor-core data path"): correctness, the readout microbenchmark, the
# change against the previous build, and the engines' benchmark of record
# beside the published kernels, on the full GPU and on an H20-shaped part
# (CUDA MPS at 59%: 78 SMs). From the repository root on the GPU machine,
# with binaries built on Debian and carried (docs/h200.md):
#
#   STAGES="conform sanitize micro ab" bench/tensor_cores.sh OUT_DIR
#   STAGES="record" bench/tensor_cores.sh OUT_DIR          # full GPU
#   STAGES="record78 ab78 stages78" bench/tensor_cores.sh OUT_DIR   # 78 SMs
#
# NEW (default .devbin/new/rssm) and its librssm.so beside it; OLD (default
# .devbin/old/rssm, optional) the build before the change; READOUT the microbenchmark
# (bench/micro/readout.cu, default .devbin/readout); PEERS the published
# kernels' folder and HARNESS the anchor harness (../shared/peers-harness,
# copied into .peers/harness; its README). Stages:
#   conform   rssm conform on cuda:bulk (the tensor-core kernels) beside
#             cuda:stream (FFMA) on every case (CONFORM_VARIANTS), and on
#             cuda at 40 rows (unless CONFORM_B40=0)
#   sanitize  compute-sanitizer memcheck and racecheck of cuda:bulk on the
#             cases that run the tensor-core paths
#   micro     the readout microbenchmark; micro78: the same under MPS 59%
#   ab        rssm bench of OLD (where it exists) and of NEW under each
#             mode of AB_MODES (default "0 flush 1 auto": the FFMA
#             kernels, the flush on the tensor cores, the flush and the
#             readout, the plan's rule) on the same shapes, a table each
#   ab78      the same under MPS 59% (--sm-limit 78)
#   stages78  rssm bench of NEW under MPS 59% with the default 4 stages and
#             with as many as each kernel holds (RSSM_CUDA_BULK_STAGES)
#   record    the anchor harness (rssm's per-layer entry from torch in CUDA
#             graphs beside the published kernels): harness.json, table.txt
#   record78  the same under MPS 59%: harness-78.json, table-78.txt
set -u -o pipefail
OUT_DIR=${1:-${OUT:-$PWD/tc-out}}
STAGES=${STAGES:-"conform sanitize micro ab"}
NEW=${NEW:-.devbin/new/rssm}
OLD=${OLD:-.devbin/old/rssm}
READOUT=${READOUT:-.devbin/readout}
PEERS=${PEERS:-.peers/decode}
HARNESS=${HARNESS:-.peers/harness}
LIB=${LIB:-$(ls "$(dirname "$NEW")"/librssm.so.*.*.* 2>/dev/null | head -1)}
AB_ARGS=${AB_ARGS:-"--gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 16,64,256 --positions uniform --cycles 3"}
mkdir -p "$OUT_DIR"
SUMMARY=()
note() { SUMMARY+=("$1"); echo "== $1"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.total --format=csv,noheader

# shellcheck source=bench/mps.sh
. "$(dirname "$0")/mps.sh"

stage_conform() {
  local b=() v
  for v in ${CONFORM_VARIANTS:-cuda:bulk cuda:stream}; do b+=(--backend "$v"); done
  timeout 420 "$NEW" conform "${b[@]}" >"$OUT_DIR/conform.txt" 2>&1
  note "conform ${CONFORM_VARIANTS:-cuda:bulk cuda:stream} (rc $?): $(tail -1 "$OUT_DIR/conform.txt")"
  grep -E " FAIL " "$OUT_DIR/conform.txt" | head -20
  [ "${CONFORM_B40:-1}" = 0 ] && return
  timeout 240 "$NEW" conform --backend cuda --batch 40 --case ring --case state --case packed --case staggered \
    >"$OUT_DIR/conform-b40.txt" 2>&1
  note "conform cuda --batch 40 (rc $?): $(tail -1 "$OUT_DIR/conform-b40.txt")"
  grep -E " FAIL " "$OUT_DIR/conform-b40.txt" | head -20
}

stage_sanitize() {
  for tool in memcheck racecheck; do
    timeout 200 compute-sanitizer --tool "$tool" --error-exitcode 9 "$NEW" conform --quick --jobs 1 \
      --backend cuda:bulk --case gdn/replay/bf16-state --case kda/replay/fp16-ring-forced \
      --case gdn/replay/bf16-state-fp16-ring --case gdn/packed/bf16-state >"$OUT_DIR/sanitize-$tool.txt" 2>&1
    note "compute-sanitizer $tool cuda:bulk (rc $?): $(grep -m1 -E '(ERROR|RACECHECK) SUMMARY' \
      "$OUT_DIR/sanitize-$tool.txt"); $(tail -1 "$OUT_DIR/sanitize-$tool.txt")"
  done
}

stage_micro() {
  timeout 200 "$READOUT" >"$OUT_DIR/micro.txt" 2>&1
  note "readout microbenchmark (rc $?)"
  cat "$OUT_DIR/micro.txt"
}

stage_micro78() {
  mps_start
  timeout 200 "$READOUT" >"$OUT_DIR/micro-78.txt" 2>&1
  note "readout microbenchmark, MPS 59% (rc $?)"
  mps_stop
  cat "$OUT_DIR/micro-78.txt"
}

# us per step per layer of two rssm bench JSONs side by side
ab_table() {
  python3 - "$@" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
la, lb = sys.argv[3:5]
per = lambda r, k: r[k] / r["layers"] if r.get(k) else float("nan")
print(f"{'gate':4} {'state':5} {'B':>4}  {'packed':>15}  {'replay':>15}  {'empty':>15}  {'full':>15}  {'flush':>15}   ({la} -> {lb})")
for x, y in zip(a["rows"], b["rows"]):
    cells = [f"{per(x, k):7.2f}>{per(y, k):7.2f}" for k in ("packed_us", "replay_us", "empty_us", "full_us", "flush_us")]
    print(f"{x['gate']:4} {x['state_dtype']:5} {x['batch']:4}  " + "  ".join(cells))
PY
}

# rssm bench of a binary under an environment, one side of an A/B table
ab_side() {
  local name=$1 cli=$2 out=$3
  shift 3
  # shellcheck disable=SC2086
  env "$@" timeout 280 "$cli" bench --backend cuda $AB_ARGS --out "$out/ab-$name" >"$out/ab-$name.txt" 2>&1
  note "rssm bench ($name): rc $?"
}

# NEW under each mode of AB_MODES (RSSM_CUDA_TENSOR_CORES: 0 the FFMA
# kernels, flush the flush's ring sum on the tensor cores, 1 that and the
# readout, auto the plan's rule), one table each against the first; PREFIX
# names the files (78- under MPS), and OLD's FFMA kernels first where OLD
# exists
ab_modes() {
  local prefix=$1 first="" m name
  if [ -z "$prefix" ] && [ -x "$OLD" ]; then
    ab_side old "$OLD" "$OUT_DIR" RSSM_CUDA_TENSOR_CORES=0
    first=old
  fi
  for m in ${AB_MODES:-0 flush 1 auto}; do
    name=$prefix$m
    if [ "$m" = auto ]; then ab_side "$name" "$NEW" "$OUT_DIR" -u RSSM_CUDA_TENSOR_CORES
    else ab_side "$name" "$NEW" "$OUT_DIR" RSSM_CUDA_TENSOR_CORES="$m"; fi
    if [ -n "$first" ]; then
      ab_table "$OUT_DIR/ab-$first.json" "$OUT_DIR/ab-$name.json" "$first" "$name" | tee "$OUT_DIR/ab-$first-$name.txt"
    else
      first=$name
    fi
  done
}

stage_ab() { ab_modes ""; }

# the same at 78 SMs (MPS 59%, --sm-limit 78)
stage_ab78() {
  mps_start
  AB_ARGS="$AB_ARGS --sm-limit 78" ab_modes 78-
  mps_stop
}

# 78 SMs: the default stages (4) against as many as each kernel holds
# (RSSM_CUDA_BULK_STAGES), the plan's mode
stage_stages78() {
  mps_start
  AB_ARGS="$AB_ARGS --sm-limit 78" ab_side 78-4 "$NEW" "$OUT_DIR" RSSM_CUDA_BULK_STAGES=4
  AB_ARGS="$AB_ARGS --sm-limit 78" ab_side 78-most "$NEW" "$OUT_DIR" RSSM_CUDA_BULK_STAGES=64
  mps_stop
  ab_table "$OUT_DIR/ab-78-4.json" "$OUT_DIR/ab-78-most.json" "4 stages" "most" | tee "$OUT_DIR/stages78.txt"
}

harness() {
  PEERS_DIR=$PEERS PYTHONPATH=python RSSM_LIBRARY=$LIB RSSM_TORCH_EXT=${RSSM_TORCH_EXT:-off} OUT_JSON=$1 BUDGET_S=${BUDGET_S:-270} STAG_CFGS=gdn:fp32 \
    CONFIGS=${CONFIGS:-gdn:fp32,kda:fp32,gdn:bf16,kda:bf16} BATCHES=${BATCHES:-1,16,64,128,256,512} \
    PYTHONUNBUFFERED=1 timeout 330 python3 "$HARNESS/anchor_bench.py" >"${1%.json}.log" 2>&1
  note "anchor harness $(basename "$1") (rc $?)"
  python3 "$HARNESS/table.py" "$1" | tee "${1%.json}-table.txt"
}

stage_record() { harness "$OUT_DIR/harness.json"; }
stage_record78() {
  mps_start
  BATCHES=${BATCHES78:-16,64,256} harness "$OUT_DIR/harness-78.json"
  mps_stop
}

for st in $STAGES; do "stage_$st"; done
echo
echo "================ summary"
for s in "${SUMMARY[@]}"; do echo "$s"; done
