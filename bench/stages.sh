# The stages of bench/run.sh beyond its default four, sourced by it (its
# helpers: note, at, py, py_for, find_lib, vulkan_loader, mps_start, mps_stop,
# variant_args; OUT_DIR, CLI, LIB, GPU, SHAPE). Each writes into
# OUT_DIR/STAGE/ but for sm78 and verify, whose JSON the stage `record`
# reads from OUT_DIR. Binaries built elsewhere are carried in BIN (default
# .devbin/: docs/h200.md); the published kernels in .peers/
# (tools/peer-sources, tools/engine-tests).
# shellcheck shell=bash

BIN=${BIN:-.devbin}

stage_dir() { mkdir -p "$OUT_DIR/$1" && echo "$OUT_DIR/$1"; }

# `rssm bench` alone on cuda (BENCH_ARGS replaces the sweep: default the
# tables' shapes, median of 5), its tables in OUT_DIR/bench/.
stage_bench() {
  local O
  O=$(stage_dir bench)
  # shellcheck disable=SC2086 # BENCH_ARGS is a list of options
  timeout "${BENCH_TIMEOUT:-600}" "$CLI" bench --backend "${BENCH_BACKEND:-cuda}" \
    ${BENCH_ARGS:-"--gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 1,4,8,16,64,128,256,512 --cycles 5"} \
    --out "$O/bench" >"$O/bench.txt" 2>&1
  note "rssm bench --backend ${BENCH_BACKEND:-cuda}: rc $?"
  grep -E "^(gate|gdn|kda) " "$O/bench.txt"
}

# The same GPU confined to 78 SMs (CUDA MPS at 59%; an H20-shaped part),
# rssm's plans and in-place pass capped to match (--sm-limit 78):
# decode_graph.py again (H20_ARGS; default batches 16, 64, 256; BESIDE as
# for time), into OUT_DIR/decode_graph-78sm.json for the stage record.
stage_sm78() {
  find_lib || return
  mps_start || { note "sm78: the MPS control daemon did not start"; return; }
  # shellcheck disable=SC2086,SC2046
  py bench/decode_graph.py $(beside) --out "$OUT_DIR" --sm-limit 78 --tag 78sm ${H20_ARGS:---batches 16,64,256} \
    >"$OUT_DIR/decode_graph-78sm.log" 2>&1
  note "sm78 (MPS ${MPS_PERCENTAGE:-59}%, --sm-limit 78): rc $?"
  mps_stop
  sed -n '/^us per step per layer/,$p' "$OUT_DIR/decode_graph-78sm.log"
}

