"""The Slurm backend: one batch job per trial attempt on an HPC cluster.

:mod:`.executor` (submit, poll, kill, resume), :mod:`.render` (the batch script, pure),
:mod:`.cli` (sbatch/squeue/sacct/scancel and their errors), :mod:`.journal` (what a restarted
controller needs to find its jobs again).
"""
