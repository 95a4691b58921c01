#!/usr/bin/env bash
# The fat wheel on the GPU machine (notes.md, "The fat wheel ..."): built on
# Debian 12 with `RSSM_CUDA=ON pip wheel . --no-deps --no-build-isolation -w .whl`
# (RSSM_CUDA_ARCHS from pyproject.toml: sm_80;sm_89;sm_90a;sm_100;compute_80),
# .whl/ carried, then from the repository root:
bash bench/h200/wheel_check.sh "$OUT/w"
