#!/usr/bin/env bash
# Vulkan (run 36): a step's dispatch order chosen by its rows (the flush rows'
# dispatch first where some row flushes, last where none does; the timed
# program knows each step's header when it is recorded), against run 35's
# flush rows always first (RSSM_VK_FLUSH_FIRST=1): GDN fp32 and KDA bf16,
# 16 and 256 rows, uniform and staggered, 3 cycles; then conformance of
# `vulkan` (--quick). .devbin/p36/rssm: built on Debian with CUDA and Vulkan
# on, from the commit with this script.
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
T=/tmp/r36; mkdir -p $T
for d in .gl/*.deb; do dpkg -x "$d" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export CLI=$PWD/.devbin/p36/rssm
pack() { tar -C /tmp -czf "$OUT/r36.tgz" r36; }
for shape in "gdn fp32" "kda bf16"; do
  set -- $shape
  ARGS="--backend vulkan --gate $1 --state $2 --ring-len 16 --batch 16,256 --positions uniform,staggered --cycles 3" \
    bash bench/h200/vulkan_tune.sh "$T/$1-$2" "rule" "first RSSM_VK_FLUSH_FIRST=1" >$T/$1-$2.log 2>&1
  pack
done
timeout 60 $CLI conform --quick --backend vulkan >$T/conform.txt 2>&1
echo "conform: rc $?, $(tail -1 $T/conform.txt)"; pack
for f in $T/*/rule.txt $T/*/first.txt; do
  echo "-- $f"; grep -E "^(gdn|kda) " "$f" | awk '{print $1, $2, $4, $5, $(NF-9), $(NF-8), $(NF-7), $(NF-5), $(NF-4), $NF}'
done
