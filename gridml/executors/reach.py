"""Which metrics API URL a trial may be given: one rule for every backend whose trials run on
other machines (Slurm compute nodes, grid worker nodes).

A trial on a remote node gets the API only where it can be reached from there: an address on
this machine's loopback (the embedded server, ``127.0.0.1``/``localhost``), an unspecified one
(``0.0.0.0``, ``::``) or a link-local one never can. The trial then has no API and its metrics go
to the spool (``outputs/metrics.jsonl``), which the controller reads: each cycle on a shared
filesystem (Slurm), when the outputs arrive (PanDA). Live metrics from worker nodes need a
`gridml serve` that the nodes can reach, named in the spec's ``backend.server`` (docs/grid.md,
docs/hpc.md). A local trial keeps whatever URL it was given.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING
from urllib.parse import urlparse

if TYPE_CHECKING:
    from gridml.spec import Spec

__all__ = ["live_channel_warning", "reachable_api_url", "unreachable_host"]

_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


def unreachable_host(url: str) -> str | None:
    """Why ``url`` cannot be reached from another machine (a few words), or None if it may be."""
    host = (urlparse(url).hostname or "").lower()
    if not host:
        return "no host"
    if host in _LOCAL_NAMES or host.endswith(".localhost"):
        return f"{host} is this machine's loopback"
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return None  # a host name: the nodes' resolver decides
    if addr.is_loopback:
        return f"{host} is a loopback address"
    if addr.is_unspecified:
        return f"{host} is not an address to connect to"
    if addr.is_link_local:
        return f"{host} is link-local"
    return None


def reachable_api_url(url: str | None, remote: bool) -> str | None:
    """``url`` if a trial of a backend that runs it ``remote``-ly (on other machines) can reach
    it, else None (the trial reports through its spool). Local trials keep ``url``."""
    if url is None or not remote:
        return url
    return None if unreachable_host(url) else url


# executors whose trials run on nodes that share no folder with the controller (grid worker
# nodes): there only an API the nodes reach carries the live channel (gridml/live.py)
_NO_SHARED_FOLDER = ("panda",)


def live_channel_warning(spec: Spec) -> str | None:
    """One line for `gridml validate` when early stopping and stall detection cannot act: the
    trials run where no folder is shared with the controller (PanDA worker nodes) and
    ``backend.server`` is not an API they can reach (``embedded``, a loopback address); None
    when they can."""
    backend = spec.backend
    if backend.executor not in _NO_SHARED_FOLDER:
        return None
    why = "embedded (on this machine)" if backend.server == "embedded" \
        else unreachable_host(backend.server)
    if why is None:
        return None
    where = why if backend.server == "embedded" else f"{backend.server} ({why})"
    acts = "early stopping (search.early_stopping) and stall detection" \
        if spec.search.early_stopping else "stall detection (backend.stall_timeout)"
    return (f"warning: backend.server: {where}: the {backend.executor} worker nodes share no folder "
            f"with the controller and cannot reach this API, so {acts} cannot act on their "
            "trials (their metrics arrive when each job ends); fix: set backend.server to the URL "
            "of a `gridml serve` reachable from the worker nodes")
