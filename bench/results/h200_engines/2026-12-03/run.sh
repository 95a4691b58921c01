#!/usr/bin/env bash
# the first call (eng1)
bash bench/h200/engine_check.sh "$OUT/eng1"
