#!/usr/bin/env bash
# The H200 run in one go, through the project's own CLI: build, conformance
# of every CUDA variant against the float64 oracle, compute-sanitizer,
# `rssm bench --backend cuda`, report. From the repository root on the GPU
# machine:
#
#   bench/h200/run.sh [OUT_DIR]            (default: $OUT, else ./h200-out)
#
# STAGES picks stages, run in the order given (default "build conform
# sanitize torch record"; also "bench": rssm bench alone, with report.py;
# "profile": Nsight Compute on the batch-256 launches of
# the planned kernels, and "vulkan": the Vulkan backend on the same GPU, which
# needs a CLI built with Vulkan on (CLI=..., built on Debian: the GPU machine
# has no Vulkan headers or shader compiler) and the loader packages in .gl/,
# see docs/h200.md; "vulkan_layer": the per-layer entry's test on each
# Vulkan variant, TEST_LAYER=path; "vulkan_ab": the Vulkan benchmark of
# OLD_CLI and CLI side by side; "verify": the speculative-decode windows of
# rssm bench --verify). VARIANTS: the CUDA variants to check (default all
# four); a variant that cannot run a case says so (SKIP). BENCH_ARGS replaces
# the benchmark's sweep (VULKAN_BENCH_ARGS for the vulkan stage, whose
# VULKAN_VARIANTS are benched: default "vulkan vulkan:coopmat") (default: GDN and KDA, fp32 and bf16 state, L = 16,
# batch 1-512, both position modes, median of 5). Time limits in seconds:
# CONFORM_TIMEOUT (default 400), SANITIZE_TIMEOUT (per tool, 300),
# BENCH_TIMEOUT (600). SANITIZE_CASES_memcheck, SANITIZE_CASES_racecheck:
# --case filters for that tool's run (default: every case of the quick set;
# racecheck of all four variants on all of them takes ~25 min). "torch": the
# benchmark of record, bench/h200/torch_graph.py (rssm's per-layer entry from
# torch in captured CUDA graphs, every shape, with `rssm bench` of the same
# shapes beside it; TORCH_ARGS adds options), which needs LIB (the
# librssm.so of the CLI's build; default beside the CLI); "h20": the same on
# an H20-shaped GPU, the H200 confined to 78 SMs by CUDA MPS
# (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=59) with rssm's plans capped at 78
# (--sm-limit; H20_ARGS adds options); "record": bench/h200/record.py over
# their JSON (summary.json with a harness key, and the targets page
# h200_cuda/results.md). The machine has no network; the
# library needs no system header beyond the CUDA toolkit's.
# Writes OUT_DIR/bench.{txt,csv,json}, h200_results.md and h200_results.png
# (bench), torch_graph*.json and the rssm bench files beside them (torch,
# h20), h200/summary.json and h200_cuda/results.md (record), logs.tgz; the
# committed copies are in bench/results/. The device tool returns at most 8
# files a call: tar OUT_DIR there.
set -u -o pipefail
OUT_DIR=${1:-${OUT:-$PWD/h200-out}}
STAGES=${STAGES:-"build conform sanitize torch record"}
VARIANTS=${VARIANTS:-"cuda cuda:bulk cuda:stream cuda:pipeline"}
BENCH_ARGS=${BENCH_ARGS:-"--gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 1,16,64,128,256,512 --cycles 5"}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-/tmp/rssm-h200-build}
JOBS=$(nproc 2>/dev/null || echo 4)
CLI=${CLI:-$BUILD/rssm}  # CLI=path runs a prebuilt rssm (built with RSSM_CUDA=ON) and skips nothing else
LIB=${LIB:-}             # its librssm.so (the torch stages); default: beside the CLI, else in its build
mkdir -p "$OUT_DIR" "$BUILD"
cd "$ROOT"
SUMMARY=()
note() { SUMMARY+=("$1"); echo "== $1"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv,noheader 2>&1 | head -2
nvcc --version | tail -1

stage_build() {
  if cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DRSSM_VULKAN=OFF -DRSSM_TESTS=OFF -DRSSM_CUDA=ON \
      >"$OUT_DIR/build.log" 2>&1 && cmake --build "$BUILD" -j "$JOBS" >>"$OUT_DIR/build.log" 2>&1; then
    note "build (RSSM_CUDA=ON, sm_90a + compute_90 PTX): ok"
  else
    note "build FAILED: $(grep -m1 -iE 'error' "$OUT_DIR/build.log")"
    tail -30 "$OUT_DIR/build.log"
    exit 1
  fi
}

# Every variant on the whole case list, in one run: the oracle is computed
# once per case and the variants are checked side by side.
variant_args() { for v in $VARIANTS; do printf -- '--backend %s ' "$v"; done; }
stage_conform() {
  local log="$OUT_DIR/conform.log"
  # shellcheck disable=SC2046 # one --backend option per variant
  if timeout "${CONFORM_TIMEOUT:-400}" "$CLI" conform $(variant_args) >"$log" 2>&1; then
    note "rssm conform ($VARIANTS): $(tail -1 "$log")"
  else
    note "rssm conform ($VARIANTS) FAILED (rc $?): $(tail -1 "$log")"
    grep -E " FAIL " "$log" | head -20
  fi
  cp "$log" "$OUT_DIR/conform.txt"
}

# memcheck and racecheck of every variant on the quick case list (the same
# cases, a quarter of the heads: the sanitizers slow the kernels 10-100x).
stage_sanitize() {
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
    log="$OUT_DIR/sanitizer_$tool.log"
    cases_var="SANITIZE_CASES_$tool"
    # shellcheck disable=SC2046
    timeout "${SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
      "$CLI" conform --quick --jobs 1 ${!cases_var:-} $(variant_args) >"$log" 2>&1
    rc=$?
    sum=$(grep -m1 -E '(ERROR|RACECHECK) SUMMARY' "$log")
    if [ $rc = 0 ]; then
      note "compute-sanitizer $tool ($VARIANTS): clean ($sum; $(tail -1 "$log"))"
    elif [ $rc = 124 ]; then
      note "compute-sanitizer $tool: NOT FINISHED (stopped after ${SANITIZE_TIMEOUT:-300} s; $(grep -c ' PASS ' "$log") case runs passed by then)"
    else
      note "compute-sanitizer $tool: FAILED (rc $rc; $sum)"
      grep -m3 -B2 -A10 -E "Invalid|Race|Error| FAIL " "$log" | head -40
    fi
    cp "$log" "$OUT_DIR/sanitizer_$tool.txt"
  done
}

stage_bench() {
  # shellcheck disable=SC2086 # BENCH_ARGS is a list of options
  if timeout "${BENCH_TIMEOUT:-600}" "$CLI" bench --backend cuda $BENCH_ARGS --out "$OUT_DIR/bench" \
      >"$OUT_DIR/bench.txt" 2>&1; then
    note "rssm bench --backend cuda: done"
  else
    note "rssm bench --backend cuda FAILED or incomplete (rc $?)"
  fi
  cat "$OUT_DIR/bench.txt"
  if [ -f "$OUT_DIR/bench.json" ]; then
    python3 bench/h200/report.py "$OUT_DIR/bench.json" "$OUT_DIR" >"$OUT_DIR/report.log" 2>&1 ||
      note "report FAILED: $(tail -1 "$OUT_DIR/report.log")"
  fi
}

# Nsight Compute on batch-256 launches of the planned kernels (packed, and
# replay cycles), after the launches of the oracle check.
stage_profile() {
  local log="$OUT_DIR/profile.log"
  timeout 400 ncu --clock-control none -k regex:'bulk|stream|decode' --launch-skip 200 --launch-count 12 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats \
    "$CLI" bench --backend cuda --batch 256 --ring-len 16 --positions uniform --cycles 1 \
    ${PROFILE_ARGS:---gate gdn --state fp32} >"$log" 2>&1
  note "ncu profile: rc $? (profile.log)"
  grep -E "bulk|stream_|Duration|DRAM Throughput|Issue Slots Busy|Pipe|Achieved Occupancy|Warp Cycles Per Issued" \
    "$log" | head -80
}

# The Vulkan variants on the GPU: the loader and GL dispatch libraries from
# the carried .deb files (the image has NVIDIA's Vulkan driver but no
# loader), then conformance and the benchmark of each distinct kernel set.
vulkan_loader() {
  if ! ldconfig -p | grep -q libvulkan.so.1; then
    for f in "$ROOT"/.gl/*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done
    ldconfig
  fi
  export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
  export __EGL_VENDOR_LIBRARY_FILENAMES=${__EGL_VENDOR_LIBRARY_FILENAMES:-/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json}
}

stage_vulkan() {
  vulkan_loader
  local log="$OUT_DIR/vulkan_conform.log"
  if [ "${VULKAN_CONFORM:-1}" = 0 ]; then
    note "rssm conform (Vulkan variants): skipped (VULKAN_CONFORM=0)"
  elif timeout "${CONFORM_TIMEOUT:-400}" "$CLI" conform --backend vulkan --backend vulkan:portable --backend vulkan:coopmat \
      --backend vulkan:coopmat-emulated >"$log" 2>&1; then
    note "rssm conform (Vulkan variants): $(tail -1 "$log")"
  else
    note "rssm conform (Vulkan variants) FAILED (rc $?): $(tail -1 "$log")"
    grep -E " FAIL |no Vulkan" "$log" | head -20
  fi
  cp "$log" "$OUT_DIR/vulkan_conform.txt"
  # The default (portable) kernels and the cooperative-matrix ones.
  for v in ${VULKAN_VARIANTS:-vulkan vulkan:coopmat}; do
    # shellcheck disable=SC2086
    # The driver's statistics of every pipeline it compiles (registers,
    # spills, shared memory) go to stderr, then to pipelines-VARIANT.txt.
    RSSM_VK_PIPELINE_STATS=1 timeout "${BENCH_TIMEOUT:-600}" "$CLI" bench --backend "$v" \
      ${VULKAN_BENCH_ARGS:-$BENCH_ARGS} --out "$OUT_DIR/bench-${v/:/-}" >"$OUT_DIR/bench-${v/:/-}.txt" 2>&1
    note "rssm bench --backend $v: rc $?"
    grep "^rssm vulkan pipeline" "$OUT_DIR/bench-${v/:/-}.txt" >"$OUT_DIR/pipelines-${v/:/-}.txt"
    sed -i "/^rssm vulkan pipeline/d" "$OUT_DIR/bench-${v/:/-}.txt"
  done
}

# The per-layer entry on the GPU's Vulkan driver: tests/test_layer.c
# (built on Debian with Vulkan on, carried as TEST_LAYER=path with its
# libcmocka.so.0 beside it) on each Vulkan variant, recorded into command
# buffers on the test's own buffers, against rssm_batch_step.
stage_vulkan_layer() {
  vulkan_loader
  local t=${TEST_LAYER:-$ROOT/.devbin/test_layer}
  for v in ${VULKAN_VARIANTS:-vulkan vulkan:coopmat}; do
    local log="$OUT_DIR/layer-${v/:/-}.log"
    if LD_LIBRARY_PATH="$(dirname "$t")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" RSSM_TEST_BACKEND="$v" \
        RSSM_REQUIRE_BACKENDS="$v" timeout 300 "$t" >"$log" 2>&1; then
      note "test_layer on $v: $(grep -c '\[       OK \]' "$log") passed"
    else
      note "test_layer on $v FAILED (rc $?)"
      grep -E "FAILED|ERROR|error" "$log" | head -10
    fi
    cp "$log" "$OUT_DIR/layer-${v/:/-}.txt"
  done
}

# The Vulkan benchmark of two builds in one run, OLD_CLI (the previous
# release, built with Vulkan on) and CLI, for each of VULKAN_VARIANTS, with
# VULKAN_AB_ARGS (default: GDN and KDA, fp32 state, L = 16, batch 16, 64,
# 256, uniform positions, median of 5): the change's cost or gain on the
# same GPU, same clocks.
stage_vulkan_ab() {
  vulkan_loader
  local args=${VULKAN_AB_ARGS:-"--gate gdn,kda --state fp32 --ring-len 16 --batch 16,64,256 --positions uniform --cycles 5"}
  for v in ${VULKAN_VARIANTS:-vulkan}; do
    for side in old new; do
      local cli=$CLI
      [ "$side" = old ] && cli=$OLD_CLI
      # shellcheck disable=SC2086
      timeout "${BENCH_TIMEOUT:-600}" "$cli" bench --backend "$v" $args --out "$OUT_DIR/ab-${v/:/-}-$side" \
        >"$OUT_DIR/ab-${v/:/-}-$side.log" 2>&1
      note "rssm bench --backend $v ($side build): rc $?"
    done
    python3 - "$OUT_DIR/ab-${v/:/-}" <<'PY'
import json, sys
old, new = (json.load(open(f"{sys.argv[1]}-{s}.json")) for s in ("old", "new"))
print(f"{'gate':4} {'batch':>5}  us/layer: packed old -> new   replay old -> new   flush old -> new")
for a, b in zip(old["rows"], new["rows"]):
    per = lambda r, k: r[k] / r["layers"] if r.get(k) else float("nan")
    print(f"{a['gate']:4} {a['batch']:5}  {per(a, 'packed_us'):10.2f} -> {per(b, 'packed_us'):7.2f}"
          f"   {per(a, 'replay_us'):8.2f} -> {per(b, 'replay_us'):7.2f}"
          f"   {per(a, 'flush_us'):7.2f} -> {per(b, 'flush_us'):7.2f}")
PY
  done
}

# Speculative-decode verify (docs/design.md §9, docs/bench.md "Verify"):
# windows of 2, 4 and 8 draft tokens at 100% and 50% acceptance against the
# same run's replay and packed steps, on VERIFY_BACKEND (default cuda).
stage_verify() {
  local args=${VERIFY_ARGS:-"--gate gdn,kda --state fp32 --ring-len 16 --batch 64,256 --positions uniform --cycles 5 --verify 2,4,8 --accept 100,50"}
  # shellcheck disable=SC2086
  if timeout "${BENCH_TIMEOUT:-600}" "$CLI" bench --backend "${VERIFY_BACKEND:-cuda}" $args --out "$OUT_DIR/verify" \
      >"$OUT_DIR/verify.txt" 2>&1; then
    note "rssm bench --verify (${VERIFY_BACKEND:-cuda}): done"
  else
    note "rssm bench --verify (${VERIFY_BACKEND:-cuda}) FAILED or incomplete (rc $?)"
  fi
  sed -n '/verify us/,$p' "$OUT_DIR/verify.txt" | head -40
}

# The library of the CLI's build, for the Python package.
find_lib() {
  if [ -z "$LIB" ]; then
    LIB=$(ls "$(dirname "$CLI")"/librssm.so.*.*.* "$(dirname "$CLI")"/common/librssm.so.*.*.* 2>/dev/null | head -1)
  fi
  [ -n "$LIB" ] || { note "no librssm.so beside $CLI: set LIB"; return 1; }
}

torch_graph() {
  PYTHONPATH="$ROOT/python" RSSM_LIBRARY="$LIB" PYTHONUNBUFFERED=1 timeout "${BENCH_TIMEOUT:-600}" \
    python3 bench/h200/torch_graph.py --cli "$CLI" --out "$OUT_DIR" "$@"
}

# The benchmark of record: every shape, both harnesses.
stage_torch() {
  find_lib || return
  # shellcheck disable=SC2086 # TORCH_ARGS is a list of options
  if torch_graph ${TORCH_ARGS:-} >"$OUT_DIR/torch_graph.log" 2>&1; then
    note "torch_graph.py: done"
  else
    note "torch_graph.py FAILED or incomplete (rc $?): $(tail -2 "$OUT_DIR/torch_graph.log")"
  fi
  sed -n '/^us per step per layer/,$p' "$OUT_DIR/torch_graph.log"
}

# The H20 shape (docs/bench.md): an MPS server whose clients get 59% of the
# SMs (78 of 132), rssm's plans and in-place bound capped to match.
stage_h20() {
  find_lib || return
  local pipe=/tmp/rssm-mps-pipe log=/tmp/rssm-mps-log
  mkdir -p "$pipe" "$log"
  export CUDA_MPS_PIPE_DIRECTORY=$pipe CUDA_MPS_LOG_DIRECTORY=$log
  if ! nvidia-cuda-mps-control -d; then
    note "h20: the MPS control daemon did not start"
    return
  fi
  # shellcheck disable=SC2086
  CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=59 torch_graph --sm-limit 78 --tag h20 \
    ${H20_ARGS:---batches 16,64,256} >"$OUT_DIR/torch_graph-h20.log" 2>&1
  note "h20 (MPS 59%, --sm-limit 78): rc $?"
  echo quit | nvidia-cuda-mps-control
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  sed -n '/^us per step per layer/,$p' "$OUT_DIR/torch_graph-h20.log"
}

# The results of record (bench/h200/record.py): summary.json and the targets
# page from the torch and h20 stages' JSON.
stage_record() {
  local h20=()
  [ -f "$OUT_DIR/torch_graph-h20.json" ] && h20=("$OUT_DIR/torch_graph-h20.json")
  python3 bench/h200/record.py "$OUT_DIR" "$OUT_DIR/torch_graph.json" "${h20[@]}" ||
    note "record.py FAILED"
}

for st in $STAGES; do "stage_$st"; done

# A few files come back from the GPU machine: fold the logs into one.
(cd "$OUT_DIR" && ls ./*.log >/dev/null 2>&1 && tar czf logs.tgz ./*.log)

echo
echo "================ summary"
for s in "${SUMMARY[@]}"; do echo "$s"; done
[ -f "$OUT_DIR/report.log" ] && cat "$OUT_DIR/report.log"
(cd "$OUT_DIR" && rm -f ./*.log)
exit 0