# Speculative-decode verify (docs/design.md §9, docs/bench.md "Verify"):
# rssm conform --case verify on VERIFY_BACKENDS (default the CUDA variants
# and the Vulkan ones of the same GPU), tests/test_verify.c on cuda (when
# carried in BIN), memcheck and racecheck on two verify cases
# (SANITIZE_BACKENDS), bench/check_layer_verify.py (LAYER_CHECK=0 skips it),
# with PROFILE=1 Nsight Compute on the window kernels, the per-layer window
# from torch in graphs (bench/verify_graph.py into OUT_DIR/verify_graph.json;
# TORCH_VERIFY_ARGS; TORCH_VERIFY=0 skips it), with PEER_VERIFY=1 and
# .peers/vllm_fla vLLM's spec-decode kernels the same way
# (bench/verify_peers.py) and the two side by side (bench/verify_compare.py),
# the Vulkan window (VULKAN_VERIFY=0 skips it) and `rssm bench --verify` on
# cuda (VERIFY_ARGS).
stage_verify() {
  local O B=$CLI
  O=$(stage_dir verify)
  local args=${VERIFY_ARGS:-"--gate gdn,kda --state fp32 --ring-len 16 --batch 64,256 --positions uniform --cycles 5 --verify 2,4,8 --accept 100,50"}
  cp "$BIN/libcmocka.so.0" /tmp/ 2>/dev/null && export LD_LIBRARY_PATH=/tmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  vulkan_loader
  local backends=${VERIFY_BACKENDS:-"cuda cuda:bulk cuda:stream cuda:pipeline vulkan vulkan:coopmat vulkan:coopmat-emulated"}
  # shellcheck disable=SC2046 # one --backend option per variant
  timeout 240 "$B" conform $(for v in $backends; do printf -- '--backend %s ' "$v"; done) --case verify \
    >"$O/conform_verify.txt" 2>&1
  note "conform --case verify: rc $?, $(tail -1 "$O/conform_verify.txt")"
  grep -E " FAIL |SKIP" "$O/conform_verify.txt" | head -8
  if [ -x "$BIN/test_verify" ]; then
    RSSM_TEST_BACKEND=cuda timeout 120 "$BIN/test_verify" >"$O/test_verify_cuda.txt" 2>&1
    note "test_verify on cuda: rc $?"
  fi
  local v tool f
  # each window kernel: the plan's choice at the cases' small batches is the
  # two-launch window, cuda:bulk the persistent one
  for v in ${SANITIZE_BACKENDS:-cuda cuda:bulk}; do
    for tool in memcheck racecheck; do
      f="$O/sanitize_${tool}_${v/:/-}.txt"
      timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 "$B" conform --backend "$v" --quick \
        --case gdn/replay/verify-T4 --case kda/replay/verify-T7 >"$f" 2>&1
      note "compute-sanitizer $tool on $v: rc $?, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$f")"
    done
  done
  at
  find_lib || return
  if [ "${LAYER_CHECK:-1}" = 1 ]; then
    py_for 300 bench/check_layer_verify.py >"$O/check_layer_verify.txt" 2>&1
    note "check_layer_verify.py: rc $?"
    tail -14 "$O/check_layer_verify.txt"
  fi
  if [ "${PROFILE:-0}" = 1 ]; then
    local gate
    for gate in gdn kda; do
      timeout 200 ncu --clock-control none -k regex:window --launch-skip 20 --launch-count 2 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis \
        --section InstructionStats --section LaunchStats "$B" bench --backend cuda --gate $gate --state fp32 \
        --batch 256 --ring-len 16 --positions uniform --cycles 1 --verify 4 --accept 100 >>"$O/profile.txt" 2>&1
      note "ncu ($gate): rc $?"
    done
  fi
  if [ "${TORCH_VERIFY:-1}" = 1 ]; then
    # shellcheck disable=SC2086 # TORCH_VERIFY_ARGS is a list of options
    py_for 400 bench/verify_graph.py --out "$OUT_DIR" ${TORCH_VERIFY_ARGS:-} >"$O/verify_graph.txt" 2>&1
    note "verify_graph.py: rc $?"
    at
  fi
  if [ "${PEER_VERIFY:-0}" = 1 ]; then
    if [ -d .peers/vllm_fla ]; then
      # shellcheck disable=SC2086 # PEER_VERIFY_ARGS is a list of options
      timeout 500 python3 bench/verify_peers.py --json "$O/verify_peers.json" ${PEER_VERIFY_ARGS:-} \
        >"$O/verify_peers.txt" 2>&1
      note "verify_peers.py: rc $?, $(grep -c ': ok$' "$O/verify_peers.txt") checks ok"
      [ -f "$OUT_DIR/verify_graph.json" ] &&
        python3 bench/verify_compare.py "$OUT_DIR/verify_graph.json" "$O/verify_peers.json" >"$O/peers.md"
    else
      note "verify_peers.py: skipped, no .peers/vllm_fla (run tools/peer-sources and carry .peers)"
    fi
  fi
  if [ "${VULKAN_VERIFY:-1}" = 1 ]; then
    local t vargs
    for v in ${VULKAN_VARIANTS:-vulkan vulkan:coopmat}; do
      for t in test_verify test_layer; do
        [ -x "$BIN/$t" ] || continue
        RSSM_TEST_BACKEND=$v RSSM_REQUIRE_BACKENDS=$v timeout 200 "$BIN/$t" >"$O/$t-${v/:/-}.txt" 2>&1
        note "$t on $v: rc $?, $(grep -c '\[       OK \]' "$O/$t-${v/:/-}.txt") passed"
      done
      vargs=${VULKAN_VERIFY_ARGS:-"--gate gdn,kda --state fp32 --ring-len 16 --batch 256 --positions uniform --cycles 3 --verify 4 --accept 100"}
      # shellcheck disable=SC2086 # a list of options
      timeout 300 "$B" bench --backend "$v" $vargs --out "$O/verify-${v/:/-}" >"$O/verify-${v/:/-}.txt" 2>&1
      note "rssm bench --backend $v --verify: rc $?"
    done
  fi
  # shellcheck disable=SC2086 # args is a list of options
  timeout 400 "$B" bench --backend cuda $args --out "$O/verify" >"$O/verify.txt" 2>&1
  note "rssm bench --backend cuda --verify: rc $?"
  sed -n '/verify us/,$p' "$O/verify.txt" | head -40
  [ -f "$O/verify_graph.txt" ] && tail -60 "$O/verify_graph.txt"
  at
}

