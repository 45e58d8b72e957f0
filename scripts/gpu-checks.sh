#!/usr/bin/env bash
# The GPU paths, run on a node with an NVIDIA GPU and its own PyTorch (no TensorFlow, no network):
#   1. the quickstart campaign with PyTorch (examples/quickstart_torch.yaml) through the real
#      `gridml submit` and the local executor, resources.gpus 1 (each trial on its own GPU,
#      CUDA_VISIBLE_DEVICES), then the same spec with gpus 0 on the same node's CPU cores;
#   1b. (step campaign2) the same with two ranks a trial on one GPU (gloo: NCCL needs a GPU a rank);
#   2. benchmarks/preemption.py on the GPU (checkpoint on SIGUSR1, continue, same weights);
#   3. benchmarks/torch_gpu.py (samples/s, input wait, GPU utilisation; gridml's feed vs naive).
# gridml's own dependencies must be importable: where they are not installed, put their wheels in
# $GRIDML_WHEELS (default .whl/) and this script installs them under /tmp/site first.
# Figures and logs go to $OUT (default ./gpu-checks). Each step has a time limit; a failing step
# does not stop the next. GPU_STEPS picks steps (default: "campaign preemption torch_gpu
# cpu_campaign"; also campaign2 and starter: `gridml init --framework torch`'s spec and model on
# the GPU); BENCH_ARGS goes to torch_gpu.py (e.g. "--parts a --defer 16,1,1,16").
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
out="${OUT:-$here/gpu-checks}"
mkdir -p "$out"
py="${PYTHON:-python3}"
wheels="${GRIDML_WHEELS:-$here/.whl}"
if ! "$py" -c "import pydantic, sqlalchemy, skopt, optuna, fastapi" 2>/dev/null; then
  [ -d "$wheels" ] || { echo "gridml's dependencies are missing and $wheels has no wheels"; exit 2; }
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$wheels"/*.whl || exit 2
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
bin=/tmp/gridml-bin
mkdir -p "$bin"
printf '#!/bin/sh\nexec %s -c "from gridml.cli import main; main()" "$@"\n' "$(command -v "$py")" \
  >"$bin/gridml"
chmod +x "$bin/gridml"
export PATH="$bin:$(dirname "$(command -v "$py")"):$PATH"
export GRIDML_HOME=/tmp/gridml-home GRIDML_PAYLOAD_PYTHON="$(command -v "$py")"
step() { echo; echo "=== $1 ($(date +%T))"; }

step "the machine"
nvidia-smi -L 2>&1 | tee "$out/nvidia-smi.txt"
"$py" -c "import torch, sys; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available(), torch.cuda.device_count())"
nproc

campaign() {  # name gpus [workers]
  local name=$1 gpus=$2 workers=${3:-1} spec=/tmp/gridml-work/$1.yaml
  mkdir -p /tmp/gridml-work/models
  cp examples/models/deepsets_torch.py /tmp/gridml-work/models/
  sed -e "s/^name: quickstart-torch/name: $name/" \
      -e "s/resources: {cores: 2, gpus: 0,/resources: {cores: 2, gpus: $gpus,/" \
      -e "s/  workers: 2 .*/  workers: $workers/" -e "s/  max_trials: 8/  max_trials: ${TRIALS:-4}/" \
      -e "s/quickstart-torch.out/$name.out/" examples/quickstart_torch.yaml >"$spec"
  grep -q "gpus: $gpus," "$spec" || { echo "spec edit failed"; return 1; }
  local t0=$SECONDS
  timeout "${CAMPAIGN_LIMIT:-240}" gridml submit "$spec" 2>&1 | tail -n 25
  echo "campaign $name (gpus $gpus, workers $workers): $((SECONDS - t0)) s wall"
  gridml status "$name" 2>&1 | tail -n 15
  for f in "$GRIDML_HOME"/runs/"$name"/trial-*/attempt-1/payload.log; do
    echo "-- $f"; grep -E "device|GPU|cuda|CUDA_VISIBLE|gloo|nccl|epoch [0-9]+/" "$f" | head -n 8
  done
  for f in "$GRIDML_HOME"/runs/"$name"/trial-*/attempt-1/gpus; do [ -e "$f" ] && echo "$f: $(cat "$f")"; done
  tar -C "$GRIDML_HOME/runs" -czf "$out/runs-$name.tgz" --exclude='*.pt' --exclude='*.onnx' \
    --exclude='*.h5' "$name" 2>/dev/null
  return 0
}

step "sample data"
timeout 120 gridml demo-data --json | tail -n 3
steps=" ${GPU_STEPS:-campaign preemption torch_gpu cpu_campaign} "
[ "${CPU_CAMPAIGN:-1}" = 1 ] || steps="${steps/ cpu_campaign / }"
if [[ $steps == *" campaign "* ]]; then
  step "quickstart campaign on the GPU"
  campaign qs-gpu 1 2>&1 | tee "$out/campaign-gpu.txt"
fi
if [[ $steps == *" starter "* ]]; then  # what `gridml init --framework torch` writes, on the GPU
  step "gridml init's torch starter on the GPU"
  ( mkdir -p /tmp/gridml-starter && cd /tmp/gridml-starter && gridml init starter --framework torch &&
    sed -i -e "s/gpus: 0,/gpus: 1,/" -e "s/  workers: 2 .*/  workers: 1/" -e "s/  max_trials: 8/  max_trials: 2/" \
      -e "s/n_initial_points: 4/n_initial_points: 2/" starter.yaml &&
    grep -q "gpus: 1," starter.yaml && t0=$SECONDS &&
    timeout "${CAMPAIGN_LIMIT:-240}" gridml submit starter.yaml --quiet 2>&1 | tail -n 8 &&
    echo "starter campaign: $((SECONDS - t0)) s wall" && gridml status starter 2>&1 | tail -n 12 &&
    grep -hE "device|cuda|epoch [0-9]+/" "$GRIDML_HOME"/runs/starter/trial-*/attempt-1/payload.log | head -n 8
  ) 2>&1 | tee "$out/starter.txt"
fi
if [[ $steps == *" campaign2 "* ]]; then
  step "two ranks a trial sharing one GPU"
  TRIALS=2 campaign qs-gpu2 1 2 2>&1 | tee "$out/campaign-gpu2.txt"
fi
if [[ $steps == *" preemption "* ]]; then
  step "preemption on the GPU"
  timeout 240 "$py" benchmarks/preemption.py ${PREEMPT_ARGS:-} --out "$out/preemption.json" 2>&1 | tail -n 12
fi
if [[ $steps == *" torch_gpu "* ]]; then
  step "torch_gpu benchmark"
  timeout "${BENCH_LIMIT:-300}" "$py" benchmarks/torch_gpu.py --budget-s "$(( ${BENCH_LIMIT:-300} - 30 ))" \
    ${BENCH_ARGS:-} --out "$out/torch_gpu.json" 2>&1 | tail -n 60
  tar -C "$out" -czf "$out/torch_gpu_logs.tgz" torch_gpu_logs 2>/dev/null && rm -rf "$out/torch_gpu_logs"
fi
if [[ $steps == *" cpu_campaign "* ]]; then
  step "the same campaign on this node's CPU cores"
  campaign qs-cpu 0 2>&1 | tee "$out/campaign-cpu.txt"
fi
step "done"
