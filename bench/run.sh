#!/usr/bin/env bash
# The benchmark suite's driver (docs/bench.md, "The suite"). From the
# repository root, on a machine with an NVIDIA GPU and torch:
#
#   bench/run.sh [OUT_DIR]        (default: $OUT, else results/bench-<UTC time>)
#
# builds the CLI and librssm.so with CUDA on, checks every CUDA variant
# against the float64 oracle (rssm conform) and under compute-sanitizer,
# times every shape of the tables of record as an engine calls rssm (the
# per-layer entry from torch in captured CUDA graphs, bench/decode_graph.py,
# with `rssm bench` of the same shapes beside it), and writes the results
# in the format of bench/results/ (its README) to OUT_DIR/SHAPE/:
# summary.json, results.md and a notes.md to finish. On a machine without
# a CUDA GPU the stage `time` runs `rssm bench` on the cpu backend and on
# Vulkan instead (SHAPE local).
#
# STAGES picks the stages, run in the order given (default "build check
# time record"):
#   build    cmake with CUDA on (and Vulkan where VULKAN=ON) into $BUILD
#   check    rssm conform of VARIANTS (default the four CUDA variants, every
#            case); compute-sanitizer memcheck and racecheck of them on the
#            quick cases (SANITIZE_CASES_memcheck, SANITIZE_CASES_racecheck:
#            --case filters; racecheck of all four on every quick case takes
#            about 25 minutes)
#   time     the tables of record, as above (TORCH_ARGS adds options;
#            BESIDE=0 leaves out `rssm bench`, about half the stage's time)
#   record   bench/record.py over what `time`, `sm78` and `verify` wrote (and
#            `peers`: the folder's peers.json)
# and those of bench/stages.sh: sm78 (the same GPU confined to 78 SMs by
# CUDA MPS, an H20-shaped part), verify (speculative-decode windows: checks,
# sanitizers, the torch-graph windows, vLLM's beside them), vulkan,
# vulkan_layer, vulkan_ab, vulkan_tune, portable (compute_80 PTX against the
# default build), engine (an engine developer's checks: SGLang's own test),
# torch_ext, wheel, micro (the readout microbenchmark), ab (CLIs side by
# side), profile (Nsight Compute), peers (the published decode kernels in
# the same harness), accuracy, mini_engine, bench (`rssm bench` alone).
#
# CLI=path runs a prebuilt rssm (built with CUDA on, on Debian: the GPU
# machine may have no compiler for it, docs/h200.md) and skips nothing but
# the build; LIB its librssm.so (default beside it). SHAPE names the results
# folder (default from the GPU's name: h200, h100, ...; local without one).
# RSSM_COMMIT: the commit measured, where the tree carried has no .git.
# Time limits in seconds: CONFORM_TIMEOUT (400), SANITIZE_TIMEOUT (per
# tool, 300), BENCH_TIMEOUT (600).
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT_DIR=${1:-${OUT:-$ROOT/results/bench-$(date -u +%Y%m%d-%H%M%S)}}
STAGES=${STAGES:-"build check time record"}
VARIANTS=${VARIANTS:-"cuda cuda:bulk cuda:stream cuda:pipeline"}
BUILD=${BUILD:-/tmp/rssm-bench-build}
JOBS=$(nproc 2>/dev/null || echo 4)
CLI=${CLI:-$BUILD/rssm}
LIB=${LIB:-}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
cd "$ROOT" || exit 1
export RSSM_BENCH_COMMAND="STAGES=\"$STAGES\" bench/run.sh"
if [ -z "${RSSM_COMMIT:-}" ] && git rev-parse --git-dir >/dev/null 2>&1; then
  RSSM_COMMIT=$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- 2>/dev/null || echo +)
fi
export RSSM_COMMIT=${RSSM_COMMIT:-}
SUMMARY=()
note() { SUMMARY+=("$1"); echo "== $1"; }
t0=$(date +%s)
at() { echo "   (t = $(($(date +%s) - t0)) s)"; }

GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
if [ -n "$GPU" ]; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv,noheader 2>&1 | head -2
  nvcc --version 2>/dev/null | tail -1
