set -u
O=$OUT/d2; mkdir -p $O; t0=$(date +%s)
export RSSM_LIBRARY=$PWD/.devbin/librssm.so.0
PYTHONPATH=python timeout 120 python3 bench/h200/device_check.py > $O/device_check.txt 2>&1; echo "== device_check rc $? ($(($(date +%s)-t0)) s)"; grep -E "^(FAIL|INFO|SKIP)" $O/device_check.txt | head -12; grep -c "^PASS" $O/device_check.txt
RSSM_ENGINE_TEST_IMPL=rssm PYTHONPATH=.peers/engine:python timeout 120 python3 .peers/engine/upstream/test_linear_replayssm_decode.py > $O/sglang_test_rssm.txt 2>&1; echo "== sglang test rc $? $(tail -1 $O/sglang_test_rssm.txt) ($(($(date +%s)-t0)) s)"
A="--backend cuda --gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 4,256 --positions uniform --cycles 5"
for b in rssm_old rssm; do timeout 150 .devbin/$b bench $A --out $O/ab-$b > $O/ab-$b.txt 2>&1; echo "== bench $b rc $? ($(($(date +%s)-t0)) s)"; done
PYTHONUNBUFFERED=1 PYTHONPATH=python:.peers timeout $((470-($(date +%s)-t0))) python3 bench/h200/mini_engine.py --batches 1,16,256 --positions staggered --reps 10 --out $O/mini_engine.json > $O/mini_engine.txt 2>&1; echo "== mini_engine rc $? ($(($(date +%s)-t0)) s)"; tail -20 $O/mini_engine.txt
for b in rssm_old rssm; do echo "-- $b"; grep -E "^(copy|gdn|kda) " $O/ab-$b.txt | cut -c1-135; done
