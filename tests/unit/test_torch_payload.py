"""The PyTorch payload's pieces without launching it: no TensorFlow needed, threads, metrics,
losses, hooks check, launch command."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gridml.planner import payload_command  # noqa: E402
from gridml.spec.checks import check_model_file  # noqa: E402
from payloads.runtime import torch_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=180, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})


def test_the_torch_path_imports_no_tensorflow_or_horovod() -> None:
    proc = _python("""
        import sys
        for name in ("tensorflow", "horovod", "keras", "tf2onnx"):
            sys.modules[name] = None  # any import of them raises ImportError
        import payloads.train_torch
        from payloads.runtime import (torch_fit, torch_model, reporter, spool, profile,
                                      checkpoint, outputs, session, core, report)
        from payloads.runtime.pipeline import inputs, ragged, procreader
        assert not any(m.startswith(("tensorflow", "horovod")) for m in sys.modules
                       if sys.modules[m] is not None)
        print("ok")
    """)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]


def test_threads_from_the_trial_cores_under_torchrun() -> None:
    """torchrun's LOCAL_WORLD_SIZE splits the cores; torch's pools and OMP follow the plan."""
    proc = _python("""
        import os
        from payloads.runtime import threads
        plan = threads.plan_threads(4, threads.local_ranks())
        threads.apply_env(plan)
        import torch
        print(plan.per_rank, threads.apply_torch(plan), os.environ["OMP_NUM_THREADS"],
              torch.get_num_threads(), torch.get_num_interop_threads(), threads.local_rank())
    """, LOCAL_WORLD_SIZE="2", LOCAL_RANK="1", OMP_NUM_THREADS="7")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[0] == "2 {'intra_op': 2, 'inter_op': 1} 2 2 1 1"


def test_auc_from_histograms_matches_the_exact_auc() -> None:
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    y = (rng.random(5000) < 0.4).astype("f4")
    logits = rng.normal(size=5000).astype("f4") + 1.5 * y
    exact = roc_auc_score(y, logits)
    m = torch_model.Metrics(["accuracy", "auc"], "binary_crossentropy", torch.device("cpu"))
    for a in range(0, 5000, 700):  # batches, and the (B, 1) outputs models give
        out = torch.from_numpy(logits[a:a + 700, None])
        yy = torch.from_numpy(y[a:a + 700])
        m.update(torch_model.loss_fn("binary_crossentropy")(out, yy), out, yy)
    got = m.reduce(None)
    assert got["auc"] == pytest.approx(exact, abs=2e-3)
    assert got["accuracy"] == pytest.approx(np.mean((logits > 0) == (y > 0.5)))
    # the sums of two ranks: all_reduce doubles every count, the ratios stay
    twice = m.reduce(lambda t: t.mul_(2))
    assert twice["auc"] == pytest.approx(got["auc"]) and twice["loss"] == pytest.approx(got["loss"])


def test_the_gpu_score_histograms_equal_the_per_class_bincounts() -> None:
    """The sync-free path (one index_add_, used on a GPU) adds exactly what the per-class
    bincounts add; run here on CPU tensors, the same operations."""
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, torch_model.AUC_BINS, (3000,), generator=g)
    truth = torch.rand(3000, generator=g) < 0.3
    w = torch.rand(3000, generator=g, dtype=torch.float64) * 3
    a, b = (torch.zeros(2, torch_model.AUC_BINS, dtype=torch.float64) for _ in range(2))
    for lo in range(0, 3000, 256):
        sl = slice(lo, lo + 256)
        torch_model.score_histograms(a, idx[sl], truth[sl], w[sl], sync_free=True)
        torch_model.score_histograms(b, idx[sl], truth[sl], w[sl], sync_free=False)
    torch.testing.assert_close(a, b)
    assert a[0].sum().item() == pytest.approx(w[truth].sum().item())


@pytest.mark.parametrize("kind", ["binary", "weighted", "multiclass", "loss only"])
def test_batches_counted_together_give_the_sums_of_batches_counted_one_by_one(kind: str) -> None:
    """On a GPU the metrics count torch_model.DEFER batches at once (fewer launches per step);
    forced here on the CPU: the same sums, whatever the batch sizes, weights or outputs."""
    g = torch.Generator().manual_seed(2)
    names = ["accuracy", "auc", "precision", "recall"] if kind != "multiclass" else ["accuracy"]
    loss = "categorical_crossentropy" if kind == "multiclass" else "binary_crossentropy"
    one, many = (torch_model.Metrics(names, loss, torch.device("cpu")) for _ in range(2))
    many.defer = 5
    for size in [64] * 12 + [17, 64, 64]:  # a short batch in between: counted on its own
        out = torch.randn(size, 3 if kind == "multiclass" else 1, generator=g)
        y = (torch.randint(0, 3, (size,), generator=g) if kind == "multiclass"
             else (torch.rand(size, generator=g) < 0.4).float())
        w = torch.rand(size, generator=g) * 2 if kind == "weighted" else None
        lval = torch.rand((), generator=g)
        for m in (one, many):
            m.update(lval, None if kind == "loss only" else out, y, w)
    assert len(many._pending) == 2  # the last two wait for a flush
    a, b = one.reduce(None), many.reduce(None)
    assert a.keys() == b.keys() and len(a) == 1 + len(names)
    for k in a:
        assert b[k] == pytest.approx(a[k], rel=1e-12, nan_ok=True), k
    assert (a["accuracy"] != a["accuracy"]) == (kind == "loss only")  # nan: no outputs
    torch.testing.assert_close(one.hist, many.hist)


def test_losses_mean_what_they_mean_for_keras() -> None:
    out = torch.tensor([[2.0], [-1.0], [0.5]])
    y = torch.tensor([1.0, 0.0, 0.0])
    p = torch.sigmoid(out).squeeze(1)
    bce = -(y * p.log() + (1 - y) * (1 - p).log()).mean()
    assert torch_model.loss_fn("binary_crossentropy")(out, y).item() == pytest.approx(bce.item())
    logits = torch.tensor([[1.0, 2.0, 0.1], [0.3, 0.2, 3.0]])
    onehot = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    cce = -(onehot * torch.log_softmax(logits, -1)).sum(-1).mean()
    assert torch_model.loss_fn("categorical_crossentropy")(logits, onehot).item() == pytest.approx(cce.item())
    m = torch_model.Metrics(["accuracy", "auc"], "categorical_crossentropy", torch.device("cpu"))
    m.update(cce, logits, onehot)
    assert m.reduce(None)["accuracy"] == 1.0
    assert torch_model.loss_fn("mse")(out, y).item() == pytest.approx(((out.squeeze(1) - y) ** 2).mean().item())


def test_unknown_names_are_refused_in_one_line() -> None:
    from payloads.runtime.errors import PayloadFailure

    with pytest.raises(PayloadFailure, match="training.loss 'hinge'"):
        torch_model.loss_fn("hinge")
    with pytest.raises(PayloadFailure, match="training.metrics: 'f1'"):
        torch_model.Metrics(["f1"], "mse", torch.device("cpu"))
    with pytest.raises(PayloadFailure, match="training.optimizer 'lamb'"):
        torch_model.optimizer("lamb", [torch.zeros(1, requires_grad=True)], 1e-3, {})
    opt = torch_model.optimizer("adamw", [torch.zeros(1, requires_grad=True)], 1e-3, {})
    assert opt.defaults["weight_decay"] == 0.004 and opt.defaults["eps"] == 1e-7


def test_hooks_are_checked_on_the_submit_host(tmp_path: Path) -> None:
    good = tmp_path / "good.py"
    good.write_text("def build_model(hparams, input_shape): ...\n"
                     "def loss(outputs, labels): ...\n"
                     "def training_step(model, batch, loss_fn, *, scale=1.0): ...\n")
    assert check_model_file(good, "torch") == []
    bad = tmp_path / "bad.py"
    bad.write_text("def build_model(hparams, input_shape): ...\n"
                   "def loss(outputs): ...\n"
                   "def training_step(model, batch): ...\n")
    problems = [msg for _, msg in check_model_file(bad, "torch")]
    assert len(problems) == 2
    assert "the loss hook must take (outputs, labels)" in problems[0]
    assert "the training_step hook must take (model, batch, loss_fn)" in problems[1]
    assert check_model_file(bad, "keras") == []  # keras files may have helpers of these names
    none = tmp_path / "none.py"
    none.write_text("import torch\n")
    assert "-> torch.nn.Module" in check_model_file(none, "torch")[0][1]


def test_launch_commands() -> None:
    keras = payload_command(2, "gloo", "trial.json")
    # horovodrun's own code, started without its TensorFlow-importing build probe
    assert keras == ["python", "-m", "payloads.hvdrun", "-np", "2", "-H", "localhost:2", "--gloo",
                     "python", "-m", "payloads.train_keras", "trial.json"]
    assert payload_command(3, "gloo", "trial.json", framework="torch") == [
        "torchrun", "--nnodes", "1", "--nproc-per-node", "3", "--rdzv-backend", "c10d",
        "--rdzv-endpoint", "localhost:0", "-m", "payloads.train_torch", "trial.json"]
    # one worker: the payload's interpreter itself, no launcher (one rank either way)
    for framework in ("torch", "keras"):
        assert payload_command(1, "mpi", "t.json", python="/env/bin/python", framework=framework) \
            == ["/env/bin/python", "-m", f"payloads.train_{framework}", "t.json"]


def test_a_keras_rank_started_alone_runs_horovod_on_gloo() -> None:
    from payloads.train_keras import single_process_horovod

    alone: dict[str, str] = {}
    single_process_horovod(alone)
    assert alone == {"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo"}
    for launched in ({"HOROVOD_RANK": "0"}, {"OMPI_COMM_WORLD_RANK": "1"}, {"PMI_RANK": "0"}):
        single_process_horovod(launched)  # a launcher's rank: left to the launcher
        assert "HOROVOD_CONTROLLER" not in launched
    own = {"HOROVOD_CONTROLLER": "mpi"}
    single_process_horovod(own)
    assert own["HOROVOD_CONTROLLER"] == "mpi"


def test_precision_and_device_fall_back_to_cpu() -> None:
    from payloads.runtime.torch_fit import choose_device, precision

    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    assert precision(True, cpu) == (None, False, "float32")
    assert precision(True, gpu) == (torch.float16, True, "float16")
    assert precision("mixed_bfloat16", cpu) == (torch.bfloat16, False, "bfloat16")
    assert precision(False, gpu) == (None, False, "float32")
    assert choose_device(0, 0) == cpu  # no GPU asked for: CPU even where CUDA exists
    if not torch.cuda.is_available():
        assert choose_device(1, 3) == cpu


def test_ranks_that_share_a_gpu_talk_through_gloo() -> None:
    from payloads.runtime.torch_fit import backend_for

    assert backend_for("cpu", 2, 0) == ("gloo", None)
    assert backend_for("cuda", 2, 2) == ("nccl", None)
    assert backend_for("cuda", 1, 4) == ("nccl", None)
    backend, note = backend_for("cuda", 2, 1)  # NCCL refuses two ranks on one GPU
    assert backend == "gloo"
    assert note is not None and "2 ranks" in note and "resources.gpus" in note


def test_spec_framework_and_horovod(tmp_path: Path) -> None:
    from gridml.spec.model import Spec

    base = {"name": "t", "payload": {"model": "m.py", "framework": "torch"},
            "data": {"train": "a:b", "validation": "a:c"},
            "training": {"epochs": 1}, "search": {"space": {"u": {"type": "int", "low": 1, "high": 2}}}}
    assert Spec.model_validate(base).payload.framework == "torch"
    with pytest.raises(ValueError, match="training.horovod: mpi is a Horovod launcher"):
        Spec.model_validate({**base, "training": {"epochs": 1, "horovod": "mpi"}})


def test_the_payload_error_line_survives_torchruns_summary() -> None:
    from gridml.executors.logs import last_error_line

    log = ("[payload r0] epoch 1 ...\n"
           "gridml payload error: input file /d/x.h5: truncated\n"
           "Traceback (most recent call last):\n"
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
           "  exitcode  : 3 (pid: 12)\n"
           "============================================================\n")
    assert last_error_line(log) == "gridml payload error: input file /d/x.h5: truncated"


def test_weighted_metrics_and_loss() -> None:
    """With event weights every metric is a weighted one, and the loss the weighted mean; a loss
    hook that averages cannot take weights and says so."""
    import torch

    from payloads.runtime import torch_model
    from payloads.runtime.errors import PayloadFailure

    out = torch.tensor([[2.0], [-1.0], [0.5], [-3.0]])
    y = torch.tensor([1.0, 1.0, 0.0, 0.0])
    w = torch.tensor([2.0, 1.0, 1.0, -0.5])
    per = torch_model.event_loss_fn("binary_crossentropy")(out, y)
    assert per.shape == (4,)
    m = torch_model.Metrics(["accuracy", "auc"], "binary_crossentropy", torch.device("cpu"))
    m.update(torch_model.weighted(per, w, "loss") / w.mean(), out, y, w)
    got = m.reduce(None)
    assert got["loss"] == pytest.approx(float((per * w).sum() / w.sum()))
    correct = torch.tensor([1.0, 0.0, 0.0, 1.0])  # 2 > 0, -1 < 0 wrong, 0.5 > 0 wrong, -3 right
    assert got["accuracy"] == pytest.approx(float((correct * w).sum() / w.sum()))
    with pytest.raises(PayloadFailure, match="one loss per event"):
        torch_model.weighted(per.mean(), w, "the model file's loss")
