#!/usr/bin/env bash
# Vulkan (run 19): the device's shared pipelines (vk/vk_shared.c) and the
# `_rt` extents (CPU devices only) on the GPU's driver: conformance of every
# Vulkan variant and of cuda with the new CLI, then `rssm bench` of `vulkan`,
# the build before them (.devbin/rssm_old, run 18's, from bd95d25's tree) and the new
# one (.devbin/rssm, from the commit that brought this script) alternating,
# twice. The GPU's SPIR-V modules are byte for byte the same in both, so the
# benchmark should differ by noise only. .gl/: the loader packages
# (docs/h200.md).
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/r19; mkdir -p "$O"
for d in .gl/*.deb; do dpkg -x "$d" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
NEW=$PWD/.devbin/rssm OLD=$PWD/.devbin/rssm_old
timeout 300 "$NEW" conform --backend vulkan --backend vulkan:portable --backend vulkan:coopmat \
  --backend vulkan:coopmat-emulated --backend cuda >"$O/conform.txt" 2>&1
echo "conform rc $?: $(tail -1 "$O/conform.txt")"
grep -E " FAIL " "$O/conform.txt" | head
ARGS="--backend vulkan --gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 16,256 --positions uniform --cycles 5"
for r in 1 2; do for side in old new; do
  cli=$NEW; [ $side = old ] && cli=$OLD
  # shellcheck disable=SC2086
  timeout 200 "$cli" bench $ARGS --out "$O/bench-$side-$r" >"$O/bench-$side-$r.txt" 2>&1
  echo "bench $side round $r: rc $?"
done; done
python3 - "$O" <<'PY'
import json, sys
o = sys.argv[1]
runs = {s: [json.load(open(f"{o}/bench-{s}-{r}.json"))["rows"] for r in (1, 2)] for s in ("old", "new")}
print(f"{'gate':4} {'state':5} {'batch':>5}  us/layer: packed old r1, old r2, new r1, new r2; replay the same")
for i, a in enumerate(runs["old"][0]):
    per = lambda s, r, k: runs[s][r][i][k] / runs[s][r][i]["layers"]
    f = lambda k: " ".join(f"{per(s, r, k):7.2f}" for s in ("old", "new") for r in (0, 1))
    print(f"{a['gate']:4} {a['state_dtype']:5} {a['batch']:5}  {f('packed_us')}    {f('replay_us')}")
PY
