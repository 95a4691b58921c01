#!/usr/bin/env bash
# The CUDA backend's portable path on an H200: a build whose only code is
# compute_80 PTX (what a GPU newer than every machine code of a build runs,
# and what stands in here for an A100 or an L40: the kernels without their
# sm_90 parts), checked and timed against the default build. From the
# repository root of the GPU machine:
#
#   bench/h200/portable_check.sh OUT_DIR
#
# 1. builds the CLI twice under /tmp, side by side: RSSM_CUDA_ARCHS=compute_80
#    (PORTABLE_ARCHS) and the default targets (sm_90a + compute_90 PTX);
#    HOPPER_CLI=path skips the second and times that CLI instead;
# 2. `rssm info` of both: which code the H200 runs and what it allows;
# 3. `rssm conform` of the portable build on the four CUDA variants: cuda,
#    cuda:stream and cuda:pipeline pass every case, cuda:bulk is refused on
#    every case with the reason (its code has no bulk copies);
# 4. `rssm bench --backend cuda` of both at batch 1, 16 and 256, GDN and KDA,
#    fp32 and bf16 state (BENCH_ARGS replaces the sweep), then a table of
#    the replay and packed step times side by side.
# Sized to finish in under 5 minutes with 16 cores, builds included (the
# portable build's first run compiles its PTX on the device; the driver
# caches it for the runs after).
# Writes at most 8 files into OUT_DIR (what the device tool brings back):
# build.log, info.txt, conform.txt, bench-{portable,hopper}.{txt,csv},
# table.txt. Exits non-zero when a check fails.
set -u -o pipefail
OUT_DIR=${1:?usage: bench/h200/portable_check.sh OUT_DIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 8)}
PORTABLE_ARCHS=${PORTABLE_ARCHS:-compute_80}
PORTABLE_BUILD=${PORTABLE_BUILD:-/tmp/rssm-portable-build}
HOPPER_BUILD=${HOPPER_BUILD:-/tmp/rssm-hopper-build}
HOPPER_CLI=${HOPPER_CLI:-}
BENCH_ARGS=${BENCH_ARGS:-"--gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 1,16,256 --positions uniform --cycles 3"}
# The driver caches the PTX it compiles (by default up to 256 MiB, which
# every kernel instance of the build might exceed): compiled once, for the
# conformance run, not again for the benchmark.
export CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-1073741824}
mkdir -p "$OUT_DIR"
cd "$ROOT" || exit 1
t0=$(date +%s)
failed=0
note() { echo "== $1 ($(($(date +%s) - t0)) s)"; }
fail() { note "$1"; failed=1; }

nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1 | head -1
nvcc --version | tail -1

# Only the CLI: the library's objects and the harness, no tests, no Vulkan.
build() { # build_dir log [cmake options]
  local dir=$1 log=$2
  shift 2
  cmake -S "$ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DRSSM_CUDA=ON -DRSSM_VULKAN=OFF -DRSSM_TESTS=OFF "$@" \
    >"$log" 2>&1 && cmake --build "$dir" --target rssm_cli -j "$JOBS" >>"$log" 2>&1
}
build "$PORTABLE_BUILD" /tmp/portable-build.log -DRSSM_CUDA_ARCHS="$PORTABLE_ARCHS" &
pid_portable=$!
if [ -z "$HOPPER_CLI" ]; then
  build "$HOPPER_BUILD" /tmp/hopper-build.log &
  pid_hopper=$!
  HOPPER_CLI=$HOPPER_BUILD/rssm
fi
wait "$pid_portable"
rc_portable=$?
rc_hopper=0
[ -n "${pid_hopper:-}" ] && { wait "$pid_hopper"; rc_hopper=$?; }
{
  echo "### portable build (RSSM_CUDA_ARCHS=$PORTABLE_ARCHS): rc $rc_portable"
  cat /tmp/portable-build.log
  echo "### default build: rc $rc_hopper"
  cat /tmp/hopper-build.log 2>/dev/null || echo "(not built: HOPPER_CLI=$HOPPER_CLI)"
} >"$OUT_DIR/build.log"
if [ "$rc_portable" != 0 ] || [ "$rc_hopper" != 0 ]; then
  fail "build FAILED (portable rc $rc_portable, default rc $rc_hopper): $(grep -m1 -iE 'error' "$OUT_DIR/build.log")"
  exit 1
fi
PORTABLE_CLI=$PORTABLE_BUILD/rssm
note "builds: ok"

{
  echo "### portable build ($PORTABLE_ARCHS)"
  "$PORTABLE_CLI" info
  echo "### default build ($HOPPER_CLI)"
  "$HOPPER_CLI" info
} >"$OUT_DIR/info.txt" 2>&1
grep -E "^(###|cuda)|kernels:" "$OUT_DIR/info.txt"
sed -n '/^### portable/,/^### default/p' "$OUT_DIR/info.txt" | grep -q "this device runs compute_80 PTX (JIT)" ||
  fail "the portable build's cuda does not say it runs compute_80 PTX (info.txt)"
