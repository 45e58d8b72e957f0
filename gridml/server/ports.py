"""A TCP port that is free now and that no outgoing connection of this machine will take.

A daemon the test scripts start (slurmctld, slurmdbd, MariaDB, PostgreSQL, the Rucio server) is
told its port before it binds it, sometimes seconds before (slurmdbd waits for MariaDB). A port
from the kernel's ephemeral range (``bind(("", 0))``) can meanwhile become the local end of one
of the suite's many outgoing connections, and the daemon then dies with "Address already in
use" (seen once: slurmdbd, three Slurm tests lost their cluster). So the port is drawn at random
below that range (``/proc/sys/net/ipv4/ip_local_port_range``), which the kernel never hands to
outgoing connections, and checked free on all addresses. Where the range leaves no room below
it, the kernel's choice is taken as before.

:func:`pick` serves :class:`gridml.server.process.ServerProcess` (a `gridml serve` it starts, and
starts again on the same port after a kill); the test scripts run this file by its path,
``python3 gridml/server/ports.py`` (it imports only the standard library, so any python3 runs
it without gridml installed).
"""

from __future__ import annotations

import random
import socket

LOWEST = 10000  # below: well-known and registered services this machine may run


def ephemeral_low(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_now(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def pick() -> int:
    high = ephemeral_low() - 1
    if high - LOWEST >= 1000:
        for port in random.sample(range(LOWEST, high + 1), 200):
            if free_now(port):
                return port
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    print(pick())
