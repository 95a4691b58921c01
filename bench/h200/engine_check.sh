#!/usr/bin/env bash
# What an engine developer adopting rssm checks on the GPU, in one go, from
# the repository root of the GPU machine with binaries built on Debian with
# CUDA on and carried in .devbin/ (rssm, librssm.so.0; docs/h200.md):
#
#   bench/h200/engine_check.sh [OUT_DIR]     (default: $OUT, else ./engine-out)
#
# 1. `rssm conform` on the four CUDA variants: every case (the activations'
#    loads and stores are one set of helpers for fp32, bf16 and fp16), the
#    fp16-io cases among them;
# 2. SGLang's own ReplaySSM kernel test (tools/engine-tests sets it up in
#    .peers/engine/, which must be carried), first on SGLang's Triton kernel
#    (the harness checked), then on rssm.sglang's wrapper;
# 3. tests/python/test_torch.py's fp16 and CUDA tests, when pytest is there;
# 4. EXTRA: a command run last (another check script), logged like the rest;
# 5. `rssm bench` on cuda (BENCH_ARGS replaces its sweep), the tables last.
set -u -o pipefail
OUT_DIR=${1:-${OUT:-$PWD/engine-out}}
BIN=${BIN:-.devbin}
ARGS=${BENCH_ARGS:-"--gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 1,4,16,256 --positions uniform --cycles 5"}
mkdir -p "$OUT_DIR"
export RSSM_LIBRARY=$PWD/$BIN/librssm.so.0
t0=$(date +%s)
step() { echo "== $1: rc $2 ($(($(date +%s) - t0)) s)"; }

"$BIN/rssm" conform --backend cuda --backend cuda:bulk --backend cuda:stream --backend cuda:pipeline \
  >"$OUT_DIR/conform.txt" 2>&1
step "conform, CUDA variants: $(tail -1 "$OUT_DIR/conform.txt")" $?
grep -E " FAIL " "$OUT_DIR/conform.txt" | head -5
grep -E "fp16-io|L1-equals-packed-fp16" "$OUT_DIR/conform.txt" | grep -c PASS | sed 's/^/   fp16 cases passed: /'

if [ -f .peers/engine/upstream/test_linear_replayssm_decode.py ]; then
  for impl in sglang rssm; do
    RSSM_ENGINE_TEST_IMPL=$impl PYTHONPATH=.peers/engine:python timeout 600 \
      python3 .peers/engine/upstream/test_linear_replayssm_decode.py -v >"$OUT_DIR/sglang_test_$impl.txt" 2>&1
    step "SGLang test_linear_replayssm_decode.py on $impl's kernel: $(tail -1 "$OUT_DIR/sglang_test_$impl.txt")" $?
    grep -E "^(FAIL|ERROR):|Mismatched|AssertionError" "$OUT_DIR/sglang_test_$impl.txt" | head -5
  done
else
  echo "== SGLang test: skipped (.peers/engine not carried: tools/engine-tests)"
fi

if python3 -c "import pytest" 2>/dev/null; then
  PYTHONPATH=python timeout 300 python3 -m pytest -q -p no:cacheprovider tests/python/test_torch.py \
    >"$OUT_DIR/pytest_torch.txt" 2>&1
  step "pytest tests/python/test_torch.py: $(tail -1 "$OUT_DIR/pytest_torch.txt")" $?
else
  echo "== pytest: not on this machine"
fi

if [ -n "${EXTRA:-}" ]; then
  bash -c "$EXTRA" >"$OUT_DIR/extra.txt" 2>&1
  step "EXTRA ($EXTRA)" $?
  tail -15 "$OUT_DIR/extra.txt"
fi

# shellcheck disable=SC2086 # the sweep's options
"$BIN/rssm" bench --backend cuda $ARGS --out "$OUT_DIR/bench-cuda" >"$OUT_DIR/bench-cuda.txt" 2>&1
step "bench cuda" $?
grep -E "^(copy|gate|gdn|kda) " "$OUT_DIR/bench-cuda.txt"
