#!/usr/bin/env bash
# Vulkan (run 27): where the one-dispatch window kernel's time goes on the
# GPU: an experimental build (not committed: a specialization constant
# WIN_CUT read from RSSM_VK_WINDOW_CUT, shaders/window.glsl) that returns
# after phase A (1), after phase B (2), or runs phase C's loads and no
# tokens (3); 0 is the whole kernel. bench/h200/batch_run_probe.c as in
# run 26, RSSM_VK_WINDOW=1, GDN fp32 state, raw gates, bf16 activations.
# The shader part of the build: cut.patch (on the window.glsl of 4fea4a9;
# the host read the variable into specialization constant 28). Cuts 4-7
# came in the second call (call2/, ROWS=256 CUTS="0 4 5 6 7"): the token
# loop without its stores (4), its v loads (5), its reduction (6), its ring
# part (7).
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/r27; mkdir -p "$O"
for d in .gl/*.deb; do dpkg -x "$d" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export LD_LIBRARY_PATH=$PWD/.devbin/p27
P=.devbin/p27/batch_run_probe
ROWS=${ROWS:-16 256} CUTS=${CUTS:-0 1 2 3}
for rows in $ROWS; do
  layers=$([ $rows = 16 ] && echo 8 || echo 1)
  for cut in $CUTS; do
    RSSM_VK_WINDOW=1 RSSM_VK_WINDOW_CUT=$cut timeout 100 $P vulkan $rows $layers bench >"$O/probe-$rows-cut$cut.txt" 2>&1
    echo "rows $rows layers $layers cut $cut: rc $?"; tail -2 "$O/probe-$rows-cut$cut.txt"
  done
done
tar -C "$OUT" -czf "$OUT/r27.tgz" r27 && rm -rf "$O"
