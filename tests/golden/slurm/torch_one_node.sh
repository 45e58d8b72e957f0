# <DRYRUN>/runs/dry-torch-one-node/trial-0000/attempt-1/job.sh
#!/bin/bash
# gridml: study dry-torch-one-node, trial 0, attempt 1; submitted with sbatch
#SBATCH --job-name=gridml.dry-torch-one-node.trial-0000
#SBATCH --comment=gridml-attempt-1
#SBATCH --chdir=<DRYRUN>/runs/dry-torch-one-node/trial-0000/attempt-1
#SBATCH --output=<DRYRUN>/runs/dry-torch-one-node/trial-0000/attempt-1/payload.log
#SBATCH --open-mode=append
#SBATCH --nodes=1
#SBATCH --ntasks=2
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=1
#SBATCH --mem=4096M
#SBATCH --time=01:00:00
#SBATCH --partition=cpu
#SBATCH --no-requeue
#SBATCH --signal=B:USR1@120
set -uo pipefail
export PATH=<ENV>/bin:"$PATH"
export GRIDML_TRIAL_DIR=<DRYRUN>/runs/dry-torch-one-node/trial-0000
export HOROVOD_GLOO_TIMEOUT_SECONDS=300
export HOROVOD_START_TIMEOUT=300
# OpenMPI refuses root without these (containers, test clusters)
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export GRIDML_ATTEMPT=1  # into progress.json (gridml/live.py)
export GRIDML_EXIT_FILE=<DRYRUN>/runs/dry-torch-one-node/trial-0000/attempt-1/payload_exit_code
# Slurm's warning before the job ends (slurm.signal_grace): to the ranks
export GRIDML_SIGNAL_DIR="$PWD/ranks"
rm -rf "$GRIDML_SIGNAL_DIR" signalled_at; mkdir -p "$GRIDML_SIGNAL_DIR"
gridml_warned() {
  date +%s.%N > signalled_at; touch "$GRIDML_SIGNAL_DIR/warned"
  echo "[gridml] USR1: the job ends soon; the ranks checkpoint at their next batch" >&2
  for f in "$GRIDML_SIGNAL_DIR/${SLURMD_NODENAME:-$(hostname)}".*; do
    [ -e "$f" ] && kill -USR1 "${f##*.}" 2>/dev/null
  done
}
gridml_run() {  # the launcher in the background: a trap runs while it does
  "$@" &
  local pid=$! rc
  while :; do
    wait "$pid"; rc=$?
    if [ "$rc" -gt 128 ] && kill -0 "$pid" 2>/dev/null; then continue; fi
    return "$rc"
  done
}
trap gridml_warned USR1
echo "[gridml] job ${SLURM_JOB_ID} on ${SLURM_JOB_NODELIST} (batch node ${SLURMD_NODENAME:-?}, restart ${SLURM_RESTART_COUNT:-0})" >&2
rm -f exit_code payload_exit_code
gridml_run torchrun --nnodes 1 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint localhost:0 -m payloads.train_torch <DRYRUN>/runs/dry-torch-one-node/trial-0000/attempt-1/trial.json
code=$?
if [ "$code" -ne 0 ] && [ -s payload_exit_code ]; then code=$(cat payload_exit_code); fi
echo $code > exit_code.tmp && mv exit_code.tmp exit_code
exit $code

# <DRYRUN>/runs/dry-torch-one-node/trial-0001/attempt-1/job.sh
#!/bin/bash
# gridml: study dry-torch-one-node, trial 1, attempt 1; submitted with sbatch
#SBATCH --job-name=gridml.dry-torch-one-node.trial-0001
#SBATCH --comment=gridml-attempt-1
#SBATCH --chdir=<DRYRUN>/runs/dry-torch-one-node/trial-0001/attempt-1
#SBATCH --output=<DRYRUN>/runs/dry-torch-one-node/trial-0001/attempt-1/payload.log
#SBATCH --open-mode=append
#SBATCH --nodes=1
#SBATCH --ntasks=2
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=1
#SBATCH --mem=4096M
#SBATCH --time=01:00:00
#SBATCH --partition=cpu
#SBATCH --no-requeue
#SBATCH --signal=B:USR1@120
set -uo pipefail
export PATH=<ENV>/bin:"$PATH"
export GRIDML_TRIAL_DIR=<DRYRUN>/runs/dry-torch-one-node/trial-0001
export HOROVOD_GLOO_TIMEOUT_SECONDS=300
export HOROVOD_START_TIMEOUT=300
# OpenMPI refuses root without these (containers, test clusters)
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export GRIDML_ATTEMPT=1  # into progress.json (gridml/live.py)
export GRIDML_EXIT_FILE=<DRYRUN>/runs/dry-torch-one-node/trial-0001/attempt-1/payload_exit_code
# Slurm's warning before the job ends (slurm.signal_grace): to the ranks
export GRIDML_SIGNAL_DIR="$PWD/ranks"
rm -rf "$GRIDML_SIGNAL_DIR" signalled_at; mkdir -p "$GRIDML_SIGNAL_DIR"
gridml_warned() {
  date +%s.%N > signalled_at; touch "$GRIDML_SIGNAL_DIR/warned"
  echo "[gridml] USR1: the job ends soon; the ranks checkpoint at their next batch" >&2
  for f in "$GRIDML_SIGNAL_DIR/${SLURMD_NODENAME:-$(hostname)}".*; do
    [ -e "$f" ] && kill -USR1 "${f##*.}" 2>/dev/null
  done
}
gridml_run() {  # the launcher in the background: a trap runs while it does
  "$@" &
  local pid=$! rc
  while :; do
    wait "$pid"; rc=$?
    if [ "$rc" -gt 128 ] && kill -0 "$pid" 2>/dev/null; then continue; fi
    return "$rc"
  done
}
trap gridml_warned USR1
echo "[gridml] job ${SLURM_JOB_ID} on ${SLURM_JOB_NODELIST} (batch node ${SLURMD_NODENAME:-?}, restart ${SLURM_RESTART_COUNT:-0})" >&2
rm -f exit_code payload_exit_code
gridml_run torchrun --nnodes 1 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint localhost:0 -m payloads.train_torch <DRYRUN>/runs/dry-torch-one-node/trial-0001/attempt-1/trial.json
code=$?
if [ "$code" -ne 0 ] && [ -s payload_exit_code ]; then code=$(cat payload_exit_code); fi
echo $code > exit_code.tmp && mv exit_code.tmp exit_code
exit $code