fi
# the results folder: the GPU's model, lower case (NVIDIA H200 -> h200)
SHAPE=${SHAPE:-$(echo "$GPU" | sed -E 's/^NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z')}
SHAPE=${SHAPE:-local}

# ---- helpers the stages share

# decode_graph.py's option that times the same shapes with `rssm bench`
# beside it, unless BESIDE=0
beside() { [ "${BESIDE:-1}" = 0 ] || printf -- '--cli %s' "$CLI"; }

# librssm.so of the CLI's build, for the Python package and torch
find_lib() {
  if [ -z "$LIB" ]; then
    LIB=$(ls "$(dirname "$CLI")"/librssm.so.*.*.* "$(dirname "$CLI")"/common/librssm.so.*.*.* 2>/dev/null | head -1)
  fi
  [ -n "$LIB" ] || { note "no librssm.so beside $CLI: set LIB"; return 1; }
}

# python3 with the package from the tree and the CLI's library
py() { PYTHONPATH="$ROOT/python" RSSM_LIBRARY="$LIB" PYTHONUNBUFFERED=1 python3 "$@"; }
# py under a time limit of $1 seconds (timeout runs programs, not functions)
py_for() {
  local limit=$1
  shift
  timeout "$limit" env PYTHONPATH="$ROOT/python" RSSM_LIBRARY="$LIB" PYTHONUNBUFFERED=1 python3 "$@"
}

has_torch_gpu() { [ -n "$GPU" ] && python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; }

