# <DRYRUN>/runs/dry-two-nodes/trial-0000/attempt-1/job.sh
#!/bin/bash
# gridml: study dry-two-nodes, trial 0, attempt 1; submitted with sbatch
#SBATCH --job-name=gridml.dry-two-nodes.trial-0000
#SBATCH --comment=gridml-attempt-1
#SBATCH --chdir=<DRYRUN>/runs/dry-two-nodes/trial-0000/attempt-1
#SBATCH --output=<DRYRUN>/runs/dry-two-nodes/trial-0000/attempt-1/payload.log
#SBATCH --open-mode=append
#SBATCH --nodes=2
#SBATCH --ntasks=8
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=2
#SBATCH --mem=65536M
#SBATCH --time=06:00:00
#SBATCH --gpus-per-node=4
#SBATCH --partition=gpu
#SBATCH --account=atlas
#SBATCH --constraint=a100
#SBATCH --no-requeue
#SBATCH --exclusive
#SBATCH --gpus-per-task=1
set -uo pipefail
export PATH=<ENV>/bin:"$PATH"
export GRIDML_TRIAL_DIR=<DRYRUN>/runs/dry-two-nodes/trial-0000
export HOROVOD_GLOO_TIMEOUT_SECONDS=300
export HOROVOD_START_TIMEOUT=300
# OpenMPI refuses root without these (containers, test clusters)
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# slurm.setup
module load cuda/12.2
source /sw/env/bin/activate
echo "[gridml] job ${SLURM_JOB_ID} on ${SLURM_JOB_NODELIST} (batch node ${SLURMD_NODENAME:-?}, restart ${SLURM_RESTART_COUNT:-0})" >&2
rm -f exit_code
# the job's own OpenMPI session directory: two mpiruns starting at once on a node
# race to create the shared one (mkdir /tmp/ompi.<host>.<uid>: File exists)
export OMPI_MCA_orte_tmpdir_base="${TMPDIR:-/tmp}/gridml-ompi-${SLURM_JOB_ID}"
mpirun -np 8 --bind-to none bash -c 'echo "[gridml] rank ${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${SLURM_PROCID:-0}}} on node ${SLURMD_NODENAME:-?} (host $(hostname))" >&2; exec "$@"' gridml-rank python -m payloads.train_keras <DRYRUN>/runs/dry-two-nodes/trial-0000/attempt-1/trial.json
code=$?
rm -rf "$OMPI_MCA_orte_tmpdir_base"
echo $code > exit_code.tmp && mv exit_code.tmp exit_code
exit $code

# <DRYRUN>/runs/dry-two-nodes/trial-0001/attempt-1/job.sh
#!/bin/bash
# gridml: study dry-two-nodes, trial 1, attempt 1; submitted with sbatch
#SBATCH --job-name=gridml.dry-two-nodes.trial-0001
#SBATCH --comment=gridml-attempt-1
#SBATCH --chdir=<DRYRUN>/runs/dry-two-nodes/trial-0001/attempt-1
#SBATCH --output=<DRYRUN>/runs/dry-two-nodes/trial-0001/attempt-1/payload.log
#SBATCH --open-mode=append
#SBATCH --nodes=2
#SBATCH --ntasks=8
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=2
#SBATCH --mem=65536M
#SBATCH --time=06:00:00
#SBATCH --gpus-per-node=4
#SBATCH --partition=gpu
#SBATCH --account=atlas
#SBATCH --constraint=a100
#SBATCH --no-requeue
#SBATCH --exclusive
#SBATCH --gpus-per-task=1
set -uo pipefail
export PATH=<ENV>/bin:"$PATH"
export GRIDML_TRIAL_DIR=<DRYRUN>/runs/dry-two-nodes/trial-0001
export HOROVOD_GLOO_TIMEOUT_SECONDS=300
export HOROVOD_START_TIMEOUT=300
# OpenMPI refuses root without these (containers, test clusters)
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# slurm.setup
module load cuda/12.2
source /sw/env/bin/activate
echo "[gridml] job ${SLURM_JOB_ID} on ${SLURM_JOB_NODELIST} (batch node ${SLURMD_NODENAME:-?}, restart ${SLURM_RESTART_COUNT:-0})" >&2
rm -f exit_code
# the job's own OpenMPI session directory: two mpiruns starting at once on a node
# race to create the shared one (mkdir /tmp/ompi.<host>.<uid>: File exists)
export OMPI_MCA_orte_tmpdir_base="${TMPDIR:-/tmp}/gridml-ompi-${SLURM_JOB_ID}"
mpirun -np 8 --bind-to none bash -c 'echo "[gridml] rank ${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${SLURM_PROCID:-0}}} on node ${SLURMD_NODENAME:-?} (host $(hostname))" >&2; exec "$@"' gridml-rank python -m payloads.train_keras <DRYRUN>/runs/dry-two-nodes/trial-0001/attempt-1/trial.json
code=$?
rm -rf "$OMPI_MCA_orte_tmpdir_base"
echo $code > exit_code.tmp && mv exit_code.tmp exit_code
exit $code