# (a carried HOPPER_CLI may be older than this line of `rssm info`)
[ -z "${pid_hopper:-}" ] || sed -n '/^### default/,$p' "$OUT_DIR/info.txt" |
  grep -q "this device runs sm_90a machine code (bulk kernels: yes" ||
  fail "the default build's cuda does not say it runs sm_90a machine code with the bulk kernels (info.txt)"

# All four variants in one run: the oracle is computed once per case.
timeout "${CONFORM_TIMEOUT:-240}" "$PORTABLE_CLI" conform --backend cuda --backend cuda:bulk --backend cuda:stream \
  --backend cuda:pipeline >"$OUT_DIR/conform.txt" 2>&1
note "rssm conform, portable build (rc $?): $(tail -1 "$OUT_DIR/conform.txt")"
grep -E " FAIL " "$OUT_DIR/conform.txt" | head -10
grep -qE " FAIL " "$OUT_DIR/conform.txt" && fail "conform: a case FAILED"
for v in cuda cuda:stream cuda:pipeline; do
  pass=$(grep -cE "^[^ ]+ +$v +.* PASS " "$OUT_DIR/conform.txt")
  skip=$(grep -cE "^[^ ]+ +$v +.* SKIP " "$OUT_DIR/conform.txt")
  echo "   $v: $pass passed, $skip skipped"
  [ "$pass" -gt 0 ] || fail "conform: $v passed no case"
done
bulk_run=$(grep -cE "^[^ ]+ +cuda:bulk +.* (PASS|FAIL) " "$OUT_DIR/conform.txt")
bulk_refused=$(grep -cE "^[^ ]+ +cuda:bulk +.*the bulk kernel needs sm_90 code" "$OUT_DIR/conform.txt")
echo "   cuda:bulk: $bulk_run cases run, $bulk_refused refused for want of sm_90 code; the reason:"
grep -m1 -oE "cuda:bulk: the bulk kernel needs sm_90 code.*" "$OUT_DIR/conform.txt" | sed 's/^/     /'
{ [ "$bulk_run" = 0 ] && [ "$bulk_refused" -gt 0 ]; } || fail "conform: cuda:bulk was not refused on every case"

bench() { # name cli
  # shellcheck disable=SC2086 # BENCH_ARGS is a list of options
  timeout "${BENCH_TIMEOUT:-240}" "$2" bench --backend cuda $BENCH_ARGS --out "/tmp/portable-check-$1" \
    >"$OUT_DIR/bench-$1.txt" 2>&1
  local rc=$?
  cp "/tmp/portable-check-$1.csv" "$OUT_DIR/bench-$1.csv" 2>/dev/null
  note "rssm bench, $1 build (rc $rc)"
  [ "$rc" = 0 ] || fail "bench $1 FAILED or incomplete: $(tail -1 "$OUT_DIR/bench-$1.txt")"
}
bench portable "$PORTABLE_CLI"
bench hopper "$HOPPER_CLI"

python3 - "$OUT_DIR/bench-hopper.csv" "$OUT_DIR/bench-portable.csv" >"$OUT_DIR/table.txt" 2>&1 <<'EOF'
import csv
import sys


def rows(path):
    try:
        with open(path, newline="") as f:
            return {(r["gate"], r["state_dtype"], int(r["batch"])): r for r in csv.DictReader(f)}
    except OSError as e:
        print(f"cannot read {path}: {e}")
        return {}


hopper, portable = rows(sys.argv[1]), rows(sys.argv[2])


def us(r, key):
    try:
        return float(r[key])
    except (KeyError, TypeError, ValueError):
        return float("nan")


def ratio(a, b):
    return a / b if b > 0 else float("nan")


print("Per step, us (median of whole ring cycles, L = 16, uniform positions): the default build")
print("(sm_90a machine code) against compute_80 PTX compiled on the H200 (no bulk kernels, no PDL).")
print(f"{'gate':4} {'state':5} {'batch':>5} | {'replay sm_90a':>13} {'replay PTX':>10} {'ratio':>6} | "
      f"{'packed sm_90a':>13} {'packed PTX':>10} {'ratio':>6} | status")
for key in sorted(set(hopper) | set(portable)):
    h, p = hopper.get(key, {}), portable.get(key, {})
    hr, pr, hp, pp = us(h, "replay_us"), us(p, "replay_us"), us(h, "packed_us"), us(p, "packed_us")
    status = f"{h.get('status', '-')}/{p.get('status', '-')}"
    print(f"{key[0]:4} {key[1]:5} {key[2]:5} | {hr:13.2f} {pr:10.2f} {ratio(pr, hr):6.2f} | "
          f"{hp:13.2f} {pp:10.2f} {ratio(pp, hp):6.2f} | {status}")
EOF
cat "$OUT_DIR/table.txt"
note "done: $([ $failed = 0 ] && echo 'every check passed' || echo 'a check FAILED')"
exit $failed
