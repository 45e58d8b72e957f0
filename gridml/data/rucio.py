"""The ``rucio`` DataManager: rucio-clients against a real Rucio server.

Configuration is Rucio's own: ``RUCIO_CONFIG`` (or rucio.cfg in Rucio's usual places) and
``RUCIO_ACCOUNT``; gridml adds the RSE to write to (``--rse`` or ``$GRIDML_RUCIO_RSE``). Every
client call goes through :func:`gridml.data.rucio_errors.call` (retries, error translation).

Uploads: each file is copied to the RSE first and registered only after the copy is verified
(``register_after_upload``), so no DID is ever registered without its file. Before copying anything
the whole batch is checked (files readable, names valid, existing DIDs with the same adler32 are
no-ops, with another adler32 refused), so a user mistake registers nothing. If the server fails in
the middle of a batch, files already done stay registered, each complete, and a retry skips them.
Creating the dataset also creates its rule (copies=1 on the upload RSE, optional lifetime).

Metadata goes to the server's metadata plugins; keys the server cannot take (its JSON plugin needs
a PostgreSQL/MySQL/Oracle database) are kept by gridml (:mod:`gridml.data.rucio_meta`).
"""

from __future__ import annotations

import configparser
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from gridml.data.base import DID, FileInfo, adler32_file, parse_did
from gridml.data.common import empty_error, is_verified, resolve_pattern
from gridml.data.rucio_errors import RucioLog, call, log
from gridml.data.rucio_upload import upload_batch
from gridml.data.rucio_meta import SideMetadata
from gridml.errors import ChecksumError, DataError, NotFoundError, UsageError

T = TypeVar("T")
Progress = Callable[[int, int, int, int], None]  # files done, files total, bytes done, bytes total


