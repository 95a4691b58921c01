#!/usr/bin/env bash
# Speculative-decode verify on the H200 in one go (docs/design.md §9), from
# the repository root of the GPU machine, with binaries built on Debian with
# CUDA and Vulkan on and carried in .devbin/ (rssm, test_verify and its
# libcmocka.so.0) and the Vulkan loader packages in .gl/ (docs/h200.md):
#
#   bench/h200/verify_check.sh [OUT_DIR]     (default: $OUT, else ./verify-out)
#
# 1. `rssm conform --case verify` on the CUDA variants and on Vulkan
#    (portable and cooperative-matrix kernels) of the same GPU
#    (VERIFY_BACKENDS replaces the list);
# 2. tests/test_verify.c on cuda (when carried in .devbin/);
# 3. compute-sanitizer memcheck and racecheck on two verify cases, on cuda
#    and cuda:bulk (SANITIZE_BACKENDS), then bench/h200/layer_verify_check.py
#    (LAYER_CHECK=0 skips it);
# 4. with PROFILE=1, Nsight Compute on the window kernels of a GDN and a KDA
#    window at batch 256 (profile.txt);
# 5. the per-layer window from torch in captured CUDA graphs
#    (bench/h200/torch_verify.py, TORCH_VERIFY_ARGS adds options; needs
#    librssm.so.0 in .devbin/; TORCH_VERIFY=0 skips it); with PEER_VERIFY=1
#    and .peers/vllm_fla carried (tools/peer-sources), vLLM's Triton spec-decode
#    verify the same way (bench/h200/peer_verify.py, PEER_VERIFY_ARGS adds
#    options; its failure is logged, not fatal);
# 6. the Vulkan window on the same GPU: test_verify and test_layer (carried in
#    .devbin/ when built) and rssm bench --verify on each of VULKAN_VARIANTS;
# 7. `rssm bench --verify` on cuda (VERIFY_ARGS replaces its sweep).
# Prints each step's status, the verify tables last.
set -u -o pipefail
OUT_DIR=${1:-${OUT:-$PWD/verify-out}}
BIN=${BIN:-.devbin}
ARGS=${VERIFY_ARGS:-"--gate gdn,kda --state fp32 --ring-len 16 --batch 64,256 --positions uniform --cycles 5 --verify 2,4,8 --accept 100,50"}
mkdir -p "$OUT_DIR"
cp "$BIN/libcmocka.so.0" /tmp/ 2>/dev/null && export LD_LIBRARY_PATH=/tmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if ! ldconfig -p | grep -q libvulkan.so.1; then
  for f in .gl/*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done
  ldconfig
fi
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
export __EGL_VENDOR_LIBRARY_FILENAMES=${__EGL_VENDOR_LIBRARY_FILENAMES:-/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json}
B=$BIN/rssm
t0=$(date +%s)
at() { echo "   (t = $(($(date +%s) - t0)) s)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader

BACKENDS=${VERIFY_BACKENDS:-"cuda cuda:bulk cuda:stream cuda:pipeline vulkan vulkan:coopmat vulkan:coopmat-emulated"}
# shellcheck disable=SC2046 # one --backend option per variant
timeout 240 "$B" conform $(for v in $BACKENDS; do printf -- '--backend %s ' "$v"; done) --case verify \
  >"$OUT_DIR/conform_verify.txt" 2>&1
echo "== conform --case verify: rc $?, $(tail -1 "$OUT_DIR/conform_verify.txt")"
grep -E " FAIL |SKIP" "$OUT_DIR/conform_verify.txt" | head -8
at

if [ -x "$BIN/test_verify" ]; then
  RSSM_TEST_BACKEND=cuda timeout 120 "$BIN/test_verify" >"$OUT_DIR/test_verify_cuda.txt" 2>&1
  echo "== test_verify on cuda: rc $?"
  grep -E "^\[  (PASSED|FAILED)|FAILED|ERROR" "$OUT_DIR/test_verify_cuda.txt" | head -8
  at
fi

# each window kernel: the plan's choice at the cases' small batches is the
# two-launch window, cuda:bulk the persistent one
for v in ${SANITIZE_BACKENDS:-cuda cuda:bulk}; do
  for tool in memcheck racecheck; do
    f="$OUT_DIR/sanitize_${tool}_${v/:/-}.txt"
    timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 "$B" conform --backend "$v" --quick \
      --case gdn/replay/verify-T4 --case kda/replay/verify-T7 >"$f" 2>&1
    echo "== compute-sanitizer $tool on $v: rc $?, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$f")"
  done
done
at

# rssm_layer_verify on torch tensors against the cpu backend's window
if [ "${LAYER_CHECK:-1}" = 1 ]; then
  PYTHONPATH=python RSSM_LIBRARY=$BIN/librssm.so.0 timeout 300 python3 bench/h200/layer_verify_check.py \
    >"$OUT_DIR/layer_verify_check.txt" 2>&1
  echo "== layer_verify_check.py: rc $?"
  tail -14 "$OUT_DIR/layer_verify_check.txt"
  at
fi

if [ "${PROFILE:-0}" = 1 ]; then
  for gate in gdn kda; do
    timeout 200 ncu --clock-control none -k regex:window --launch-skip 20 --launch-count 2 \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis \
      --section InstructionStats --section LaunchStats "$B" bench --backend cuda --gate $gate --state fp32 \
      --batch 256 --ring-len 16 --positions uniform --cycles 1 --verify 4 --accept 100 >>"$OUT_DIR/profile.txt" 2>&1
    echo "== ncu ($gate): rc $?"
  done
  grep -E "window_|Duration|Memory Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Issue Slots Busy|Registers Per|Warp Cycles Per Issued|Executed Ipc A" \
    "$OUT_DIR/profile.txt" | head -60
  at
fi

if [ "${TORCH_VERIFY:-1}" = 1 ]; then
  # shellcheck disable=SC2086 # TORCH_VERIFY_ARGS is a list of options
  PYTHONPATH=python:bench/h200 RSSM_LIBRARY=$BIN/librssm.so.0 timeout 400 python3 bench/h200/torch_verify.py \
    --out "$OUT_DIR" ${TORCH_VERIFY_ARGS:-} >"$OUT_DIR/torch_verify.txt" 2>&1
  echo "== torch_verify.py: rc $?"
  at
fi
if [ "${PEER_VERIFY:-0}" = 1 ]; then
  if [ -d .peers/vllm_fla ]; then
    # shellcheck disable=SC2086 # PEER_VERIFY_ARGS is a list of options
    PYTHONPATH=.peers timeout 500 python3 bench/h200/peer_verify.py --json "$OUT_DIR/peer_verify.json" \
      ${PEER_VERIFY_ARGS:-} >"$OUT_DIR/peer_verify.txt" 2>&1
    echo "== peer_verify.py: rc $?, $(grep -c ': ok$' "$OUT_DIR/peer_verify.txt") checks ok"
    grep -E "^check .*FAIL|Error" "$OUT_DIR/peer_verify.txt" | head -5
  else
    echo "== peer_verify.py: skipped, no .peers/vllm_fla (run tools/peer-sources and carry .peers)"
  fi
  at
fi

# The Vulkan window on this GPU: its tests (the backend's window against the
# oracle, rssm_layer_record_verify against the cpu backend's rssm_layer_verify)
# on each of VULKAN_VARIANTS, and rssm bench --verify of each
# (VULKAN_VERIFY_ARGS; VULKAN_VERIFY=0 skips all of it).
if [ "${VULKAN_VERIFY:-1}" = 1 ]; then
  for v in ${VULKAN_VARIANTS:-vulkan vulkan:coopmat}; do
    for t in test_verify test_layer; do
      [ -x "$BIN/$t" ] || continue
      RSSM_TEST_BACKEND=$v RSSM_REQUIRE_BACKENDS=$v timeout 200 "$BIN/$t" >"$OUT_DIR/$t-${v/:/-}.txt" 2>&1
      echo "== $t on $v: rc $?, $(grep -c '\[       OK \]' "$OUT_DIR/$t-${v/:/-}.txt") passed"
      grep -E "FAILED|ERROR" "$OUT_DIR/$t-${v/:/-}.txt" | head -5
    done
    vargs=${VULKAN_VERIFY_ARGS:-"--gate gdn,kda --state fp32 --ring-len 16 --batch 256 --positions uniform --cycles 3 --verify 4 --accept 100"}
    # shellcheck disable=SC2086 # a list of options
    timeout 300 "$B" bench --backend "$v" $vargs --out "$OUT_DIR/verify-${v/:/-}" >"$OUT_DIR/verify-${v/:/-}.txt" 2>&1
    echo "== rssm bench --backend $v --verify: rc $?"
    at
  done
fi

# shellcheck disable=SC2086 # ARGS is a list of options
timeout 400 "$B" bench --backend cuda $ARGS --out "$OUT_DIR/verify" >"$OUT_DIR/verify.txt" 2>&1
echo "== rssm bench --backend cuda $ARGS: rc $?"
at
cat "$OUT_DIR/verify.txt"
for f in "$OUT_DIR"/verify-vulkan*.txt; do [ -f "$f" ] && grep -E "^(gdn|kda) " "$f"; done
[ -f "$OUT_DIR/torch_verify.txt" ] && tail -60 "$OUT_DIR/torch_verify.txt"
if [ -f "$OUT_DIR/peer_verify.txt" ]; then grep -E "^(check |vLLM|gate|gdn )" "$OUT_DIR/peer_verify.txt" || true; fi