# The Vulkan variants on the GPU (docs/h200.md, "Vulkan on the H200"): the
# loader from .gl/, conformance of every variant (VULKAN_CONFORM=0 skips
# it), then `rssm bench` of VULKAN_VARIANTS (default vulkan,
# vulkan:coopmat; VULKAN_BENCH_ARGS) with the driver's statistics of every
# pipeline; with a CUDA `rssm bench` of the same sweep in OUT_DIR/bench/
# (stage bench), the Vulkan targets (bench/vulkan_report.py). Needs a CLI
# built with Vulkan on.
stage_vulkan() {
  local O v
  O=$(stage_dir vulkan)
  vulkan_loader
  if [ "${VULKAN_CONFORM:-1}" != 0 ]; then
    timeout "${CONFORM_TIMEOUT:-400}" "$CLI" conform --backend vulkan --backend vulkan:portable \
      --backend vulkan:coopmat --backend vulkan:coopmat-emulated >"$O/conform.txt" 2>&1
    note "rssm conform (Vulkan variants): rc $?, $(tail -1 "$O/conform.txt")"
    grep -E " FAIL |no Vulkan" "$O/conform.txt" | head -20
  fi
  for v in ${VULKAN_VARIANTS:-vulkan vulkan:coopmat}; do
    # shellcheck disable=SC2086
    RSSM_VK_PIPELINE_STATS=1 timeout "${BENCH_TIMEOUT:-600}" "$CLI" bench --backend "$v" \
      ${VULKAN_BENCH_ARGS:-"--gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 1,16,128,256 --cycles 5"} \
      --out "$O/bench-${v/:/-}" >"$O/bench-${v/:/-}.txt" 2>&1
    note "rssm bench --backend $v: rc $?"
    grep "^rssm vulkan pipeline" "$O/bench-${v/:/-}.txt" >"$O/pipelines-${v/:/-}.txt"
    sed -i "/^rssm vulkan pipeline/d" "$O/bench-${v/:/-}.txt"
  done
  [ -f "$OUT_DIR/bench/bench.json" ] && [ -f "$O/bench-vulkan.json" ] && [ -f "$O/bench-vulkan-coopmat.json" ] &&
    python3 bench/vulkan_report.py "$OUT_DIR/bench/bench.json" "$O/bench-vulkan.json" "$O/bench-vulkan-coopmat.json" "$O"
}

# The per-layer entry's test on each Vulkan variant (tests/test_layer.c built
# on Debian with Vulkan on, carried as TEST_LAYER, default BIN/test_layer,
# with its libcmocka.so.0 beside it).
stage_vulkan_layer() {
  local O v t=${TEST_LAYER:-$ROOT/$BIN/test_layer}
  O=$(stage_dir vulkan_layer)
  vulkan_loader
  for v in ${VULKAN_VARIANTS:-vulkan vulkan:coopmat}; do
    LD_LIBRARY_PATH="$(dirname "$t")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" RSSM_TEST_BACKEND="$v" \
      RSSM_REQUIRE_BACKENDS="$v" timeout 300 "$t" >"$O/layer-${v/:/-}.txt" 2>&1
    note "test_layer on $v: rc $?, $(grep -c '\[       OK \]' "$O/layer-${v/:/-}.txt") passed"
  done
}

