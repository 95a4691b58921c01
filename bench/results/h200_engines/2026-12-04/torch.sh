#!/usr/bin/env bash
# The compiled torch extension with kernels of all three ops (decode,
# materialise, advance) and a key built in a per-thread buffer (notes.md,
# "2026-12-04"), with .devbin/librssm.so.0 (CUDA on, built on Debian):
# 1. bench/h200/torch_ext_check.sh: the build, test_torch.py and
#    test_torch_ext.py on cuda, the captured graph against eager steps, the
#    host time per call;
# 2. host time of the previous package (.devbin/python_old: python/ of
#    4e397cb, its extension of the decode alone) against this one,
#    alternating, three rounds.
cd "$(dirname "$0")/../../../.." || exit 1  # the repository root
O=$OUT/te; mkdir -p "$O"
bash bench/h200/torch_ext_check.sh "$O"
export RSSM_LIBRARY=$PWD/.devbin/librssm.so.0
(PYTHONPATH=$PWD/.devbin/python_old RSSM_TORCH_EXT_DIR=$O/ext_old python3 -m rssm.torch_ext build) >"$O/build_old.txt" 2>&1
echo "old extension: $(tail -1 "$O/build_old.txt")"
for r in 1 2 3; do for v in old new; do
  if [ $v = old ]; then PP=$PWD/.devbin/python_old; D=$O/ext_old; else PP=$PWD/python; D=$O/ext; fi
  PYTHONPATH=$PP RSSM_TORCH_EXT_DIR=$D python3 bench/h200/torch_ext_check.py --time >"$O/t_${v}_$r.txt" 2>&1
  echo "-- $v r$r: $(awk -F'\t' '!/^#/ && NF == 4 { printf "%s %.2f/%.2f (over C %.2f); ", $1, $2, $3, $2 - $4 }' "$O/t_${v}_$r.txt") $(grep -c Error "$O/t_${v}_$r.txt")"
done; done
tar -C "$OUT" -czf "$OUT/te.tgz" --exclude="ext*" te && rm -rf "$O"
