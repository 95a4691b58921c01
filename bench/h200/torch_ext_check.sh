#!/usr/bin/env bash
# The compiled torch extension (rssm.torch_ext, docs/python.md) on the GPU,
# from the repository root of the GPU machine with librssm built on Debian
# with CUDA on and carried in .devbin/ (librssm.so.0; docs/h200.md):
#
#   bench/h200/torch_ext_check.sh [OUT_DIR]     (default: $OUT, else ./torch-ext-out)
#
# 1. builds the extension against the machine's torch (into OUT_DIR/ext);
# 2. tests/python/test_torch.py and test_torch_ext.py on cuda with it, and
#    test_torch.py's CUDA graph and compile cases without it (the fallback);
# 3. a captured CUDA graph of two layers and the advance against eager steps,
#    bit for bit (bench/h200/torch_ext_check.py --graph);
# 4. host time per eager call, each call timed alone: the Python path
#    (RSSM_TORCH_EXT=off) against the extension; the table last.
set -u -o pipefail
OUT_DIR=${1:-${OUT:-$PWD/torch-ext-out}}
BIN=${BIN:-.devbin}
mkdir -p "$OUT_DIR"
export RSSM_LIBRARY=$PWD/$BIN/librssm.so.0 PYTHONPATH=$PWD/python RSSM_TORCH_EXT_DIR=$OUT_DIR/ext
export MAX_JOBS=${MAX_JOBS:-16}
t0=$(date +%s)
step() { echo "== $1: rc $2 ($(($(date +%s) - t0)) s)"; }

timeout 300 python3 -m rssm.torch_ext build --verbose >"$OUT_DIR/build.txt" 2>&1
step "build: $(tail -1 "$OUT_DIR/build.txt")" $?

if python3 -c "import pytest" 2>/dev/null; then
  timeout 300 python3 -m pytest -q -p no:cacheprovider -rs tests/python/test_torch.py tests/python/test_torch_ext.py \
    >"$OUT_DIR/pytest_ext.txt" 2>&1
  step "pytest test_torch.py test_torch_ext.py, extension: $(tail -1 "$OUT_DIR/pytest_ext.txt")" $?
  grep -E "^(FAILED|ERROR)|SKIPPED" "$OUT_DIR/pytest_ext.txt" | head -8
  RSSM_TORCH_EXT=off timeout 300 python3 -m pytest -q -p no:cacheprovider tests/python/test_torch.py \
    -k "graph or capture or compile" >"$OUT_DIR/pytest_off.txt" 2>&1
  step "pytest test_torch.py -k 'graph or capture or compile', Python path: $(tail -1 "$OUT_DIR/pytest_off.txt")" $?
  grep -E "^(FAILED|ERROR)" "$OUT_DIR/pytest_off.txt" | head -5
else
  echo "== pytest: not on this machine"
fi

timeout 120 python3 bench/h200/torch_ext_check.py --graph --time >"$OUT_DIR/check_ext.txt" 2>&1
step "graph check and timing, extension" $?
RSSM_TORCH_EXT=off timeout 120 python3 bench/h200/torch_ext_check.py --graph --time >"$OUT_DIR/check_off.txt" 2>&1
step "graph check and timing, Python path" $?
grep "^# graph" "$OUT_DIR/check_ext.txt" "$OUT_DIR/check_off.txt"
grep -E "Error|Traceback" "$OUT_DIR/check_ext.txt" "$OUT_DIR/check_off.txt" | head -5

echo "host us per eager call on cuda (tiny layer, B=4; median and p90 of single calls; 'over C' less the ctypes C call)"
printf "%-14s %-10s %8s %8s %8s\n" path kernel median p90 "over C"
for f in off ext; do
  label=python; [ "$f" = ext ] && label=C++
  awk -F'\t' -v ops="$label" '!/^#/ && NF == 4 { printf "%-14s %-10s %8.2f %8.2f %8.2f\n", $1, ops, $2, $3, $2 - $4 }' \
    "$OUT_DIR/check_$f.txt"
done