# The Vulkan benchmark of OLD_CLI (the build before, Vulkan on) and CLI for
# each of VULKAN_VARIANTS (default vulkan), VULKAN_AB_ARGS, one table.
stage_vulkan_ab() {
  local O v side cli
  O=$(stage_dir vulkan_ab)
  vulkan_loader
  local args=${VULKAN_AB_ARGS:-"--gate gdn,kda --state fp32 --ring-len 16 --batch 16,64,256 --positions uniform --cycles 5"}
  for v in ${VULKAN_VARIANTS:-vulkan}; do
    for side in old new; do
      cli=$CLI
      [ "$side" = old ] && cli=$OLD_CLI
      # shellcheck disable=SC2086
      timeout "${BENCH_TIMEOUT:-600}" "$cli" bench --backend "$v" $args --out "$O/${v/:/-}-$side" \
        >"$O/${v/:/-}-$side.txt" 2>&1
      note "rssm bench --backend $v ($side build): rc $?"
    done
    python3 bench/ab_table.py old="$O/${v/:/-}-old.json" new="$O/${v/:/-}-new.json" | tee "$O/${v/:/-}-ab.txt"
  done
}

# The Vulkan decode's kernel choices, one `rssm bench` per configuration of
# VULKAN_TUNE ("NAME VAR=VALUE ...; NAME ..."; the measurement overrides of
# vk/README.md, RSSM_VK_ROW_SPLIT, RSSM_VK_PREFETCH, ...), VULKAN_TUNE_ARGS,
# with the driver's pipeline statistics; the tables last.
stage_vulkan_tune() {
  local O cfg name envs
  O=$(stage_dir vulkan_tune)
  vulkan_loader
  local args=${VULKAN_TUNE_ARGS:-"--backend vulkan --gate gdn --state fp32 --ring-len 16 --batch 16,256 --positions uniform --cycles 5"}
  IFS=';' read -ra cfgs <<<"${VULKAN_TUNE:-default}"
  for cfg in "${cfgs[@]}"; do
    read -r name envs <<<"$cfg"
    # shellcheck disable=SC2086 # the configuration's variables, then the options
    env RSSM_VK_PIPELINE_STATS=1 $envs timeout 300 "$CLI" bench $args --out "$O/$name" >"$O/$name.txt" 2>&1
    note "vulkan_tune $name ($envs): rc $?"
    grep "^rssm vulkan pipeline" "$O/$name.txt" | sort -u >"$O/$name.pipelines.txt"
    sed -i "/^rssm vulkan pipeline/d" "$O/$name.txt"
    grep -E "^(gate|gdn|kda) " "$O/$name.txt"
  done
}

