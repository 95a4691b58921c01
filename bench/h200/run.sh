#!/usr/bin/env bash
# The H200 run of issue 4, in one go: build, conformance, compute-sanitizer,
# timing, report. Run from the repository root on the GPU machine:
#
#   bench/h200/run.sh [OUT_DIR]            (default: $OUT, else ./h200-out)
#
# STAGES selects parts, run in the order given (default "project conform
# sanitize bench"; "tune" sweeps launch shapes); QUICK=1
# shrinks the timing sweep (the sanitizers always run the quick conformance). Logs, the JSON, the markdown table
# and the PNG land in OUT_DIR; copy the last three into bench/results/.
set -u -o pipefail
OUT_DIR=${1:-${OUT:-$PWD/h200-out}}
STAGES=${STAGES:-"project conform sanitize bench"}
QUICK=${QUICK:-0}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-/tmp/rssm-h200-build}
mkdir -p "$OUT_DIR" "$BUILD"
cd "$ROOT"
SUMMARY=()
note() { SUMMARY+=("$1"); echo "== $1"; }
JOBS=$(nproc 2>/dev/null || echo 4)

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv,noheader 2>&1 | head -2
nvcc --version | tail -1

# 1. The project itself, with the CUDA backend forced on; its CLI's
#    conformance when it is there (it also compares against the CPU backend).
stage_project() {
  if cmake -S "$ROOT" -B "$BUILD/project" -DCMAKE_BUILD_TYPE=Release -DRSSM_VULKAN=OFF -DRSSM_TESTS=OFF \
       -DRSSM_CUDA=ON >"$OUT_DIR/project_build.log" 2>&1 &&
     cmake --build "$BUILD/project" -j "$JOBS" >>"$OUT_DIR/project_build.log" 2>&1; then
    note "project build (RSSM_CUDA=ON): ok"
    CLI=$(find "$BUILD/project" -maxdepth 3 -type f -name rssm -perm -u+x | head -1)
    if [ -n "$CLI" ]; then
      if timeout 200 "$CLI" conform --backend cuda >"$OUT_DIR/cli_conform.log" 2>&1; then
        note "rssm conform --backend cuda: ok ($(tail -1 "$OUT_DIR/cli_conform.log"))"
      else
        note "rssm conform --backend cuda: FAILED (rc $?; see cli_conform.log: $(tail -1 "$OUT_DIR/cli_conform.log"))"
      fi
    else
      note "rssm CLI not built: skipped its conformance"
    fi
  else
    note "project build FAILED (see project_build.log): $(grep -m1 -i error "$OUT_DIR/project_build.log")"
  fi
}

# 2. The benchmark driver: the kernels and backend sources, the C model code.
NVFLAGS="-O3 -std=c++17 -Iinclude -Icommon -Icuda -gencode=arch=compute_90a,code=sm_90a \
 -gencode=arch=compute_90,code=compute_90 -Xcompiler=-Wall,-Wextra -Xptxas=-warn-spills"
set -e
mkdir -p "$BUILD/bench"
gcc -O2 -std=c11 -Wall -Wextra -Iinclude -Icommon -c common/model.c -o "$BUILD/bench/model.o"
gcc -O2 -std=c11 -Wall -Wextra -Iinclude -Icommon -c common/error.c -o "$BUILD/bench/error.o"
pids=()
for f in cuda/decode_kernel.cu cuda/cuda_backend.cu bench/h200/h200_conform.cu bench/h200/h200_bench.cu; do
  nvcc $NVFLAGS -c "$f" -o "$BUILD/bench/$(basename "$f" .cu).o" & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
nvcc -o "$BUILD/rssm_h200_bench" "$BUILD"/bench/*.o
set +e
BIN="$BUILD/rssm_h200_bench"
QARG=""; [ "$QUICK" = 1 ] && QARG="--quick"

stage_conform() {
  if timeout 300 "$BIN" conform >"$OUT_DIR/conform.log" 2>&1; then
    note "conformance vs float64 oracle: $(tail -1 "$OUT_DIR/conform.log")"
  else
    note "conformance vs float64 oracle FAILED: $(tail -1 "$OUT_DIR/conform.log")"
    grep -E "^FAIL" "$OUT_DIR/conform.log" | head -20
  fi
}

stage_sanitize() {
  for tool in memcheck racecheck; do
    if timeout 240 compute-sanitizer --tool "$tool" --error-exitcode 9 "$BIN" conform --quick \
         >"$OUT_DIR/sanitizer_$tool.log" 2>&1; then
      note "compute-sanitizer $tool: clean ($(grep -m1 'ERROR SUMMARY' "$OUT_DIR/sanitizer_$tool.log"))"
    else
      note "compute-sanitizer $tool: FAILED (see sanitizer_$tool.log: $(grep -m1 'ERROR SUMMARY' "$OUT_DIR/sanitizer_$tool.log"))"
    fi
  done
}

stage_tune() {
  timeout 200 "$BIN" tune 2>&1 | tee "$OUT_DIR/tune.log"
  note "launch-shape sweep: see tune.log"
}

stage_bench() {
  if timeout 400 "$BIN" bench --json "$OUT_DIR/h200_results.json" $QARG 2>&1 | tee "$OUT_DIR/bench.log"; then
    python3 bench/h200/report.py "$OUT_DIR/h200_results.json" "$OUT_DIR" >"$OUT_DIR/report.log" 2>&1 ||
      note "report FAILED: $(tail -1 "$OUT_DIR/report.log")"
    note "benchmark: done"
  else
    note "benchmark FAILED"
  fi
}

for st in $STAGES; do "stage_$st"; done

# At most a few files come back from the GPU machine: fold the logs into one.
(cd "$OUT_DIR" && ls ./*.log >/dev/null 2>&1 && tar czf logs.tgz ./*.log)

echo
echo "================ summary"
for s in "${SUMMARY[@]}"; do echo "$s"; done
[ -f "$OUT_DIR/report.log" ] && cat "$OUT_DIR/report.log"
(cd "$OUT_DIR" && rm -f ./*.log)
exit 0
