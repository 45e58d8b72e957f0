"""Thread plans from a trial's cores, GPU choice and precision policy (no TensorFlow needed)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from payloads.runtime import gpu, threads


@pytest.mark.parametrize("cores,ranks,per_rank,inter", [
    (2, 2, 1, 1), (2, 1, 2, 1), (64, 4, 16, 2), (3, 2, 1, 1), (1, 4, 1, 1),
])
def test_plan_splits_cores_over_local_ranks(cores: int, ranks: int, per_rank: int,
                                            inter: int) -> None:
    p = threads.plan_threads(cores, ranks)
    assert (p.per_rank, p.intra_op, p.inter_op, p.omp) == (per_rank, per_rank, inter, per_rank)
    assert 2 <= p.data <= max(2, min(per_rank, 4))
    assert p.per_rank * ranks <= max(cores, ranks)


# Every variable apply_env sets: the test's monkeypatch puts each back (thread caps of 1 left in
# os.environ would slow every later test that starts a process).
APPLIED = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
           "BLIS_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS",
           "TF_CPP_MIN_LOG_LEVEL", "KMP_BLOCKTIME", "OMP_WAIT_POLICY")


def test_apply_env_caps_every_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    for v in APPLIED:
        monkeypatch.delenv(v, raising=False)
    before = dict(os.environ)
    threads.apply_env(threads.plan_threads(2, 2))
    assert os.environ["OMP_NUM_THREADS"] == "1" and os.environ["MKL_NUM_THREADS"] == "1"
    assert os.environ["TF_NUM_INTRAOP_THREADS"] == "1"
    assert os.environ["TF_NUM_INTEROP_THREADS"] == "1"
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"  # libgomp's idle threads sleep (torch)
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # a job's own choice is kept
    threads.apply_env(threads.plan_threads(2, 2))
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
    changed = {k for k, v in os.environ.items() if before.get(k) != v}
    assert changed <= set(APPLIED), changed - set(APPLIED)  # every one is put back


def test_local_ranks_from_the_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOROVOD_LOCAL_SIZE", raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "3")
    assert threads.local_ranks() == 3
    monkeypatch.setenv("HOROVOD_LOCAL_SIZE", "2")
    assert threads.local_ranks() == 2
    assert threads.thread_count() >= 1


class _Config:
    """Stands in for ``tf.config`` on a machine with ``n`` GPUs (records what was set)."""

    def __init__(self, n: int) -> None:
        self.gpus = [f"gpu{i}" for i in range(n)]
        self.visible: list[Any] | None = None
        self.growth: list[str] = []
        cfg = self

        class _Exp:
            def set_memory_growth(self, dev: str, on: bool) -> None:
                cfg.growth.append(dev)

        self.experimental = _Exp()

    def list_physical_devices(self, kind: str) -> list[str]:
        return self.gpus

    def set_visible_devices(self, devs: list[Any], kind: str) -> None:
        self.visible = devs


def test_one_gpu_per_local_rank_with_memory_growth() -> None:
    cfg = _Config(4)
    assert gpu.setup_gpu(cfg, local_rank=1, wanted=2) == "GPU:1"
    assert cfg.visible == ["gpu1"] and cfg.growth == ["gpu1"]
    assert gpu.choose_gpu(5, 4) == 1 and gpu.choose_gpu(0, 0) is None


def test_cpu_fallback_and_gpus_hidden_when_not_asked() -> None:
    assert gpu.setup_gpu(_Config(0), local_rank=0, wanted=1) == "CPU"
    cfg = _Config(2)
    assert gpu.setup_gpu(cfg, local_rank=0, wanted=0) == "CPU" and cfg.visible == []


def test_precision_policy() -> None:
    assert gpu.precision_policy(True, "GPU:0") == "mixed_float16"
    assert gpu.precision_policy(True, "CPU") == "float32"
    assert gpu.precision_policy(False, "GPU:0") == "float32"
    assert gpu.precision_policy("mixed_bfloat16", "CPU") == "mixed_bfloat16"


def test_input_bound_reason_names_the_rank_and_the_fix() -> None:
    from payloads.runtime.profile import combine, input_bound_reason, rank_profile

    fast = rank_profile(10.0, 9.0, 0.1, 0, cpu_s=9.5)
    slow = rank_profile(10.0, 9.0, 4.0, 0, cpu_s=5.0)
    report = combine([fast, slow], 1000)
    assert report["input_wait_frac"] == 0.4 and report["samples_per_s"] == pytest.approx(111.1)
    assert report["extra"]["wait_s_per_rank"] == [0.1, 4.0]
    cache = {"hit_rate": 0.25, "used_mb": 1024.0, "budget_mb": 1024.0}
    reason = input_bound_reason(report, cache)
    assert reason is not None and reason.startswith("rank 1 waited 40%")
    assert "cache_budget_mb" in reason
    assert input_bound_reason(combine([fast, fast], 1000), cache) is None


def test_reader_processes_only_where_cores_are_free() -> None:
    from payloads.runtime.session import reader_processes

    plan = threads.plan_threads(16, 2)  # 8 cores per rank
    assert reader_processes("auto", plan, "GPU:0") == 4
    assert reader_processes("auto", plan, "CPU") == 0
    assert reader_processes("auto", threads.plan_threads(2, 2), "GPU:0") == 0
    assert reader_processes(3, plan, "CPU") == 3
