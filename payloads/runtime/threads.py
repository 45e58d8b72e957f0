"""Thread pools sized from the cores a trial was given, set *before* TensorFlow starts.

TensorFlow's defaults size every pool from the node's cores, per process (and tf.data adds its
own), so a many-rank trial on a big node can start thousands of threads (DeepTau met 30,000).
Here each rank gets ``cores // local_ranks`` cores and every pool is capped to that.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

_LOCAL_SIZE_VARS = ("HOROVOD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                    "PMI_LOCAL_SIZE", "LOCAL_WORLD_SIZE")  # the last: torchrun's
_LOCAL_RANK_VARS = ("HOROVOD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                    "LOCAL_RANK")
_CAPPED_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "NUMEXPR_NUM_THREADS", "BLIS_NUM_THREADS")


@dataclass(frozen=True)
class ThreadPlan:
    """How many threads each pool of one rank may use."""

    cores: int          # cores given to the whole trial
    local_ranks: int    # ranks of this trial on this node
    per_rank: int       # cores per rank
    intra_op: int       # TF intra-op pool (one op's parallel work)
    inter_op: int       # TF inter-op pool (independent ops at once)
    data: int           # tf.data private pool (>= 2: prefetch runs beside the generator)
    omp: int            # OpenMP / MKL / BLAS

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _first_int(names: tuple[str, ...], default: int) -> int:
    for n in names:
        if os.environ.get(n, "").strip().isdigit():
            return int(os.environ[n])
    return default


def local_ranks() -> int:
    """Ranks on this node, from the launcher's environment (horovodrun/gloo or mpirun)."""
    return max(1, _first_int(_LOCAL_SIZE_VARS, 1))


def local_rank() -> int:
    return _first_int(_LOCAL_RANK_VARS, 0)


def plan_threads(cores: int, n_local: int) -> ThreadPlan:
    """Split ``cores`` over ``n_local`` ranks; every pool at least 1, inter-op at most 2."""
    per_rank = max(1, int(cores) // max(1, n_local))
    return ThreadPlan(cores=int(cores), local_ranks=n_local, per_rank=per_rank, intra_op=per_rank,
                      inter_op=1 if per_rank <= 2 else 2, data=max(2, min(per_rank, 4)),
                      omp=per_rank)


def apply_env(plan: ThreadPlan) -> None:
    """Set OMP/MKL/BLAS and TF's pool variables; must run before TensorFlow is imported."""
    for name in _CAPPED_ENV:
        os.environ[name] = str(plan.omp)
    os.environ["TF_NUM_INTRAOP_THREADS"] = str(plan.intra_op)
    os.environ["TF_NUM_INTEROP_THREADS"] = str(plan.inter_op)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # idle OpenMP threads sleep at once instead of spinning: KMP_BLOCKTIME for Intel's runtime,
    # OMP_WAIT_POLICY for GNU's (libgomp: PyTorch's CPU wheels), which ignores the former. A
    # spinning intra-op worker takes the core the input pipeline's threads need, and is itself
    # descheduled mid-op when cores are shared: measured on 2 cores, a torch trial over 10,000
    # input files ran its epochs in 81 s / 30 s spinning and 6.5 s / 4.4 s passive (10 files:
    # 8.9 s / 2.4 s against 3.8 s / 3.7 s). A job that sets OMP_WAIT_POLICY keeps its own.
    os.environ["KMP_BLOCKTIME"] = "0"
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def apply_tf(plan: ThreadPlan) -> None:
    """Set TensorFlow's pools (before any op runs)."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(plan.intra_op)
    tf.config.threading.set_inter_op_parallelism_threads(plan.inter_op)


def apply_torch(plan: ThreadPlan) -> dict[str, int]:
    """Set PyTorch's pools: intra-op (``torch.set_num_threads``) and inter-op
    (``torch.set_num_interop_threads``, before any parallel work starts). Returns what torch
    reports back."""
    import torch

    torch.set_num_threads(plan.intra_op)
    try:
        torch.set_num_interop_threads(plan.inter_op)
    except RuntimeError:  # already started (a second call in one process): keep what it has
        pass
    return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}


def dataset_options(plan: ThreadPlan):  # -> tf.data.Options
    """tf.data options: a private pool of ``plan.data`` threads, no autotuned extra threads."""
    import tensorflow as tf

    opts = tf.data.Options()
    opts.threading.private_threadpool_size = plan.data
    opts.threading.max_intra_op_parallelism = 1
    opts.autotune.enabled = False
    opts.experimental_optimization.inject_prefetch = False
    return opts


def thread_count() -> int:
    """OS threads of this process right now (TensorFlow's C++ pools included)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()
