#!/usr/bin/env bash
# A/B of `rssm bench` between CLIs built elsewhere (docs/h200.md: built on
# Debian, carried to the GPU machine), in one call so that every binary
# meets the same card: each CLI in turn, AB_ROUNDS times, then one table of
# µs per layer (bench/h200/layer_ab.py). From the repository root:
#
#   bench/h200/layer_ab.sh OUT_DIR NAME=CLI [NAME=CLI ...]
#
# AB_ARGS: the sweep (default: GDN and KDA, fp32 state, L = 16, batch 1, 16
# and 256, uniform positions, median of 5, as bench/results/h200_layer's
# earlier A/B). Writes OUT_DIR/ab-NAME-rROUND.{txt,csv,json} and
# OUT_DIR/ab.txt (the table).
set -u -o pipefail
OUT_DIR=$1
shift
AB_ARGS=${AB_ARGS:-"--gate gdn,kda --state fp32 --ring-len 16 --batch 1,16,256 --positions uniform --cycles 5"}
AB_ROUNDS=${AB_ROUNDS:-1}
mkdir -p "$OUT_DIR"
status=0
for round in $(seq 1 "$AB_ROUNDS"); do
  for pair in "$@"; do
    name=${pair%%=*}
    cli=${pair#*=}
    echo "== round $round: $name ($cli bench --backend cuda $AB_ARGS)"
    # shellcheck disable=SC2086
    "$cli" bench --backend cuda $AB_ARGS --out "$OUT_DIR/ab-$name-r$round" > "$OUT_DIR/ab-$name-r$round.txt" 2>&1 ||
      { echo "   failed: $(tail -3 "$OUT_DIR/ab-$name-r$round.txt")"; status=1; }
  done
done
python3 "$(dirname "$0")/layer_ab.py" "$OUT_DIR" "$@" | tee "$OUT_DIR/ab.txt"
exit $status
