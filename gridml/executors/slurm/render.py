"""The batch script of one trial attempt on Slurm (pure: a :class:`TaskRequest` in, text out).

One trial is one batch job named ``gridml.<study>.trial-NNNN`` (found again by that name), its
attempt in the job's comment (``gridml-attempt-N``). ``resources`` are per node; the trial's
``workers`` ranks are spread over ``resources.nodes`` nodes:

- one node: the payload command the local executor runs (horovodrun:
  ``python -m payloads.hvdrun -np W -H localhost:W``),
  inside the allocation; but with ``training.horovod: mpi`` the ``mpirun`` line below (OpenMPI
  refuses ``-H localhost`` inside an allocation);
- several nodes: ``mpirun -np W`` (OpenMPI and MPICH read the Slurm allocation: one slot per
  task, ``--ntasks-per-node`` ranks on each node, daemons started with ``srun``) around
  ``python -m payloads.train_keras``; Horovod's MPI controller; every rank prints its
  ``SLURMD_NODENAME`` into the trial's log first.

``payload.framework: torch``: one node runs the torchrun line of the local executor; several
nodes run one torchrun per node with ``srun --ntasks-per-node=1`` (``--nnodes=$SLURM_NNODES``,
``--nproc-per-node`` ranks each, a c10d rendezvous on the allocation's first node, its address
from ``scontrol show node``, a port from the job id), each rank wrapped to print its ``RANK``,
``WORLD_SIZE`` and ``SLURMD_NODENAME`` first. On each node a small wrapper tells torchrun whether
it hosts the rendezvous (``PET_RDZV_CONF=is_host=0|1``: the first node does, whatever its
hostname resolves to), which address its ranks publish for the process group's store
(``PET_LOCAL_ADDR``, its ``NodeAddr``; torchrun would publish ``getfqdn()``) and, when unset, points Gloo at the interface holding the node's
``NodeAddr`` (``GLOO_SOCKET_IFNAME``; Gloo otherwise binds to what the hostname resolves to, which
on nodes sharing one hostname, like the test cluster's namespaces, is loopback). A failing rank's
own exit code (``$GRIDML_EXIT_FILE``) replaces torchrun's plain 1.

``resources.container`` wraps the payload in ``apptainer exec [--nv] IMAGE`` (on several nodes:
each rank, the hybrid MPI model). ``slurm.setup`` lines run first on the batch node (``module
load``, ``source env/bin/activate``); the controller's environment's ``bin`` folder is on
``PATH`` before them (shared filesystem). ``slurm.options`` are any other ``sbatch`` options:
``{exclusive: true}`` -> ``--exclusive``, ``{gpus-per-task: 1}`` -> ``--gpus-per-task=1``.
The job does not requeue itself (``--no-requeue``, unless ``options: {requeue: true}``): a lost
node ends it NODE_FAIL and gridml submits the trial's next attempt as a new job, so no attempt
ever runs twice.

Preemption and walltime (docs/hpc.md): ``#SBATCH --signal=B:USR1@<slurm.signal_grace>`` (at most
half the walltime; 0: none) has Slurm send USR1 to the batch shell that long before the job
ends. The shell runs the launcher in the background and waits for it (a shell runs no trap while
a foreground command runs); its trap forwards USR1 to the ranks of its node, found by the files
they write into ``$GRIDML_SIGNAL_DIR`` once they catch the signal (payloads/runtime/preempt.py),
never to the launcher (torchrun, horovodrun, mpirun and srun would end the ranks on it); one rank
told is enough, the ranks agree through their own collective. They checkpoint at the next batch
and exit 75 (payloads/runtime/errors.py CONTINUE_CODE), which the Keras and torch ranks also
write to ``$GRIDML_EXIT_FILE`` (the launchers exit 1 whatever their ranks' codes); the trap notes
when the warning came in ``signalled_at``.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from gridml import fields
from gridml.executors.base import TaskRequest
from gridml.planner import payload_command
from gridml.specmodel.model import parse_walltime

ATTEMPT_COMMENT = "gridml-attempt-{attempt}"
RANK_BANNER = ('echo "[gridml] rank ${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${SLURM_PROCID:-0}}} on node '
               '${SLURMD_NODENAME:-?} (host $(hostname))" >&2; exec "$@"')


TORCH_RANK_BANNER = ('echo "[gridml] rank ${RANK:-?} on node ${SLURMD_NODENAME:-?} (host $(hostname), '
                     'local rank ${LOCAL_RANK:-?}, world size ${WORLD_SIZE:-?})" >&2; exec "$@"')
# where the rendezvous is: the allocation's first node (its NodeAddr), a port from the job id
TORCH_HEAD = ['head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
              "head_addr=$(scontrol show node \"$head_node\" -o | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')",
              'export GRIDML_RDZV_HEAD="$head_node" '
              'GRIDML_RDZV_ENDPOINT="${head_addr:-$head_node}:$((20000 + SLURM_JOB_ID % 20000))"']
# run on every node by srun, around torchrun (see the module docstring)
TORCH_NODE = ("addr=$(scontrol show node \"$SLURMD_NODENAME\" -o | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p'); "
              'if [ -z "${GLOO_SOCKET_IFNAME:-}" ] && [ -n "$addr" ]; then '
              'dev=$(ip -o -4 addr show 2>/dev/null | awk -v a="$addr" \'{split($4, p, "/")} p[1] == a {print $2; exit}\'); '
              'if [ -n "$dev" ]; then export GLOO_SOCKET_IFNAME="$dev"; fi; fi; '
              'is_host=0; if [ "$SLURMD_NODENAME" = "$GRIDML_RDZV_HEAD" ]; then is_host=1; fi; '
              'export PET_RDZV_CONF="is_host=$is_host"; '
              'if [ -n "$addr" ] && [ -z "${PET_LOCAL_ADDR:-}" ]; then export PET_LOCAL_ADDR="$addr"; fi; '
              'echo "[gridml] node $SLURMD_NODENAME: torchrun, rendezvous $GRIDML_RDZV_ENDPOINT '
              '(host: $is_host, gloo interface ${GLOO_SOCKET_IFNAME:-default})" >&2; exec "$@"')


# the batch shell's side of the warning signal (see the module docstring): the trap tells the
# ranks of this node, the launcher runs in the background so that the trap runs at once
SIGNAL_LINES = [
    'export GRIDML_SIGNAL_DIR="$PWD/ranks"',
    'rm -rf "$GRIDML_SIGNAL_DIR" signalled_at; mkdir -p "$GRIDML_SIGNAL_DIR"',
    "gridml_warned() {",
    '  date +%s.%N > signalled_at; touch "$GRIDML_SIGNAL_DIR/warned"',
    '  echo "[gridml] USR1: the job ends soon; the ranks checkpoint at their next batch" >&2',
    '  for f in "$GRIDML_SIGNAL_DIR/${SLURMD_NODENAME:-$(hostname)}".*; do',
    '    [ -e "$f" ] && kill -USR1 "${f##*.}" 2>/dev/null',
    "  done",
    "}",
    "gridml_run() {  # the launcher in the background: a trap runs while it does",
    '  "$@" &',
    "  local pid=$! rc",
    "  while :; do",
    '    wait "$pid"; rc=$?',
    '    if [ "$rc" -gt 128 ] && kill -0 "$pid" 2>/dev/null; then continue; fi',
    '    return "$rc"',
    "  done",
    "}",
    "trap gridml_warned USR1",
]


def signal_grace_s(req: TaskRequest) -> int:
    """Seconds before the job's end when Slurm warns it (``slurm.signal_grace``, default 120;
    0: never), at most half the walltime (a warning at the start would only checkpoint)."""
    site: dict[str, Any] = req.site or {}
    grace = parse_walltime(site.get("signal_grace", 120) if site.get("signal_grace") is not None
                           else 120)
    return max(0, min(grace, req.walltime_s // 2))


def signal_option(req: TaskRequest) -> str | None:
    """``--signal=B:USR1@<grace>`` (None: no warning asked for)."""
    grace = signal_grace_s(req)
    return f"--signal=B:USR1@{grace}" if grace > 0 else None


def job_name(study: str, number: int) -> str:
    return f"gridml.{study}.trial-{number:04d}"


def attempt_dir(req: TaskRequest) -> Path:
    return req.workdir / f"attempt-{req.attempt}"


def slurm_time(seconds: int) -> str:
    """``--time`` as D-HH:MM:SS (Slurm rounds up to whole minutes); a walltime that is not
    positive is refused (never turned into a minute)."""
    seconds = max(fields.walltime("resources.walltime", seconds), 60)
    days, rest = divmod(seconds, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return f"{days}-{h:02d}:{m:02d}:{s:02d}" if days else f"{h:02d}:{m:02d}:{s:02d}"


def ranks_per_node(workers: int, nodes: int) -> int:
    return -(-workers // max(nodes, 1))


def sbatch_options(req: TaskRequest) -> list[str]:
    """The ``#SBATCH`` options, in a fixed order (golden-tested)."""
    site: dict[str, Any] = req.site or {}
    nodes = max(req.nodes, 1)
    per_node = ranks_per_node(req.workers, nodes)
    run = attempt_dir(req)
    opts = [f"--job-name={fields.job_name(job_name(req.study, req.trial_number))}",
            f"--comment={ATTEMPT_COMMENT.format(attempt=req.attempt)}",
            f"--chdir={fields.script_path('working folder', run)}",
            f"--output={fields.script_path('log file', run / 'payload.log')}", "--open-mode=append",
            f"--nodes={nodes}", f"--ntasks={req.workers}"]
    if req.workers % nodes == 0:
        opts.append(f"--ntasks-per-node={per_node}")
    opts.append(f"--cpus-per-task={max(req.cores // per_node, 1)}")
    opts.append(f"--mem={int(round(req.memory_gb * 1024))}M")
    opts.append(f"--time={slurm_time(req.walltime_s)}")
    if req.gpus > 0:
        opts.append(f"--gpus-per-node={req.gpus}")
    for key in ("partition", "account", "qos"):
        if site.get(key):
            opts.append(f"--{key}={fields.slurm_name(f'slurm.{key}', site[key])}")
    if site.get("constraint"):
        opts.append(f"--constraint={fields.slurm_constraint('slurm.constraint', site['constraint'])}")
    extra: dict[str, Any] = dict(site.get("options") or {})
    if not fields.option_keys(extra) & {"requeue", "no-requeue"}:
        opts.append("--no-requeue")
    opts += fields.sbatch_extra(extra)  # checked: names, one-word values, flags bare
    return opts