# The CUDA backend's portable path: a build whose only code is compute_80
# PTX (PORTABLE_ARCHS; what a GPU newer than every machine code of a build
# runs, and what stands in for an A100 or an L40: the kernels without their
# sm_90 parts) against the default build (HOPPER_CLI=path times a carried
# one instead): `rssm info` of both, conformance of the portable build on
# the four variants (cuda:bulk refused on every case), `rssm bench` of both
# (PORTABLE_BENCH_ARGS) side by side. Under 5 minutes on 16 cores.
stage_portable() {
  local O
  O=$(stage_dir portable)
  local pbuild=${PORTABLE_BUILD:-/tmp/rssm-portable-build} hbuild=${HOPPER_BUILD:-/tmp/rssm-hopper-build}
  local hopper=${HOPPER_CLI:-} pid_p pid_h="" rc_p rc_h=0
  # The driver caches the PTX it compiles: once, for the conformance run.
  export CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-1073741824}
  build_cli() { # dir log [cmake options]
    local dir=$1 log=$2
    shift 2
    cmake -S "$ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DRSSM_CUDA=ON -DRSSM_VULKAN=OFF -DRSSM_TESTS=OFF "$@" \
      >"$log" 2>&1 && cmake --build "$dir" --target rssm_cli -j "$JOBS" >>"$log" 2>&1
  }
  build_cli "$pbuild" "$O/build-portable.log" -DRSSM_CUDA_ARCHS="${PORTABLE_ARCHS:-compute_80}" &
  pid_p=$!
  if [ -z "$hopper" ]; then
    build_cli "$hbuild" "$O/build-hopper.log" &
    pid_h=$!
    hopper=$hbuild/rssm
  fi
  wait "$pid_p"
  rc_p=$?
  [ -n "$pid_h" ] && { wait "$pid_h"; rc_h=$?; }
  if [ "$rc_p" != 0 ] || [ "$rc_h" != 0 ]; then
    note "portable: build FAILED (portable rc $rc_p, default rc $rc_h)"
    return 1
  fi
  local portable=$pbuild/rssm v
  { echo "### portable build"; "$portable" info; echo "### default build ($hopper)"; "$hopper" info; } >"$O/info.txt" 2>&1
  sed -n '/^### portable/,/^### default/p' "$O/info.txt" | grep -q "this device runs compute_80 PTX (JIT)" ||
    note "portable: FAILED: the portable build's cuda does not say it runs compute_80 PTX (info.txt)"
  timeout "${CONFORM_TIMEOUT:-240}" "$portable" conform --backend cuda --backend cuda:bulk --backend cuda:stream \
    --backend cuda:pipeline >"$O/conform.txt" 2>&1
  note "portable: rssm conform (rc $?): $(tail -1 "$O/conform.txt")"
  for v in cuda cuda:stream cuda:pipeline; do
    echo "   $v: $(grep -cE "^[^ ]+ +$v +.* PASS " "$O/conform.txt") passed"
  done
  local bulk_run
  bulk_run=$(grep -cE "^[^ ]+ +cuda:bulk +.* (PASS|FAIL) " "$O/conform.txt")
  [ "$bulk_run" = 0 ] && grep -qE "cuda:bulk: the bulk kernel needs sm_90 code" "$O/conform.txt" ||
    note "portable: FAILED: cuda:bulk was not refused on every case"
  local args=${PORTABLE_BENCH_ARGS:-"--gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 1,16,256 --positions uniform --cycles 3"}
  # shellcheck disable=SC2086 # a list of options
  timeout "${BENCH_TIMEOUT:-240}" "$hopper" bench --backend cuda $args --out "$O/hopper" >"$O/hopper.txt" 2>&1
  note "portable: rssm bench, default build: rc $?"
  # shellcheck disable=SC2086
  timeout "${BENCH_TIMEOUT:-240}" "$portable" bench --backend cuda $args --out "$O/portable" >"$O/portable.txt" 2>&1
  note "portable: rssm bench, compute_80 PTX: rc $?"
  python3 bench/ab_table.py sm_90a="$O/hopper.json" compute_80="$O/portable.json" | tee "$O/table.txt"
}

