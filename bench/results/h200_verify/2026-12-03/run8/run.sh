#!/usr/bin/env bash
# run8 part 1: the CUDA window of record and the published verify kernels
cd "$(dirname "$0")/.." || exit 1
O=$OUT/run8
VERIFY_BACKENDS="cuda cuda:bulk cuda:stream cuda:pipeline" VULKAN_VERIFY=0 SANITIZE_BACKENDS="cuda cuda:bulk" \
  PROFILE=1 PEER_VERIFY=1 \
  VERIFY_ARGS="--gate gdn,kda --state fp32 --ring-len 16 --batch 256 --positions uniform --cycles 1 --verify 4,8 --accept 100" \
  bash bench/h200/verify_check.sh "$O" 2>&1 | tee "$O.log" | tail -150
