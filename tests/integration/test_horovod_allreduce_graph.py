"""The Keras payload traces Horovod's gradient allreduce without AutoGraph
(payloads.runtime.session._plain_graph_allreduce): under the real ``horovodrun -np 2 --gloo``,
two ranks fed different rows still take the same steps (the allreduce is in the graph), and the
wrapped function is a ``tf.function`` with AutoGraph off."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_payload_train import payload_env

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    import horovod.tensorflow as htf
    import horovod.tensorflow.keras as hvd
    from payloads.runtime.session import _plain_graph_allreduce

    hvd.init()
    tf.random.set_seed(1)
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.legacy.Adam(0.05))
    _plain_graph_allreduce(opt)
    model.compile(optimizer=opt, loss="mse")
    rng = np.random.default_rng(hvd.rank())  # each rank its own rows
    x = rng.normal(size=(64, 3)).astype("float32")
    y = (x.sum(axis=1, keepdims=True) * (1 + hvd.rank())).astype("float32")
    model.fit(x, y, epochs=3, batch_size=16, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    flat = np.concatenate([w.numpy().ravel() for w in model.trainable_variables])
    every = htf.allgather_object(flat.tolist())
    if hvd.rank() == 0:
        print("RESULT " + json.dumps({
            "size": hvd.size(), "weights": every,
            "autograph": opt._allreduce_grads._autograph}))
""")


def test_two_ranks_on_different_rows_stay_identical(tmp_path: Path) -> None:
    script = tmp_path / "allreduce.py"
    script.write_text(SCRIPT)
    # horovodrun as gridml starts it (payloads/hvdrun.py)
    cmd = [sys.executable, "-m", "payloads.hvdrun", "-np", "2", "-H", "localhost:2", "--gloo",
           sys.executable, str(script)]
    proc = subprocess.run(cmd, cwd=tmp_path, env=payload_env(), capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if "RESULT " in x)
    got = json.loads(line.split("RESULT ", 1)[1])
    assert got["size"] == 2 and got["autograph"] is False
    first, second = got["weights"]
    # trained on different rows: without the allreduce the ranks' weights part at the first step
    assert first == pytest.approx(second, abs=1e-6)
