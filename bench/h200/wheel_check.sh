#!/usr/bin/env bash
# The wheel on the GPU machine, as an engine developer gets it: installed
# without network from .whl/ (built on Debian: `RSSM_CUDA=ON pip wheel .
# --no-deps -w .whl`, docs/python.md), then used from /tmp with nothing of
# the checkout on the path and no RSSM_LIBRARY:
#
#   bench/h200/wheel_check.sh [OUT_DIR]     (default: $OUT, else ./wheel-out)
#
# 1. the install, the import and the backends;
# 2. bench/h200/device_check.py (the device from the tensors, the backends
#    against each other);
# 3. the compiled torch extension built from the installed package's rssm.h
#    against the machine's torch, then tests/python/test_torch.py,
#    test_torch_ext.py and test_engine_entries.py on the installed package;
# 4. bench/h200/torch_ext_check.py --graph --time: a captured graph against
#    eager steps, and the host time per eager call of the op with the
#    extension against the C call; the table last.
set -u -o pipefail
OUT_DIR=${1:-${OUT:-$PWD/wheel-out}}
R=$PWD
mkdir -p "$OUT_DIR"
t0=$(date +%s)
step() { echo "== $1: rc $2 ($(($(date +%s) - t0)) s)"; }

W=$(ls "$R"/.whl/rssm-*.whl | head -1)
# Into a folder of its own on the path of the machine's python (the image's
# torch is not in its site-packages, so a venv would not see it).
rm -rf /tmp/wsite
python3 -m pip install --no-deps --no-index --target /tmp/wsite "$W" >"$OUT_DIR/install.txt" 2>&1
rc=$? PYBIN=python3 SITE=/tmp/wsite
step "install $(basename "$W")" $rc
run_py() { (cd /tmp && env -u RSSM_LIBRARY -u PYTHONPATH ${SITE:+PYTHONPATH=$SITE} RSSM_TORCH_EXT_DIR="$OUT_DIR/ext" "$PYBIN" "$@"); }
run_py -c "import rssm; print(rssm.__version__, rssm.library_path(), rssm.backend_names())" >"$OUT_DIR/import.txt" 2>&1
step "import: $(tail -1 "$OUT_DIR/import.txt")" $?

run_py "$R/bench/h200/device_check.py" >"$OUT_DIR/device_check.txt" 2>&1
step "device_check: $(tail -1 "$OUT_DIR/device_check.txt")" $?

MAX_JOBS=${MAX_JOBS:-16} run_py -m rssm.torch_ext build --verbose >"$OUT_DIR/ext_build.txt" 2>&1
step "torch extension build: $(tail -1 "$OUT_DIR/ext_build.txt")" $?
run_py -c "import torch, rssm; print(rssm.torch_extension_status())" >"$OUT_DIR/ext_status.txt" 2>&1
step "torch extension: $(tail -1 "$OUT_DIR/ext_status.txt")" $?

(cd "$R/tests/python" && env -u RSSM_LIBRARY -u PYTHONPATH ${SITE:+PYTHONPATH=$SITE} RSSM_TORCH_EXT_DIR="$OUT_DIR/ext" \
  timeout 400 "$PYBIN" -m pytest -q -p no:cacheprovider -rs test_torch.py test_torch_ext.py test_engine_entries.py) \
  >"$OUT_DIR/pytest.txt" 2>&1
step "pytest on the installed package: $(tail -1 "$OUT_DIR/pytest.txt")" $?
grep -E "^(FAILED|ERROR)" "$OUT_DIR/pytest.txt" | head -8

run_py "$R/bench/h200/torch_ext_check.py" --graph --time >"$OUT_DIR/check.txt" 2>&1
step "graph check and host time" $?
grep -E "^# graph|Error|Traceback" "$OUT_DIR/check.txt" | head -6
echo "host us per eager call on cuda (tiny layer, B=4; median and p90 of single calls; 'over C' less the C call)"
printf "%-14s %8s %8s %8s\n" path median p90 "over C"
awk -F'\t' '!/^#/ && NF == 4 { printf "%-14s %8.2f %8.2f %8.2f\n", $1, $2, $3, $2 - $4 }' "$OUT_DIR/check.txt"