class RucioStore:
    """A :class:`gridml.data.base.DataManager` on a Rucio server (see the module docstring)."""

    name = "rucio"

    def __init__(self, *, rse: str | None = None, lifetime: int | None = None) -> None:
        _refuse_server_config()
        from gridml.extras import require

        require("rucio.client", "grid", feature="backend.data: rucio", error=DataError)
        from rucio.client import Client
        from rucio.common.config import clean_cached_config

        clean_cached_config()  # rucio caches its config per process: honour today's RUCIO_CONFIG

        self.default_rse = rse or os.environ.get("GRIDML_RUCIO_RSE") or None
        self.lifetime = lifetime or _env_seconds("GRIDML_RUCIO_LIFETIME")
        self.client = call(lambda: Client(logger=_client_logger()), action="connect to", did=None,
                           where="Rucio", account=os.environ.get("RUCIO_ACCOUNT"))
        self._server_json_meta: bool | None = None  # learnt on first set_metadata
        _forget_rse_cache()

    @property
    def where(self) -> str:
        return f"Rucio at {self.client.host} (account {self.client.account})"

    def call(self, fn: Callable[[], T], action: str, did: DID | str | None = None) -> T:
        return call(fn, action=action, did=did, where=self.where, account=self.client.account)

    # -- reading ---------------------------------------------------------------------------
    def exists(self, did: str) -> bool:
        d = parse_did(did)
        try:
            self.call(lambda: self.client.get_did(d.scope, d.name), "look up", d)
        except NotFoundError:
            return False
        return True

    def did_type(self, did: str) -> str:
        d = parse_did(did)
        return str(self.call(lambda: self.client.get_did(d.scope, d.name), "look up", d)
                   ["type"]).lower()

    def list_files(self, did: str) -> list[FileInfo]:
        d = parse_did(did)
        rows = self.call(lambda: list(self.client.list_files(d.scope, d.name)), "list files of", d)
        reps = self._replicas(d) if rows else {}
        files = [FileInfo(DID(r["scope"], r["name"]), int(r["bytes"]), _hex8(r["adler32"]),
                          replicas=reps.get((r["scope"], r["name"]), [])) for r in rows]
        meta = self._bulk_metadata([f.did for f in files]) if files else {}
        for f in files:
            f.metadata = meta.get(f.did, {})
        return files

    def resolve(self, did: str) -> list[FileInfo]:
        """Files with sizes, adler32 and the RSEs holding an available replica; refuses an unknown
        or empty DID and files without an available replica (naming them and what was found)."""
        d = parse_did(did)
        files = self.list_files(did)
        if not files:
            raise empty_error(d, self.did_type(did))
        missing = [str(f.did) for f in files if not f.replicas]
        if missing:
            raise DataError(f"{d}: {len(missing)} of {len(files)} file(s) have no available "
                            f"replica on {self.where}: {', '.join(missing[:5])}",
                            hint="wait for the rules to be satisfied (`rucio list-rules`), or "
                                 "re-upload the files")
        return files

    def _replicas(self, d: DID) -> dict[tuple[str, str], list[str]]:
        """(scope, name) -> RSEs with an AVAILABLE replica, for every file under ``d``."""
        reps = self.call(lambda: list(self.client.list_replicas(
            [{"scope": d.scope, "name": d.name}], schemes=None)), "list replicas of", d)
        return {(r["scope"], r["name"]): sorted(rse for rse, st in r.get("states", {}).items()
                                                 if st == "AVAILABLE") for r in reps}

    def list_dids(self, scope: str, pattern: str = "*") -> list[tuple[DID, str]]:
        scope, pattern = resolve_pattern(scope, pattern)
        rows = self.call(lambda: list(self.client.list_dids(
            scope, {"name": pattern}, did_type="all", long=True)), "list DIDs in", scope)
        found = [(DID(r["scope"], r["name"]), str(r["did_type"]).lower()) for r in rows]
        return sorted(found, key=lambda pair: str(pair[0]))

    def get_metadata(self, did: str) -> dict[str, Any]:
        """User metadata: the server's JSON plugin (when it has one), else gridml's record."""
        d = parse_did(did)
        self.call(lambda: self.client.get_did(d.scope, d.name), "look up", d)
        return self._bulk_metadata([d]).get(d, {})

    def _bulk_metadata(self, dids: list[DID]) -> dict[DID, dict[str, Any]]:
        """User metadata of many DIDs in one call per 500 (Rucio's bulk JSON-plugin query)."""
        out: dict[DID, dict[str, Any]] = {}
        for i in range(0, len(dids) if self._server_json_meta is not False else 0, 500):
            chunk = [{"scope": d.scope, "name": d.name} for d in dids[i:i + 500]]
            try:
                rows = self.call(lambda c=chunk: list(  # type: ignore[misc]
                    self.client.get_metadata_bulk(c, plugin="JSON")), "read metadata of", dids[i])
            except DataError:  # no JSON plugin on this server (e.g. SQLite behind it)
                self._server_json_meta = False
                break
            for r in rows:
                did = DID(r.pop("scope"), r.pop("name"))
                out[did] = r
        if self._server_json_meta is False:
            side = self._side()
            out = {d: side.get(d) for d in dids}
        return out

    # -- stage-in / download -----------------------------------------------------------------
    def stage_in(self, did: str, dest: Path, *, progress: Progress | None = None) -> list[FileInfo]:
        """Download ``did``'s files into ``dest`` (flat), verifying adler32; files already there
        and verified are reused. Downloads go in groups (``GROUP_FILES`` files or
        ``GROUP_BYTES`` bytes); ``progress(files_done, files, bytes_done, bytes)`` after each."""
        files = self.resolve(did)
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        for f in files:
            f.path = dest / f.did.name
        todo = [f for f in files if not is_verified(f.path, f.adler32, f.bytes)]  # type: ignore[arg-type]
        done = [f for f in files if f not in todo]
        total = sum(f.bytes for f in files)
        for group in _groups(todo):
            self._download_group(group, dest)
            done += group
            _report(progress, len(done), len(files), sum(f.bytes for f in done), total, did)
        return files

    def download(self, did: str, dest: Path) -> list[Path]:
        return [f.path for f in self.stage_in(did, dest) if f.path is not None]

    def _download_group(self, group: list[FileInfo], dest: Path) -> None:
        from rucio.client.downloadclient import DownloadClient

        items = [{"did": str(f.did), "base_dir": str(dest), "no_subdir": True} for f in group]
        dl = DownloadClient(client=self.client, logger=RucioLog(), tracing=False)
        self.call(lambda: dl.download_dids(items, num_threads=2), "download", group[0].did)
        for f in group:
            got = adler32_file(dest / f.did.name)
            if got != f.adler32:
                raise ChecksumError(f"{f.did}: downloaded copy has adler32 {got}, Rucio says "
                                    f"{f.adler32}", hint="retry; if it persists the replica is "
                                    "corrupt: tell the RSE's administrators")

    # -- writing -----------------------------------------------------------------------------
    def add_dataset(self, did: str, *, metadata: dict[str, Any] | None = None,
                    rse: str | None = None) -> None:
        """Create dataset ``did`` (no-op if it is one already); with ``rse``, a rule there."""
        d = parse_did(did)
        rules = [{"account": self.client.account, "copies": 1, "rse_expression": rse,
                  "grouping": "DATASET", "lifetime": self.lifetime}] if rse else None
        self._ensure(d, "dataset", lambda: self.client.add_dataset(d.scope, d.name, rules=rules))
        if metadata:
            self.set_meta(d, metadata)

    def add_container(self, did: str, children: list[str]) -> None:
        c, kids = parse_did(did), [parse_did(k) for k in children]
        self._ensure(c, "container", lambda: self.client.add_container(c.scope, c.name))
        if kids:
            content = [{"scope": k.scope, "name": k.name} for k in kids]
            self.call(lambda: self.client.attach_dids(c.scope, c.name, content), "attach to", c)

    def add_rule(self, did: str, rse_expression: str, *, lifetime: int | None = None,
                 copies: int = 1) -> str:
        """A replication rule for ``did`` (e.g. the study's output dataset); returns its id.
        An identical rule that exists already is reused."""
        d = parse_did(did)
        for rule in self.call(lambda: list(self.client.list_did_rules(d.scope, d.name)),
                               "list rules of", d):
            if rule["rse_expression"] == rse_expression and rule["account"] == self.client.account:
                return str(rule["id"])
        ids = self.call(lambda: self.client.add_replication_rule(
            [{"scope": d.scope, "name": d.name}], copies, rse_expression, lifetime=lifetime),
            "add a rule for", d)
        return str(ids[0])

    def set_metadata(self, did: str, metadata: dict[str, Any]) -> None:
        """Set keys on the server where its plugins take them, else in gridml's record (all the
        keys of one server go to one place, learnt from the first try)."""
        d = parse_did(did)
        self.call(lambda: self.client.get_did(d.scope, d.name), "look up", d)
        self.set_meta(d, metadata)

    def set_meta(self, d: DID, metadata: dict[str, Any]) -> None:
        if self._server_json_meta is not False:
            try:
                self.call(lambda: self.client.set_metadata_bulk(d.scope, d.name, metadata),
                           "set metadata on", d)
                self._server_json_meta = True
                return
            except DataError as err:
                if "No plugin manages" not in str(err):
                    raise
                self._server_json_meta = False
                log.info("%s takes no custom metadata keys; gridml keeps them", self.where)
        self._side().merge(d, metadata)

    def upload(self, files: list[Path], dataset: str, *, metadata: dict[str, Any] | None = None,
               names: list[str] | None = None, rse: str | None = None) -> list[FileInfo]:
        """Upload ``files`` into ``dataset`` as ``scope:names[i]`` (see the module docstring)."""
        return upload_batch(self, [Path(f) for f in files], parse_did(dataset),
                            names=names, rse=self._rse(rse), metadata=metadata or {})

    # -- internals ---------------------------------------------------------------------------
    def _rse(self, rse: str | None) -> str:
        chosen = rse or self.default_rse
        if not chosen:
            raise DataError("no RSE chosen to upload to",
                            hint="pass --rse RSE or set $GRIDML_RUCIO_RSE (`rucio list-rses`)")
        return chosen

    def _ensure(self, d: DID, kind: str, create: Callable[[], Any]) -> None:
        """Create collection ``d`` unless it exists as ``kind`` (also if another process just
        made it); a DID of another type under that name is refused."""
        found = self._type_or_none(d)
        if found is None:
            try:
                self.call(create, f"create {kind}", d)
                return
            except DataError:
                found = self._type_or_none(d)
                if found is None:
                    raise
        if found != kind:
            raise DataError(f"{d} already exists as a {found}, not a {kind}",
                            hint=f"choose another name for the {kind}")

    def _type_or_none(self, d: DID) -> str | None:
        try:
            info = self.call(lambda: self.client.get_did(d.scope, d.name), "look up", d)
        except NotFoundError:
            return None
        return str(info["type"]).lower()

    def _side(self) -> SideMetadata:
        from gridml.settings import settings

        return SideMetadata(settings().home / "rucio-metadata.sqlite", str(self.client.host))


