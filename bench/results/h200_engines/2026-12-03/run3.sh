set -u
O=$OUT/d3; mkdir -p $O; t0=$(date +%s); R=$PWD
step() { echo "== $1: rc $2 ($(($(date +%s)-t0)) s)"; }
# 1. the wheel, installed without network into a venv that sees the system's torch
W=$(ls .whl/rssm-*.whl)
{ python3 -m venv --system-site-packages /tmp/wv && /tmp/wv/bin/python -m pip install --no-deps --no-index "$W"; } > $O/wheel_install.txt 2>&1
rc=$?; PYBIN=/tmp/wv/bin/python; SITE=
if [ $rc -ne 0 ]; then python3 -m pip install --no-deps --no-index --target /tmp/wsite "$W" >> $O/wheel_install.txt 2>&1; rc=$?; PYBIN=python3; SITE=/tmp/wsite; fi
PY="env -u RSSM_LIBRARY PYTHONPATH=${SITE} $PYBIN"
step "wheel install ($W)" $rc; tail -2 $O/wheel_install.txt
(cd /tmp && $PY -c "import rssm; print(rssm.__version__, rssm.library_path(), rssm.backend_names())") 2>&1 | tee $O/wheel_import.txt
(cd /tmp && env -u RSSM_LIBRARY PYTHONPATH=$R/.peers/engine${SITE:+:$SITE} $PYBIN $R/.peers/engine/upstream/test_linear_replayssm_decode.py) > $O/wheel_sglang_test.txt 2>&1
step "SGLang test on the installed wheel: $(tail -1 $O/wheel_sglang_test.txt)" $?
(cd /tmp && $PY $R/bench/h200/device_check.py) > $O/wheel_device_check.txt 2>&1
step "device_check on the installed wheel: $(tail -1 $O/wheel_device_check.txt)" $?
(cd $R/tests/python && $PY -m pytest -q -p no:cacheprovider test_torch.py test_engine_entries.py -k "fp16 or cuda or engine or sglang or vllm or padding") > $O/wheel_pytest.txt 2>&1
step "pytest on the installed wheel: $(tail -1 $O/wheel_pytest.txt)" $?
# 2. the bf16-state A/B of the io helpers, repeated, alternating
A="--backend cuda --gate gdn,kda --state bf16 --ring-len 16 --batch 256 --positions uniform --cycles 3"
for r in 1 2; do for b in rssm_old rssm; do timeout 30 .devbin/$b bench $A > $O/ab$r-$b.txt 2>&1; echo "-- $b r$r: $(grep -E '^(gdn|kda) ' $O/ab$r-$b.txt | awk '{print $1, $(NF-4)}' | tr '\n' ' ')"; done; done
step "A/B" 0
# Then, on the same machine (the venv did not see the system's torch): the
# wheel installed with `pip install --no-deps --no-index --target /tmp/wsite`,
# SGLang's test (6 tests, OK, 9.3 s) and bench/h200/device_check.py (ok; host
# time per rssm_layer_run 4.78 us with known addresses) on it, from /tmp, with
# no RSSM_LIBRARY and nothing of the checkout on PYTHONPATH but .peers/engine.
