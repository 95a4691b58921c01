#!/usr/bin/env bash
# The H200 run, in one go: build, conformance, compute-sanitizer,
# timing, report. Run from the repository root on the GPU machine:
#
#   bench/h200/run.sh [OUT_DIR]            (default: $OUT, else ./h200-out)
#
# STAGES selects parts, run in the order given (default "project conform
# sanitize bench"; also "tune" (launch-shape sweep of the pipeline kernel),
# "profile" (Nsight Compute on batch-256 launches, plus the SASS) and
# "memcheck_big" (compute-sanitizer on those launches)). QUICK=1 shrinks the
# timing sweep to the families the targets name (L = 16, all batches); FAST=1
# times the library's kernels only (no previous-choice comparison rows);
# BATCHES=1,16,.. a subset of batches. The sanitizers always run the quick
# conformance set.
# Conformance runs per backend variant: the full set with the plan's choice
# ("cuda") and with cuda:bulk, the quick set with cuda:stream and
# cuda:pipeline; a variant that cannot run a case reports it skipped. Stage time limits in seconds: CONFORM_TIMEOUT (default 300;
# the CLI's 200), BENCH_TIMEOUT (400), SANITIZE_TIMEOUT (240, per tool). The
# JSON, the markdown table, h200/summary.json and the PNG land in OUT_DIR with the logs folded
# into logs.tgz; the committed copies are in bench/results/.
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
# the backend variant of a kernel family: default = the plan's choice
variant() { if [ "$1" = default ]; then echo cuda; else echo "cuda:$1"; fi; }
JOBS=$(nproc 2>/dev/null || echo 4)

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv,noheader 2>&1 | head -2
nvcc --version | tail -1

# 1. The project itself, with the CUDA backend forced on (built in the
#    background while the benchmark driver compiles); its CLI's conformance
#    when it is there (it also compares against the CPU backend).
build_project() {
  cmake -S "$ROOT" -B "$BUILD/project" -DCMAKE_BUILD_TYPE=Release -DRSSM_VULKAN=OFF -DRSSM_TESTS=OFF \
    -DRSSM_CUDA=ON >"$OUT_DIR/project_build.log" 2>&1 &&
    cmake --build "$BUILD/project" -j "$JOBS" >>"$OUT_DIR/project_build.log" 2>&1
}
PROJECT_PID=""
case " $STAGES " in *" project "*) build_project & PROJECT_PID=$! ;; esac
stage_project() {
  if wait "$PROJECT_PID"; then
    note "project build (RSSM_CUDA=ON): ok"
    CLI=$(find "$BUILD/project" -maxdepth 3 -type f -name rssm -perm -u+x | head -1)
    if [ -n "$CLI" ]; then
      for kern in default bulk; do
        log="$OUT_DIR/cli_conform_$kern.log"
        if timeout "${CONFORM_TIMEOUT:-200}" "$CLI" conform --backend "$(variant $kern)" >"$log" 2>&1; then
          note "rssm conform --backend $(variant $kern): ok ($(tail -1 "$log"))"
        else
          note "rssm conform --backend $(variant $kern): FAILED (rc $?; see $(basename "$log"): $(tail -1 "$log"))"
        fi
      done
    else
      note "rssm CLI not built: skipped its conformance"
    fi
  else
    note "project build FAILED (see project_build.log): $(grep -m1 -i error "$OUT_DIR/project_build.log")"
  fi
}

# 2. The benchmark driver: the kernels and backend sources, the C model code.
NVFLAGS="-O3 -std=c++17 -Iinclude -Icommon -Icuda -gencode=arch=compute_90a,code=sm_90a \
 -gencode=arch=compute_90,code=compute_90 -Xcompiler=-Wall,-Wextra"
set -e
mkdir -p "$BUILD/bench"
gcc -O2 -std=c11 -Wall -Wextra -Iinclude -Icommon -c common/model.c -o "$BUILD/bench/model.o"
gcc -O2 -std=c11 -Wall -Wextra -Iinclude -Icommon -c common/error.c -o "$BUILD/bench/error.o"
pids=()
for f in cuda/decode_kernel.cu cuda/stream_kernel.cu cuda/bulk_kernel.cu cuda/cuda_backend.cu bench/h200/h200_conform.cu bench/h200/h200_bench.cu; do
  nvcc $NVFLAGS -c "$f" -o "$BUILD/bench/$(basename "$f" .cu).o" & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