def _env_seconds(name: str) -> int | None:
    value = os.environ.get(name)
    if not value:
        return None
    if not value.isdigit():
        raise UsageError(f"${name}={value!r} is not a number of seconds",
                         hint=f"e.g. {name}=2592000 (30 days), or unset it for no lifetime")
    return int(value)


def _forget_rse_cache() -> None:
    """rucio's client caches RSE descriptions per process by RSE *name* (15 min), whatever the
    server: a new store starts afresh, so two servers with an RSE of the same name never mix."""
    from rucio.rse import rsemanager

    region = getattr(rsemanager, "RSE_REGION", None)
    if region is not None:
        region.invalidate(hard=True)


def _client_logger() -> logging.Logger:
    """rucio's client logs every failed connection as ERROR before we retry; keep it quiet
    (gridml reports retries and the final error itself). GRIDML_RUCIO_DEBUG=1 shows it all."""
    logger = logging.getLogger("gridml.data.rucio.client")
    logger.setLevel(logging.DEBUG if os.environ.get("GRIDML_RUCIO_DEBUG") else logging.CRITICAL)
    return logger


def _hex8(value: Any) -> str:
    return str(value or "").lower().zfill(8)


GROUP_FILES, GROUP_BYTES = 16, 1 << 30


def _groups(files: list[FileInfo]) -> list[list[FileInfo]]:
    """Consecutive groups of at most GROUP_FILES files / about GROUP_BYTES bytes."""
    groups: list[list[FileInfo]] = [[]]
    for f in files:
        if groups[-1] and (len(groups[-1]) >= GROUP_FILES
                           or sum(g.bytes for g in groups[-1]) + f.bytes > GROUP_BYTES):
            groups.append([])
        groups[-1].append(f)
    return [g for g in groups if g]


def _report(progress: Progress | None, i: int, n: int, done: int, total: int, did: str) -> None:
    log.info("stage-in %s: %d/%d files, %d/%d bytes", did, i, n, done, total)
    if progress is not None:
        progress(i, n, done, total)


def _refuse_server_config() -> None:
    """A config with [database] turns rucio's client code into server code: refuse it early."""
    path = os.environ.get("RUCIO_CONFIG")
    if not path:
        return
    cfg = configparser.ConfigParser(interpolation=None)
    if not cfg.read(path):
        raise DataError(f"RUCIO_CONFIG={path} cannot be read",
                        hint="point RUCIO_CONFIG at your client rucio.cfg")
    if cfg.has_section("database"):
        raise DataError(f"{path} has a [database] section: that is a server configuration",
                        hint="give the client a rucio.cfg with only [common]/[client] sections")