def _container(req: TaskRequest, argv: list[str]) -> list[str]:
    if not req.container:
        return argv
    image = fields.container("resources.container", req.container)
    return ["apptainer", "exec", *(["--nv"] if req.gpus > 0 else []), image, *argv]


def launch_command(req: TaskRequest, trial_file: Path) -> list[str]:
    """How the ranks start inside the allocation (see the module docstring)."""
    framework = req.trial.training.framework
    # horovodrun --mpi -H localhost:W inside an allocation: OpenMPI refuses "localhost", a host
    # not in the allocation ("All nodes which are allocated for this job are already filled"),
    # so Horovod's MPI controller runs under mpirun, which takes the slots from Slurm, on one
    # node as on several
    mpi = framework != "torch" and req.launcher == "mpi"
    if max(req.nodes, 1) == 1 and not mpi:
        argv = payload_command(req.workers, req.launcher, str(trial_file), framework=framework)
        return _container(req, argv)
    if framework == "torch":
        return torch_nodes_command(req, trial_file)
    rank = _container(req, ["python", "-m", "payloads.train_keras", str(trial_file)])
    return ["mpirun", "-np", str(req.workers), "--bind-to", "none",
            "bash", "-c", RANK_BANNER, "gridml-rank", *rank]


def torch_nodes_command(req: TaskRequest, trial_file: Path) -> list[str]:
    """One torchrun per node (srun), every rank wrapped by the banner; ``--no-python`` so that
    the wrapper, not an interpreter, is what torchrun starts."""
    nodes = max(req.nodes, 1)
    per_node = ranks_per_node(req.workers, nodes)
    rank = _container(req, ["bash", "-c", TORCH_RANK_BANNER, "gridml-rank",
                            "python", "-u", "-m", "payloads.train_torch", str(trial_file)])
    torchrun = ["torchrun", f"--nnodes={nodes}", f"--nproc-per-node={per_node}",
                "--rdzv-backend=c10d", "--rdzv-endpoint=$GRIDML_RDZV_ENDPOINT",
                "--rdzv-id=$SLURM_JOB_ID", "--no-python", *rank]
    return ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
            f"--cpus-per-task={max(req.cores // per_node, 1) * per_node}", "--kill-on-bad-exit=1",
            "bash", "-c", TORCH_NODE, "gridml-node", *torchrun]