# What an engine developer adopting rssm checks on the GPU, with binaries
# carried in BIN (rssm, librssm.so.0): conformance of the four CUDA
# variants (the fp16-io cases among them), SGLang's own ReplaySSM test
# (tools/engine-tests sets it up in .peers/engine/) on SGLang's kernel and on
# rssm.sglang's wrapper, tests/python/test_torch.py when pytest is there,
# EXTRA (a command, logged like the rest), `rssm bench` (ENGINE_BENCH_ARGS).
stage_engine() {
  local O impl
  O=$(stage_dir engine)
  export RSSM_LIBRARY=$ROOT/$BIN/librssm.so.0
  "$BIN/rssm" conform --backend cuda --backend cuda:bulk --backend cuda:stream --backend cuda:pipeline \
    >"$O/conform.txt" 2>&1
  note "engine: conform, CUDA variants (rc $?): $(tail -1 "$O/conform.txt")"
  grep -E "fp16-io|L1-equals-packed-fp16" "$O/conform.txt" | grep -c PASS | sed 's/^/   fp16 cases passed: /'
  if [ -f .peers/engine/upstream/test_linear_replayssm_decode.py ]; then
    for impl in sglang rssm; do
      RSSM_ENGINE_TEST_IMPL=$impl PYTHONPATH=.peers/engine:python timeout 600 \
        python3 .peers/engine/upstream/test_linear_replayssm_decode.py -v >"$O/sglang_test_$impl.txt" 2>&1
      note "engine: SGLang test_linear_replayssm_decode.py on $impl's kernel (rc $?): $(tail -1 "$O/sglang_test_$impl.txt")"
    done
  else
    note "engine: SGLang test skipped (.peers/engine not carried: tools/engine-tests)"
  fi
  if python3 -c "import pytest" 2>/dev/null; then
    PYTHONPATH=python timeout 300 python3 -m pytest -q -p no:cacheprovider tests/python/test_torch.py \
      >"$O/pytest_torch.txt" 2>&1
    note "engine: pytest tests/python/test_torch.py (rc $?): $(tail -1 "$O/pytest_torch.txt")"
  fi
  if [ -n "${EXTRA:-}" ]; then
    bash -c "$EXTRA" >"$O/extra.txt" 2>&1
    note "engine: EXTRA ($EXTRA): rc $?"
    tail -15 "$O/extra.txt"
  fi
  # shellcheck disable=SC2086 # the sweep's options
  "$BIN/rssm" bench --backend cuda ${ENGINE_BENCH_ARGS:-"--gate gdn,kda --state fp32,bf16 --ring-len 16 --batch 1,4,16,256 --positions uniform --cycles 5"} \
    --out "$O/bench-cuda" >"$O/bench-cuda.txt" 2>&1
  note "engine: rssm bench cuda: rc $?"
  unset RSSM_LIBRARY
}

# The compiled torch extension (rssm.torch_ext, docs/python.md) with
# librssm.so.0 carried in BIN: built against the machine's torch, the
# package's torch tests with it and (RSSM_TORCH_EXT=off) without it, a
# captured graph against eager steps and the host time per call of both
# (bench/check_torch_ext.py).
stage_torch_ext() {
  local O f
  O=$(stage_dir torch_ext)
  (
    export RSSM_LIBRARY=$ROOT/$BIN/librssm.so.0 PYTHONPATH=$ROOT/python RSSM_TORCH_EXT_DIR=$O/ext
    export MAX_JOBS=${MAX_JOBS:-16}
    timeout 300 python3 -m rssm.torch_ext build --verbose >"$O/build.txt" 2>&1
    echo "== torch_ext: build (rc $?): $(tail -1 "$O/build.txt")"
    if python3 -c "import pytest" 2>/dev/null; then
      timeout 300 python3 -m pytest -q -p no:cacheprovider -rs tests/python/test_torch.py \
        tests/python/test_torch_ext.py >"$O/pytest_ext.txt" 2>&1
      echo "== torch_ext: pytest, extension (rc $?): $(tail -1 "$O/pytest_ext.txt")"
      RSSM_TORCH_EXT=off timeout 300 python3 -m pytest -q -p no:cacheprovider tests/python/test_torch.py \
        -k "graph or capture or compile" >"$O/pytest_off.txt" 2>&1
      echo "== torch_ext: pytest, Python path (rc $?): $(tail -1 "$O/pytest_off.txt")"
    fi
    timeout 120 python3 bench/check_torch_ext.py --graph --time >"$O/check_ext.txt" 2>&1
    echo "== torch_ext: graph check and timing, extension: rc $?"
    RSSM_TORCH_EXT=off timeout 120 python3 bench/check_torch_ext.py --graph --time >"$O/check_off.txt" 2>&1
    echo "== torch_ext: graph check and timing, Python path: rc $?"
  )
  grep "^# graph" "$O/check_ext.txt" "$O/check_off.txt"
  echo "host us per eager call on cuda (tiny layer, B=4; median and p90 of single calls; 'over C' less the C call)"
  for f in off ext; do
    awk -F'\t' -v ops="$f" '!/^#/ && NF == 4 { printf "%-14s %-4s %8.2f %8.2f %8.2f\n", $1, ops, $2, $3, $2 - $4 }' \
      "$O/check_$f.txt"
  done
}

