# shellcheck shell=bash
# CUDA MPS confining this process's kernels to MPS_PERCENTAGE (default 59)
# of the SMs: 78 of an H200's 132, an H20-shaped part (docs/bench.md, "An
# H20-shaped run"; the device then reports 76), and back. Sourced by
# bench/run.sh and bench/tensor_cores.sh.
mps_start() {
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/rssm-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/rssm-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  # a daemon left running by an interrupted stage serves as well: the
  # percentage is the client's, so it is exported either way
  { nvidia-cuda-mps-control -d || pgrep -x nvidia-cuda-mps >/dev/null; } &&
    export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=${MPS_PERCENTAGE:-59}
}
mps_stop() {
  echo quit | nvidia-cuda-mps-control
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
}