def _shell(argv: list[str]) -> str:
    """``argv`` quoted for bash, but ``$GRIDML_RDZV_ENDPOINT`` and ``$SLURM_JOB_ID`` left to the
    batch shell (in double quotes)."""
    out = []
    for arg in argv:
        if arg in ("--rdzv-endpoint=$GRIDML_RDZV_ENDPOINT", "--rdzv-id=$SLURM_JOB_ID"):
            out.append(f'"{arg}"')
        else:
            out.append(shlex.quote(arg))
    return " ".join(out)


def render_script(req: TaskRequest, trial_file: Path, bindir: str) -> str:
    """The whole batch script; ``trial_file``: the trial document the ranks read;
    ``bindir``: the environment's ``bin`` folder put first on ``PATH`` (the payload's own when
    payload.python or $GRIDML_PAYLOAD_PYTHON names it: gridml.payload_env)."""
    import os

    from gridml.payload_env import ENV_VAR, payload_bindir

    if req.python or os.environ.get(ENV_VAR):
        bindir = str(payload_bindir(req.python))
    site: dict[str, Any] = req.site or {}
    env = {"GRIDML_TRIAL_DIR": str(req.workdir), "HOROVOD_START_TIMEOUT": "300",
           "HOROVOD_GLOO_TIMEOUT_SECONDS": "300", **req.env}
    fields.env_names(env)  # the values are quoted below; the names must be names
    lines = ["#!/bin/bash",
             f"# gridml: study {req.study}, trial {req.trial_number}, attempt {req.attempt}; "
             "submitted with sbatch",
             *(f"#SBATCH {opt}" for opt in sbatch_options(req)),
             *([f"#SBATCH {warn}"] if (warn := signal_option(req)) else []),
             "set -uo pipefail",
             f"export PATH={shlex.quote(bindir)}:\"$PATH\"",
             *(f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())),
             "# OpenMPI refuses root without these (containers, test clusters)",
             'if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 '
             "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi"]
    torch = req.trial.training.framework == "torch"
    # torchrun exits 1 whatever a rank's code was: the rank's own code is kept here; the Keras
    # ranks write theirs only to be continued (75), as horovodrun exits 1 then too
    exit_file = torch or warn is not None
    lines.append(f"export GRIDML_ATTEMPT={int(req.attempt)}  # into progress.json (gridml/live.py)")
    if exit_file:
        lines.append(f"export GRIDML_EXIT_FILE={shlex.quote(str(attempt_dir(req) / 'payload_exit_code'))}")
    if warn is not None:  # the trap first: a warning during slurm.setup must not kill the shell
        lines += ["# Slurm's warning before the job ends (slurm.signal_grace): to the ranks",
                  *SIGNAL_LINES]
    setup = [str(line) for line in site.get("setup") or []]
    if setup:
        lines += ["# slurm.setup", *setup]
    lines += ['echo "[gridml] job ${SLURM_JOB_ID} on ${SLURM_JOB_NODELIST} '
              '(batch node ${SLURMD_NODENAME:-?}, restart ${SLURM_RESTART_COUNT:-0})" >&2',
              "rm -f exit_code" + (" payload_exit_code" if exit_file else "")]
    if torch and max(req.nodes, 1) > 1:
        lines += ["# torchrun on every node; the rendezvous on the first node of the allocation",
                  *TORCH_HEAD]
    launch = launch_command(req, trial_file)
    mpirun = launch[0] == "mpirun"
    if mpirun:
        lines += ["# the job's own OpenMPI session directory: two mpiruns starting at once on a node",
                  "# race to create the shared one (mkdir /tmp/ompi.<host>.<uid>: File exists)",
                  'export OMPI_MCA_orte_tmpdir_base="${TMPDIR:-/tmp}/gridml-ompi-${SLURM_JOB_ID}"']
    lines += [("gridml_run " if warn is not None else "") + _shell(launch), "code=$?"]
    if mpirun:
        lines.append('rm -rf "$OMPI_MCA_orte_tmpdir_base"')
    if exit_file:
        lines.append('if [ "$code" -ne 0 ] && [ -s payload_exit_code ]; then '
                     'code=$(cat payload_exit_code); fi')
    lines += ["echo $code > exit_code.tmp && mv exit_code.tmp exit_code", "exit $code", ""]
    return "\n".join(lines)


def render_for_request(req: TaskRequest, bindir: str | None = None) -> dict[str, Any]:
    """What the Slurm executor would submit for ``req`` (the dry run)."""
    import sys

    bindir = bindir or str(Path(sys.executable).parent)
    trial_file = attempt_dir(req) / "trial.json"
    return {"executor": "slurm", "trial": req.trial_number, "attempt": req.attempt,
            "job_name": job_name(req.study, req.trial_number),
            "script_path": str(attempt_dir(req) / "job.sh"),
            "script": render_script(req, trial_file, bindir)}