# The wheel as an engine developer gets it (built on Debian into .whl/:
# docs/python.md), installed without network into a folder of its own and
# used from /tmp with nothing of the checkout on the path: the import and
# the backends, bench/check_devices.py, the torch extension built from the
# installed package's rssm.h, the package's torch tests on it, and
# bench/check_torch_ext.py.
stage_wheel() {
  local O W
  O=$(stage_dir wheel)
  W=$(ls "$ROOT"/.whl/rssm-*.whl 2>/dev/null | head -1)
  [ -n "$W" ] || { note "wheel: no .whl/rssm-*.whl carried"; return; }
  rm -rf /tmp/wsite
  python3 -m pip install --no-deps --no-index --target /tmp/wsite "$W" >"$O/install.txt" 2>&1
  note "wheel: install $(basename "$W"): rc $?"
  run_py() { (cd /tmp && env -u RSSM_LIBRARY -u PYTHONPATH PYTHONPATH=/tmp/wsite RSSM_TORCH_EXT_DIR="$O/ext" python3 "$@"); }
  run_py -c "import rssm; print(rssm.__version__, rssm.library_path(), rssm.backend_names())" >"$O/import.txt" 2>&1
  note "wheel: import (rc $?): $(tail -1 "$O/import.txt")"
  run_py "$ROOT/bench/check_devices.py" >"$O/check_devices.txt" 2>&1
  note "wheel: check_devices.py (rc $?): $(tail -1 "$O/check_devices.txt")"
  MAX_JOBS=${MAX_JOBS:-16} run_py -m rssm.torch_ext build --verbose >"$O/ext_build.txt" 2>&1
  note "wheel: torch extension build (rc $?): $(tail -1 "$O/ext_build.txt")"
  (cd "$ROOT/tests/python" && env -u RSSM_LIBRARY -u PYTHONPATH PYTHONPATH=/tmp/wsite RSSM_TORCH_EXT_DIR="$O/ext" \
    timeout 400 python3 -m pytest -q -p no:cacheprovider -rs test_torch.py test_torch_ext.py test_engine_entries.py) \
    >"$O/pytest.txt" 2>&1
  note "wheel: pytest on the installed package (rc $?): $(tail -1 "$O/pytest.txt")"
  run_py "$ROOT/bench/check_torch_ext.py" --graph --time >"$O/check.txt" 2>&1
  note "wheel: graph check and host time: rc $?"
}

# The readout microbenchmark (bench/micro/readout.cu, built as READOUT,
# default BIN/readout), on the whole GPU and, with MICRO_78SM=1, under MPS
# at 59% too.
stage_micro() {
  local O
  O=$(stage_dir micro)
  timeout 200 "${READOUT:-$BIN/readout}" >"$O/readout.txt" 2>&1
  note "readout microbenchmark: rc $?"
  cat "$O/readout.txt"
  if [ "${MICRO_78SM:-0}" = 1 ] && mps_start; then
    timeout 200 "${READOUT:-$BIN/readout}" >"$O/readout-78sm.txt" 2>&1
    note "readout microbenchmark, MPS ${MPS_PERCENTAGE:-59}%: rc $?"
    mps_stop
    cat "$O/readout-78sm.txt"
  fi
}

