#!/usr/bin/env bash
# The compiled torch op's host time with and without its Autograd kernel,
# alternating, three rounds, on the installed wheel (notes.md). The "before"
# source, tmp_ab/torch_ext_before.cpp, was `git show bd95d25:python/rssm/csrc/torch_ext.cpp`
# (the commit before the Autograd kernel), carried beside the wheel.
O=$OUT/ab; R=$PWD; mkdir -p $O
rm -rf /tmp/wsite; python3 -m pip install -q --no-deps --no-index --target /tmp/wsite .whl/*.whl
rm -rf /tmp/pkgold && mkdir -p /tmp/pkgold && cp -r /tmp/wsite/rssm /tmp/pkgold/ && cp tmp_ab/torch_ext_before.cpp /tmp/pkgold/rssm/csrc/torch_ext.cpp
(cd /tmp && PYTHONPATH=/tmp/pkgold RSSM_TORCH_EXT_DIR=$O/eb python3 -m rssm.torch_ext build) > $O/b.txt 2>&1 &
(cd /tmp && PYTHONPATH=/tmp/wsite RSSM_TORCH_EXT_DIR=$O/ea python3 -m rssm.torch_ext build) > $O/a.txt 2>&1; wait
for r in 1 2 3; do for v in before after; do
  if [ $v = before ]; then PP=/tmp/pkgold; D=$O/eb; else PP=/tmp/wsite; D=$O/ea; fi
  (cd /tmp && env -u RSSM_LIBRARY PYTHONPATH=$PP RSSM_TORCH_EXT_DIR=$D python3 $R/bench/h200/torch_ext_check.py --time) > $O/t_${v}_$r.txt 2>&1
  echo "-- $v r$r: $(awk -F'\t' '!/^#/ && NF == 4 { printf "%s %.2f/%.2f (over C %.2f); ", $1, $2, $3, $2 - $4 }' $O/t_${v}_$r.txt) $(grep -c Error $O/t_${v}_$r.txt)"
done; done
