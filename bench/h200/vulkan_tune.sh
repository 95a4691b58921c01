#!/usr/bin/env bash
# A sweep of the Vulkan decode's kernel choices on the GPU machine: one
# `rssm bench` per configuration, each a set of the measurement overrides of
# docs/bench.md (RSSM_VK_ROW_SPLIT, RSSM_VK_PREFETCH), with the driver's
# pipeline statistics; prints one table of the replay/packed rows last.
#
#   CLI=path/to/rssm bench/h200/vulkan_tune.sh OUT_DIR "NAME [VAR=VALUE...]"...
#
# ARGS: the `rssm bench` options of every configuration (default: GDN, fp32
# state, L = 16, batch 16 and 256, uniform positions, median of 5).
set -u -o pipefail
OUT_DIR=$1
shift
CLI=${CLI:?CLI=path of an rssm built with Vulkan on}
ARGS=${ARGS:-"--backend vulkan --gate gdn --state fp32 --ring-len 16 --batch 16,256 --positions uniform --cycles 5"}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$OUT_DIR"
if ! ldconfig -p | grep -q libvulkan.so.1; then
  for f in "$ROOT"/.gl/*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done
  ldconfig
fi
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
for cfg in "$@"; do
  read -r name envs <<<"$cfg"
  # shellcheck disable=SC2086 # the configuration's variables, then the options
  env RSSM_VK_PIPELINE_STATS=1 $envs timeout 300 "$CLI" bench $ARGS --out "$OUT_DIR/$name" \
    >"$OUT_DIR/$name.txt" 2>&1
  echo "== $name ($envs): rc $?"
  grep "^rssm vulkan pipeline" "$OUT_DIR/$name.txt" | sort -u | sed 's/Binary Size=[0-9]* //; s/Stack Size=[0-9]* //' \
    >"$OUT_DIR/$name.pipelines.txt"
  sed -i "/^rssm vulkan pipeline/d" "$OUT_DIR/$name.txt"
done
echo
for cfg in "$@"; do
  read -r name envs <<<"$cfg"
  echo "---- $name ($envs)"
  cat "$OUT_DIR/$name.pipelines.txt" | sed 's/rssm vulkan pipeline //' | cut -c1-160
  grep -E "^(gate|gdn|kda|backend|  )" "$OUT_DIR/$name.txt" | head -20
done
