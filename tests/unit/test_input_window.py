"""The shuffle window in blocks (session.shuffle_window): the option as given for the usual
chunks, raised for small ones to >= 32,768 rows, never past 64 MiB."""

from __future__ import annotations

from payloads.runtime.session import WINDOW_MAX_BYTES, WINDOW_MIN_ROWS, shuffle_window


def test_window_grows_for_small_chunks_within_its_byte_cap() -> None:
    assert shuffle_window(8, 4096, 44) == 8  # the demo's chunks: unchanged
    assert shuffle_window(16, 20, 44) == WINDOW_MIN_ROWS // 20 + 1  # 20-row chunks: 1,639 blocks
    assert shuffle_window(8, 20, 44) * 20 >= WINDOW_MIN_ROWS
    big_rows = 200_000  # 200 kB a row (an image): 64 MiB of them, not 32,768
    w = shuffle_window(8, 20, big_rows)
    assert w == WINDOW_MAX_BYTES // (20 * big_rows) and w * 20 < WINDOW_MIN_ROWS
    assert shuffle_window(8, 4096, 10**7) == 8  # never below the option