nvcc -o "$BUILD/rssm_h200_bench" "$BUILD"/bench/*.o
set +e
BIN="$BUILD/rssm_h200_bench"
QARG=""; [ "$QUICK" = 1 ] && QARG="--quick"

stage_conform() {
  # the library's choice (stream kernels at these small batches) on the full
  # set, each kernel forced where it applies: bulk on the full set, stream
  # and pipeline on the quick set
  for kern in ${CONFORM_KERNELS:-default bulk stream pipeline}; do
    log="$OUT_DIR/conform_$kern.log"
    case $kern in default | bulk) set -- ;; *) set -- --quick ;; esac
    if timeout "${CONFORM_TIMEOUT:-300}" "$BIN" conform --backend "$(variant $kern)" "$@" >"$log" 2>&1; then
      note "conformance vs float64 oracle ($kern kernels): $(tail -1 "$log")"
    else
      note "conformance vs float64 oracle ($kern kernels) FAILED: $(tail -1 "$log")"
      grep -E "^FAIL" "$log" | head -20
    fi
  done
}

stage_sanitize() {
  for kern in ${SANITIZE_KERNELS:-default bulk}; do
    for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
      log="$OUT_DIR/sanitizer_${tool}_$kern.log"
      timeout "${SANITIZE_TIMEOUT:-240}" compute-sanitizer --tool "$tool" --error-exitcode 9 "$BIN" conform --quick \
        --backend "$(variant $kern)" >"$log" 2>&1
      rc=$?
      if [ $rc = 0 ]; then
        note "compute-sanitizer $tool ($kern kernels): clean ($(grep -m1 -E '(ERROR|RACECHECK) SUMMARY' "$log"))"
      elif [ $rc = 124 ]; then
        note "compute-sanitizer $tool ($kern kernels): NOT FINISHED (stopped after ${SANITIZE_TIMEOUT:-240} s)"
      else
        note "compute-sanitizer $tool ($kern kernels): FAILED (rc $rc; see $(basename "$log"): $(grep -m1 'ERROR SUMMARY' "$log"))"
        grep -m3 -B2 -A10 -E "Invalid|Race|Error" "$log" | head -40
      fi
    done
  done
}

stage_tune() {
  timeout 200 "$BIN" tune 2>&1 | tee "$OUT_DIR/tune.log"
  note "launch-shape sweep: see tune.log"
}

stage_memcheck_big() {
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN" profile >"$OUT_DIR/sanitizer_big.log" 2>&1
  note "compute-sanitizer memcheck, batch 256 multi-item launches: rc $? ($(grep -m1 'ERROR SUMMARY' "$OUT_DIR/sanitizer_big.log"))"
  grep -m5 -A12 "Invalid" "$OUT_DIR/sanitizer_big.log" | head -40
}

stage_profile() {
  timeout 240 ncu --clock-control none -k regex:'decode_kernel|stream_kernel|prologue_kernel|bulk_kernel' --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis \
    "$BIN" profile >"$OUT_DIR/profile.log" 2>&1
  note "ncu profile: rc $? (profile.log)"
  grep -E "profile:|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Stall|stall|Warp Cycles Per Issued|Theoretical Occ|Block Limit" \
    "$OUT_DIR/profile.log" | head -80
  cuobjdump -sass "$BUILD/bench/decode_kernel.o" >"$OUT_DIR/sass.log" 2>&1 || true
}

stage_bench() {
  BARG=""; [ -n "${BATCHES:-}" ] && BARG="--batches $BATCHES"
  [ "${FAST:-0}" = 1 ] && BARG="$BARG --fast"
  if timeout "${BENCH_TIMEOUT:-400}" "$BIN" bench --json "$OUT_DIR/h200_results.json" $QARG $BARG 2>&1 | tee "$OUT_DIR/bench.log"; then
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
