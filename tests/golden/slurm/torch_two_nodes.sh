# <DRYRUN>/runs/dry-torch-two-nodes/trial-0000/attempt-1/job.sh
#!/bin/bash
# gridml: study dry-torch-two-nodes, trial 0, attempt 1; submitted with sbatch
#SBATCH --job-name=gridml.dry-torch-two-nodes.trial-0000
#SBATCH --comment=gridml-attempt-1
#SBATCH --chdir=<DRYRUN>/runs/dry-torch-two-nodes/trial-0000/attempt-1
#SBATCH --output=<DRYRUN>/runs/dry-torch-two-nodes/trial-0000/attempt-1/payload.log
#SBATCH --open-mode=append
#SBATCH --nodes=2
#SBATCH --ntasks=4
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=2
#SBATCH --mem=8192M
#SBATCH --time=01:00:00
#SBATCH --partition=cpu
#SBATCH --no-requeue
#SBATCH --signal=B:USR1@120
set -uo pipefail
export PATH=<ENV>/bin:"$PATH"
export GRIDML_TRIAL_DIR=<DRYRUN>/runs/dry-torch-two-nodes/trial-0000
export HOROVOD_GLOO_TIMEOUT_SECONDS=300
export HOROVOD_START_TIMEOUT=300
# OpenMPI refuses root without these (containers, test clusters)
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export GRIDML_ATTEMPT=1  # into progress.json (gridml/live.py)
export GRIDML_EXIT_FILE=<DRYRUN>/runs/dry-torch-two-nodes/trial-0000/attempt-1/payload_exit_code
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
# torchrun on every node; the rendezvous on the first node of the allocation
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
head_addr=$(scontrol show node "$head_node" -o | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p')
export GRIDML_RDZV_HEAD="$head_node" GRIDML_RDZV_ENDPOINT="${head_addr:-$head_node}:$((20000 + SLURM_JOB_ID % 20000))"
gridml_run srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=4 --kill-on-bad-exit=1 bash -c 'addr=$(scontrol show node "$SLURMD_NODENAME" -o | sed -n '"'"'s/.*NodeAddr=\([^ ]*\).*/\1/p'"'"'); if [ -z "${GLOO_SOCKET_IFNAME:-}" ] && [ -n "$addr" ]; then dev=$(ip -o -4 addr show 2>/dev/null | awk -v a="$addr" '"'"'{split($4, p, "/")} p[1] == a {print $2; exit}'"'"'); if [ -n "$dev" ]; then export GLOO_SOCKET_IFNAME="$dev"; fi; fi; is_host=0; if [ "$SLURMD_NODENAME" = "$GRIDML_RDZV_HEAD" ]; then is_host=1; fi; export PET_RDZV_CONF="is_host=$is_host"; if [ -n "$addr" ] && [ -z "${PET_LOCAL_ADDR:-}" ]; then export PET_LOCAL_ADDR="$addr"; fi; echo "[gridml] node $SLURMD_NODENAME: torchrun, rendezvous $GRIDML_RDZV_ENDPOINT (host: $is_host, gloo interface ${GLOO_SOCKET_IFNAME:-default})" >&2; exec "$@"' gridml-node torchrun --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d "--rdzv-endpoint=$GRIDML_RDZV_ENDPOINT" "--rdzv-id=$SLURM_JOB_ID" --no-python bash -c 'echo "[gridml] rank ${RANK:-?} on node ${SLURMD_NODENAME:-?} (host $(hostname), local rank ${LOCAL_RANK:-?}, world size ${WORLD_SIZE:-?})" >&2; exec "$@"' gridml-rank python -u -m payloads.train_torch <DRYRUN>/runs/dry-torch-two-nodes/trial-0000/attempt-1/trial.json
code=$?
if [ "$code" -ne 0 ] && [ -s payload_exit_code ]; then code=$(cat payload_exit_code); fi
echo $code > exit_code.tmp && mv exit_code.tmp exit_code
exit $code

# <DRYRUN>/runs/dry-torch-two-nodes/trial-0001/attempt-1/job.sh
#!/bin/bash
# gridml: study dry-torch-two-nodes, trial 1, attempt 1; submitted with sbatch
#SBATCH --job-name=gridml.dry-torch-two-nodes.trial-0001
#SBATCH --comment=gridml-attempt-1
#SBATCH --chdir=<DRYRUN>/runs/dry-torch-two-nodes/trial-0001/attempt-1
#SBATCH --output=<DRYRUN>/runs/dry-torch-two-nodes/trial-0001/attempt-1/payload.log
#SBATCH --open-mode=append
#SBATCH --nodes=2
#SBATCH --ntasks=4
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=2
#SBATCH --mem=8192M
#SBATCH --time=01:00:00
#SBATCH --partition=cpu
#SBATCH --no-requeue
#SBATCH --signal=B:USR1@120
set -uo pipefail
export PATH=<ENV>/bin:"$PATH"
export GRIDML_TRIAL_DIR=<DRYRUN>/runs/dry-torch-two-nodes/trial-0001
export HOROVOD_GLOO_TIMEOUT_SECONDS=300
export HOROVOD_START_TIMEOUT=300
# OpenMPI refuses root without these (containers, test clusters)
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export GRIDML_ATTEMPT=1  # into progress.json (gridml/live.py)
export GRIDML_EXIT_FILE=<DRYRUN>/runs/dry-torch-two-nodes/trial-0001/attempt-1/payload_exit_code
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
# torchrun on every node; the rendezvous on the first node of the allocation
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
head_addr=$(scontrol show node "$head_node" -o | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p')
export GRIDML_RDZV_HEAD="$head_node" GRIDML_RDZV_ENDPOINT="${head_addr:-$head_node}:$((20000 + SLURM_JOB_ID % 20000))"
gridml_run srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=4 --kill-on-bad-exit=1 bash -c 'addr=$(scontrol show node "$SLURMD_NODENAME" -o | sed -n '"'"'s/.*NodeAddr=\([^ ]*\).*/\1/p'"'"'); if [ -z "${GLOO_SOCKET_IFNAME:-}" ] && [ -n "$addr" ]; then dev=$(ip -o -4 addr show 2>/dev/null | awk -v a="$addr" '"'"'{split($4, p, "/")} p[1] == a {print $2; exit}'"'"'); if [ -n "$dev" ]; then export GLOO_SOCKET_IFNAME="$dev"; fi; fi; is_host=0; if [ "$SLURMD_NODENAME" = "$GRIDML_RDZV_HEAD" ]; then is_host=1; fi; export PET_RDZV_CONF="is_host=$is_host"; if [ -n "$addr" ] && [ -z "${PET_LOCAL_ADDR:-}" ]; then export PET_LOCAL_ADDR="$addr"; fi; echo "[gridml] node $SLURMD_NODENAME: torchrun, rendezvous $GRIDML_RDZV_ENDPOINT (host: $is_host, gloo interface ${GLOO_SOCKET_IFNAME:-default})" >&2; exec "$@"' gridml-node torchrun --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d "--rdzv-endpoint=$GRIDML_RDZV_ENDPOINT" "--rdzv-id=$SLURM_JOB_ID" --no-python bash -c 'echo "[gridml] rank ${RANK:-?} on node ${SLURMD_NODENAME:-?} (host $(hostname), local rank ${LOCAL_RANK:-?}, world size ${WORLD_SIZE:-?})" >&2; exec "$@"' gridml-rank python -u -m payloads.train_torch <DRYRUN>/runs/dry-torch-two-nodes/trial-0001/attempt-1/trial.json
code=$?
if [ "$code" -ne 0 ] && [ -s payload_exit_code ]; then code=$(cat payload_exit_code); fi
echo $code > exit_code.tmp && mv exit_code.tmp exit_code
exit $code