# `rssm bench` of several CLIs built elsewhere, in one call so that every
# binary meets the same card: CLIS="NAME=PATH NAME=PATH ..." in turn,
# AB_ROUNDS times (default 1), AB_ARGS, then one table (bench/ab_table.py).
stage_ab() {
  local O round pair name cli
  O=$(stage_dir ab)
  local args=${AB_ARGS:-"--gate gdn,kda --state fp32 --ring-len 16 --batch 1,16,256 --positions uniform --cycles 5"}
  local tables=()
  for round in $(seq 1 "${AB_ROUNDS:-1}"); do
    for pair in ${CLIS:?CLIS=\"NAME=CLI ...\"}; do
      name=${pair%%=*} cli=${pair#*=}
      # shellcheck disable=SC2086
      "$cli" bench --backend cuda $args --out "$O/$name-r$round" >"$O/$name-r$round.txt" 2>&1
      note "ab: round $round, $name: rc $?"
      tables+=("$name=$O/$name-r$round.json")
    done
  done
  python3 bench/ab_table.py "${tables[@]}" | tee "$O/ab.txt"
}

# Nsight Compute on batch-256 launches of the planned kernels (packed, and
# replay cycles) after the launches of the oracle check; PROFILE_ARGS
# (default GDN fp32).
stage_profile() {
  local O
  O=$(stage_dir profile)
  # shellcheck disable=SC2086
  timeout 400 ncu --clock-control none -k regex:'bulk|stream|decode' --launch-skip 200 --launch-count 12 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats \
    "$CLI" bench --backend cuda --batch 256 --ring-len 16 --positions uniform --cycles 1 \
    ${PROFILE_ARGS:---gate gdn --state fp32} >"$O/profile.txt" 2>&1
  note "ncu profile: rc $?"
  grep -E "bulk|stream_|Duration|DRAM Throughput|Issue Slots Busy|Achieved Occupancy|Warp Cycles Per Issued" \
    "$O/profile.txt" | head -80
}

# The published decode kernels (vLLM's ReplaySSM fork, SGLang's) and rssm's
# per-layer entry in one CUDA-graph harness: the anchor harness
# (PEERS_HARNESS, default .peers/harness; its README says how its peers'
# folder PEERS, default .peers/decode, is made), where it is carried; its
# table is the peers.json of a new GPU's results folder. PEERS_CONFIGS,
# PEERS_BATCHES.
stage_peers() {
  local O h=${PEERS_HARNESS:-.peers/harness}
  O=$(stage_dir peers)
  [ -f "$h/anchor_bench.py" ] || { note "peers: skipped, no $h/anchor_bench.py carried"; return; }
  find_lib || return
  PEERS_DIR=${PEERS:-.peers/decode} OUT_JSON=$O/harness.json BUDGET_S=${BUDGET_S:-270} STAG_CFGS=gdn:fp32 \
    CONFIGS=${PEERS_CONFIGS:-gdn:fp32,kda:fp32,gdn:bf16,kda:bf16} BATCHES=${PEERS_BATCHES:-1,4,8,16,64,128,256,512} \
    py_for 330 "$h/anchor_bench.py" >"$O/harness.log" 2>&1
  note "peers: anchor harness: rc $?"
  python3 "$h/table.py" "$O/harness.json" | tee "$O/table.txt"
}

# Accuracy against a float64 recurrence on an engine-shaped decode, rssm's
# entry beside SGLang's ReplaySSM kernel (bench/accuracy.py; SGLANG_WHEEL,
# default .whl/sglang-*.whl).
stage_accuracy() {
  local O w=${SGLANG_WHEEL:-$(ls "$ROOT"/.whl/sglang-*.whl 2>/dev/null | head -1)}
  O=$(stage_dir accuracy)
  find_lib || return
  [ -n "$w" ] || { note "accuracy: no SGLang wheel (SGLANG_WHEEL)"; return; }
  py_for 500 bench/accuracy.py --sglang-wheel "$w" --out "$O/accuracy.json" >"$O/accuracy.txt" 2>&1
  note "accuracy.py: rc $?"
  tail -20 "$O/accuracy.txt"
}

# A miniature decode engine's step with rssm and with vLLM's Triton kernels
# (bench/mini_engine.py, bench/mini_engine.md; .peers/vllm_fla).
stage_mini_engine() {
  local O
  O=$(stage_dir mini_engine)
  find_lib || return
  # shellcheck disable=SC2086
  py_for 500 bench/mini_engine.py --out "$O/mini_engine.json" ${MINI_ENGINE_ARGS:-} >"$O/mini_engine.txt" 2>&1
  note "mini_engine.py: rc $?"
  tail -12 "$O/mini_engine.txt"
}
