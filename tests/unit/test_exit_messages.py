"""A payload's exit in words: ranks' signals and the model file's own exit codes are named,
never torchrun's ``======`` ruler (gridml.executors.logs.exit_message)."""

from __future__ import annotations

from gridml.executors.logs import exit_message, last_error_line

TORCHRUN = """\
[rank0]: some warning
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
/x/payloads/train_torch.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-26_23:00:00
  host      : node1
  rank      : {rank} (local_rank: {rank})
  exitcode  : {code} (pid: 4242)
  error_file: <N/A>
  traceback : {tb}
============================================================
"""


def test_a_rank_killed_by_sigkill_is_named_with_its_likely_cause() -> None:
    log = TORCHRUN.format(rank=1, code=-9, tb="Signal 9 (SIGKILL) received by PID 4242")
    assert exit_message(1, log) == "rank 1 killed by SIGKILL (out of memory?)"
    log = TORCHRUN.format(rank=0, code=-15, tb="Signal 15 (SIGTERM) received by PID 4242")
    assert exit_message(1, log) == "rank 0 killed by SIGTERM"


def test_a_model_file_calling_sys_exit_is_named() -> None:
    log = TORCHRUN.format(rank=1, code=3, tb="To enable traceback see: https://x")
    assert exit_message(1, log) == "model file exited with code 3 (rank 1)"
    assert exit_message(3, "") == "model file exited with code 3"  # one process, no words
    assert exit_message(7, "epoch 1\n") == "model file exited with code 7: epoch 1"


def test_the_payloads_own_errors_keep_their_words() -> None:
    log = "stuff\ngridml payload error: input file f.h5 has no dataset x\n" + TORCHRUN.format(
        rank=0, code=3, tb="x")
    assert exit_message(3, log) == \
        "payload exited with code 3: gridml payload error: input file f.h5 has no dataset x"


def test_a_single_process_killed_by_a_signal_is_named() -> None:
    assert exit_message(137, "epoch 1 done\n") == "payload killed by SIGKILL (out of memory?)"


def test_ruler_lines_are_never_the_last_words() -> None:
    assert last_error_line("ValueError: bad\n======\n------\n") == "ValueError: bad"
