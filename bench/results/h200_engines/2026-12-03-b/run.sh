#!/usr/bin/env bash
# One device call: the torch extension check, then the portable CUDA check
# (HOPPER_CLI = the CLI built on Debian from the same tree); a few texts and
# one tarball come back.
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
W=/tmp/final; mkdir -p $W/torch $W/portable
t0=$(date +%s)
echo "######## torch extension"
timeout 270 bash bench/h200/torch_ext_check.sh $W/torch 2>&1 | tail -30
echo "######## portable ($(($(date +%s)-t0)) s)"
HOPPER_CLI=.devbin/rssm timeout 330 bash bench/h200/portable_check.sh $W/portable 2>&1 | tail -45
echo "######## done ($(($(date +%s)-t0)) s)"
rm -rf $W/torch/ext/*.so 2>/dev/null
tar czf $OUT/final.tgz -C $W torch portable
cp $W/portable/table.txt $OUT/portable_table.txt 2>/dev/null
cp $W/portable/conform.txt $OUT/portable_conform.txt 2>/dev/null
