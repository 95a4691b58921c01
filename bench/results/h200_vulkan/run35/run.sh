#!/usr/bin/env bash
# Vulkan (run 35): the results of record (results.md, summary.json beside
# notes.md) after run 34's dispatch order, as run 18's, in two calls of one
# binary (.devbin/p35/rssm: built on Debian with CUDA and Vulkan on, from the
# commit before this script's): `run.sh a` conformance of every Vulkan
# variant, `rssm bench` of `vulkan` and of CUDA with the same arguments;
# `run.sh b` the benches of `vulkan` (again: `a`'s ran out of time) and
# `vulkan:coopmat`, then the split (RSSM_VK_ROW_SPLIT=2) at 16 and 64 rows,
# staggered, against the rule, and the dispatch order at uniform positions. The
# report: bench/h200/vulkan_report.py over the three benches (notes.md).
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/r35
export CLI=$PWD/.devbin/p35/rssm
export BENCH_ARGS="--gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 1,16,128,256 --positions uniform,staggered --cycles 5"
# The device returns at most 8 files: `b` keeps its outputs in one archive,
# made again after each stage so that a run cut short still returns it.
case ${1:?a or b} in
a) STAGES="vulkan bench" VULKAN_VARIANTS=vulkan CONFORM_TIMEOUT=220 BENCH_TIMEOUT=170 \
     bash bench/h200/run.sh "$O" >"$O.log" 2>&1
   grep "^== " "$O.log" ;;
b) t0=$(date +%s); T=/tmp/r35b; mkdir -p $T
   pack() { tar -C /tmp -czf "$OUT/r35b.tgz" r35b; }
   # `a`'s bench of vulkan ran out of its 170 s two rows before the end.
   STAGES=vulkan VULKAN_CONFORM=0 VULKAN_VARIANTS=vulkan BENCH_TIMEOUT=250 bash bench/h200/run.sh $T >$T/b1.log 2>&1
   grep "^== " $T/b1.log; pack
   STAGES=vulkan VULKAN_CONFORM=0 VULKAN_VARIANTS=vulkan:coopmat BENCH_TIMEOUT=250 bash bench/h200/run.sh $T >$T/b2.log 2>&1
   grep "^== " $T/b2.log; pack
   echo "($(($(date +%s)-t0)) s)"
   [ $(($(date +%s)-t0)) -gt 380 ] && exit 0
   ARGS="--backend vulkan --gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 16,64 --positions staggered --cycles 3" \
     bash bench/h200/vulkan_tune.sh "$T/split" "rule" "split2 RSSM_VK_ROW_SPLIT=2" >$T/split.log 2>&1
   pack
   # What the order costs at uniform positions (the dispatch first in the
   # step has no rows to run on 15 steps of 16).
   ARGS="--backend vulkan --gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 16,256 --positions uniform --cycles 3" \
     bash bench/h200/vulkan_tune.sh "$T/order" "first" "last RSSM_VK_FLUSH_FIRST=0" >$T/order.log 2>&1
   pack
   for b in split/rule split/split2 order/first order/last; do
     echo "-- $b"; grep -E "^(gdn|kda) " "$T/$b.txt" | awk '{print $1, $2, $4, $5, $(NF-9), $(NF-8), $(NF-7), $(NF-5), $(NF-4), $NF}'
   done ;;
esac