# The Vulkan loader on a GPU machine that has NVIDIA's driver but no loader:
# the packages carried in .gl/ (docs/h200.md, "Vulkan on the H200").
vulkan_loader() {
  if ! ldconfig -p | grep -q libvulkan.so.1; then
    for f in "$ROOT"/.gl/*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done
    ldconfig
  fi
  export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
  export __EGL_VENDOR_LIBRARY_FILENAMES=${__EGL_VENDOR_LIBRARY_FILENAMES:-/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json}
}

# shellcheck source=bench/mps.sh
. "$ROOT/bench/mps.sh"

variant_args() { for v in $VARIANTS; do printf -- '--backend %s ' "$v"; done; }

# ---- the default stages

stage_build() {
  if cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DRSSM_VULKAN="${VULKAN:-OFF}" -DRSSM_TESTS=OFF \
      -DRSSM_CUDA="$([ -n "$GPU" ] && echo ON || echo AUTO)" >"$OUT_DIR/build.log" 2>&1 &&
      cmake --build "$BUILD" -j "$JOBS" >>"$OUT_DIR/build.log" 2>&1; then
    note "build ($BUILD): ok"
  else
    note "build FAILED: $(grep -m1 -iE 'error' "$OUT_DIR/build.log")"
    tail -30 "$OUT_DIR/build.log"
    exit 1
  fi
}

# Every variant on the whole case list, in one run: the oracle is computed
# once per case and the variants are checked side by side. Then memcheck
# and racecheck on the quick list (the same cases, a quarter of the heads:
# the sanitizers slow the kernels 10-100x).
stage_check() {
  local log=$OUT_DIR/conform.txt
  [ -n "$GPU" ] || VARIANTS=${CHECK_BACKENDS:-"cpu vulkan"}
  # shellcheck disable=SC2046 # one --backend option per variant
  timeout "${CONFORM_TIMEOUT:-400}" "$CLI" conform $(variant_args) >"$log" 2>&1
  note "rssm conform ($VARIANTS): rc $?, $(tail -1 "$log")"
  grep -E " FAIL " "$log" | head -20
  command -v compute-sanitizer >/dev/null && [ -n "$GPU" ] || { note "compute-sanitizer: skipped (no GPU or no tool)"; return; }
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
    log=$OUT_DIR/sanitizer_$tool.txt
    local cases_var="SANITIZE_CASES_$tool"
    # shellcheck disable=SC2046
    timeout "${SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
      "$CLI" conform --quick --jobs 1 ${!cases_var:-} $(variant_args) >"$log" 2>&1
    local rc=$? sum
    sum=$(grep -m1 -E '(ERROR|RACECHECK) SUMMARY' "$log")
    case $rc in
      0) note "compute-sanitizer $tool ($VARIANTS): clean ($sum; $(tail -1 "$log"))" ;;
      124) note "compute-sanitizer $tool: NOT FINISHED (stopped after ${SANITIZE_TIMEOUT:-300} s)" ;;
      *) note "compute-sanitizer $tool: FAILED (rc $rc; $sum)"
         grep -m3 -B2 -A10 -E "Invalid|Race|Error| FAIL " "$log" | head -40 ;;
    esac
  done
  at
}

# The tables of record: on a CUDA GPU with torch, bench/decode_graph.py (every
# shape, both harnesses); else rssm bench of the backends that run here, the
# cpu backend at 4x its last-level cache and Vulkan (lavapipe) small.
stage_time() {
  if has_torch_gpu; then
    find_lib || return
    # shellcheck disable=SC2086,SC2046 # TORCH_ARGS is a list of options; beside is one option or none
    py bench/decode_graph.py $(beside) --out "$OUT_DIR" ${TORCH_ARGS:-} >"$OUT_DIR/decode_graph.log" 2>&1
    note "decode_graph.py: rc $? ($(tail -1 "$OUT_DIR/decode_graph.log" | cut -c1-80))"
    sed -n '/^us per step per layer/,$p' "$OUT_DIR/decode_graph.log"
  else
    "$CLI" bench --backend cpu --batch 16,64 --ring-len 16 --gate gdn,kda --state fp32,bf16 --cycles 4 \
      --out "$OUT_DIR/bench-cpu" | tee "$OUT_DIR/bench-cpu.txt"
    note "rssm bench --backend cpu: rc $?"
    if "$CLI" info --started | grep -qx vulkan; then
      "$CLI" bench --backend vulkan --batch 16 --ring-len 16 --gate gdn,kda --state fp32 --cycles 2 --state-mib 32 \
        --out "$OUT_DIR/bench-vulkan" | tee "$OUT_DIR/bench-vulkan.txt"
      note "rssm bench --backend vulkan: rc $?"
    fi
  fi
  at
}

# The results in bench/results/'s format: OUT_DIR/SHAPE (the torch-graph,
# cli and verify-graph rows of this run; its peers.json from the stage
# peers, where it ran) and OUT_DIR/SHAPE-78sm (sm78's).
stage_record() {
  local files=() f anchor=()
  for f in decode_graph.json verify_graph.json bench-cpu.json bench-vulkan.json; do
    [ -f "$OUT_DIR/$f" ] && files+=("$OUT_DIR/$f")
  done
  [ -f "$OUT_DIR/peers/harness.json" ] && anchor=(--anchor "$OUT_DIR/peers/harness.json")
  if [ ${#files[@]} -gt 0 ]; then
    python3 bench/record.py "$OUT_DIR/$SHAPE" --shape "$SHAPE" --gpu "$GPU" "${anchor[@]}" "${files[@]}" ||
      note "record.py FAILED ($SHAPE)"
    note "results: $OUT_DIR/$SHAPE/ (summary.json, results.md, notes.md)"
  fi
  if [ -f "$OUT_DIR/decode_graph-78sm.json" ]; then
    python3 bench/record.py "$OUT_DIR/$SHAPE-78sm" --shape "$SHAPE-78sm" --gpu "$GPU" "$OUT_DIR/decode_graph-78sm.json" ||
      note "record.py FAILED ($SHAPE-78sm)"
    note "results: $OUT_DIR/$SHAPE-78sm/"
  fi
}

# shellcheck source=bench/stages.sh
. "$ROOT/bench/stages.sh"

for st in $STAGES; do
  if ! declare -F "stage_$st" >/dev/null; then
    echo "bench/run.sh: no stage '$st' (see the comment at the top of bench/run.sh)" >&2
    exit 2
  fi
  "stage_$st"
done

echo
echo "================ summary ($OUT_DIR)"
for s in "${SUMMARY[@]}"; do echo "$s"; done
exit 0
