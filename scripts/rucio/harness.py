"""Configure, bootstrap and provision a throw-away Rucio server for gridml's tests.

Runs inside the Rucio *server* environment made by scripts/rucio-server.sh (never in gridml's own).
Commands (STATE is the server's folder: database, configs, RSE storage, logs):

    harness.py configure STATE PORT   write server/client configs and passwords (once per STATE)
    harness.py setup STATE PORT       configure, then bootstrap, in one process
    harness.py bootstrap STATE        schema + base VO + root account, then the test account,
                                      scope, RSE and quota (idempotent)
    harness.py daemons STATE          judge-evaluator and abacus (account, rse, collection
                                      replica), one pass each (--run-once)

What it sets up (all names also in STATE/server.json for the tests):
  - SQLite database STATE/rucio.db (or PostgreSQL: $GRIDML_RUCIO_DB_URL), schema from Rucio's own
    helpers (rucio.db.sqla.util);
  - root account (userpass) and an ordinary account ``jdoe`` (userpass) with scope ``user.jdoe``;
  - a POSIX ``file`` RSE ``TEST_USERDISK`` in STATE/rse (the generic policy lets ordinary accounts
    add replicas only on RSEs ending USERDISK/SCRATCHDISK/LOCALGROUPDISK/MOCK), jdoe's quota 10 GB;
  - a second RSE ``TINY_SCRATCHDISK`` with a 1 kB quota for jdoe, to test quota errors;
  - the client config (STATE/client/rucio.cfg) has no [database] section: with one, rucio's client
    code switches to server mode; its token file stays in STATE/client (rucio's default is a
    folder in /tmp shared by every server the account name ever talked to).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path

ACCOUNT, SCOPE = "jdoe", "user.jdoe"
RSES = {"TEST_USERDISK": 10 * 10**9, "TINY_SCRATCHDISK": 1000}  # RSE -> jdoe's quota (bytes)

SERVER_CFG = """[common]
logdir = {state}/logs
loglevel = WARNING
[database]
default = {db_url}
pool_reset_on_return = rollback
echo = 0
[bootstrap]
userpass_identity = root
userpass_pwd = {root_password}
userpass_email = root@localhost
x509_identity =
x509_email =
gss_identity =
gss_email =
ssh_identity =
ssh_email =
[alembic]
cfg = {state}/server/alembic.ini
[api]
endpoints_remove = traces
[policy]
permission = generic
schema = generic
lfn2pfn_algorithm_default = hash
[cache]
url = 127.0.0.1:1
[monitor]
enable_metrics = False
"""

CLIENT_CFG = """[common]
logdir = {state}/logs
loglevel = WARNING
[client]
rucio_host = http://127.0.0.1:{port}
auth_host = http://127.0.0.1:{port}
auth_type = userpass
username = {user}
password = {password}
account = {account}
request_retries = 2
auth_token_file_path = {state}/client/{user}.token
"""

ALEMBIC_INI = """[alembic]
script_location = {migrations}
sqlalchemy.url = {db_url}
[loggers]
keys = root
[handlers]
keys = console
[formatters]
keys = generic
[logger_root]
level = WARN
handlers = console
[handler_console]
class = StreamHandler
args = (sys.stderr,)
formatter = generic
[formatter_generic]
format = %%(levelname)s [%%(name)s] %%(message)s
"""


def configure(state: Path, port: int) -> None:
    """Write configs (passwords are made once and kept in STATE/server.json)."""
    import importlib.util

    spec = importlib.util.find_spec("rucio")  # no import: rucio reads its config when imported
    assert spec and spec.submodule_search_locations, "rucio (server) is not installed here"
    info_path = state / "server.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {
        "root_password": secrets.token_urlsafe(12), "password": secrets.token_urlsafe(12)}
    info.update(port=port, url=f"http://127.0.0.1:{port}", account=ACCOUNT, scope=SCOPE,
                rse="TEST_USERDISK", tiny_rse="TINY_SCRATCHDISK", state=str(state),
                client_config=str(state / "client" / "rucio.cfg"),
                root_config=str(state / "client" / "root.cfg"),
                server_config=str(state / "server" / "rucio.cfg"))
    migrations = Path(spec.submodule_search_locations[0]) / "db" / "sqla" / "migrate_repo"
    for sub in ("server", "client", "logs", "rse"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    db_url = os.environ.get("GRIDML_RUCIO_DB_URL") or f"sqlite:///{state}/rucio.db"
    info["database"] = db_url.split(":", 1)[0]
    info_path.write_text(json.dumps(info, indent=2))
    fmt = dict(state=state, port=port, migrations=migrations, root_password=info["root_password"],
               db_url=db_url)
    (state / "server" / "rucio.cfg").write_text(SERVER_CFG.format(**fmt))
    (state / "server" / "alembic.ini").write_text(ALEMBIC_INI.format(**fmt))
    (state / "client" / "rucio.cfg").write_text(CLIENT_CFG.format(
        **fmt, user=ACCOUNT, password=info["password"], account=ACCOUNT))
    (state / "client" / "root.cfg").write_text(CLIENT_CFG.format(
        **fmt, user="root", password=info["root_password"], account="root"))
    info_path.write_text(json.dumps(info, indent=2))


def bootstrap(state: Path) -> None:
    """Schema and root account (first time only), then the test account, scope and RSEs."""
    from rucio.db.sqla.util import build_database, create_base_vo, create_root_account

    if not (state / ".schema").exists():
        build_database()
        create_base_vo()
        create_root_account()
        (state / ".schema").touch()
    info = json.loads((state / "server.json").read_text())
    _provision(state, info["password"])


def _provision(state: Path, password: str) -> None:
    from rucio.common.exception import Duplicate
    from rucio.gateway import account, account_limit, identity, rse, scope

    steps = [
        lambda: account.add_account(ACCOUNT, "USER", "jdoe@localhost", issuer="root"),
        lambda: identity.add_account_identity(ACCOUNT, "userpass", ACCOUNT, "jdoe@localhost",
                                              issuer="root", default=True, password=password),
        lambda: scope.add_scope(SCOPE, ACCOUNT, issuer="root"),
    ]
    for name in RSES:
        steps += _rse_steps(state, name)
    for step in steps:
        try:
            step()
        except Duplicate:
            pass
    for name, quota in RSES.items():
        account_limit.set_local_account_limit(ACCOUNT, name, quota, issuer="root")
    del rse  # imported to fail early if the gateway layout changes


def _rse_steps(state: Path, name: str) -> list:
    from rucio.gateway import rse

    prefix = state / "rse" / name
    prefix.mkdir(parents=True, exist_ok=True)
    proto = {"scheme": "file", "hostname": "localhost", "port": 0, "prefix": str(prefix),
             "impl": "rucio.rse.protocols.posix.Default",
             "domains": {"lan": {"read": 1, "write": 1, "delete": 1},
                         "wan": {"read": 1, "write": 1, "delete": 1,
                                 "third_party_copy_read": 1, "third_party_copy_write": 1}}}
    return [lambda: rse.add_rse(name, issuer="root"),
            lambda: rse.add_protocol(name, issuer="root", data=proto),
            lambda: rse.add_rse_attribute(name, "type", "SCRATCHDISK", issuer="root")]


def daemons() -> None:
    """One pass of the daemons that bring rules, dataset replicas and account usage up to date,
    in one process (each rucio-* daemon script would pay Rucio's import time again)."""
    from rucio.daemons.abacus import account, collection_replica, rse
    from rucio.daemons.judge import evaluator

    evaluator.run(once=True)
    for daemon in (account, rse, collection_replica):
        daemon.run(once=True)


if __name__ == "__main__":
    cmd, state_arg = sys.argv[1], Path(sys.argv[2]).resolve()
    if cmd == "configure":
        configure(state_arg, int(sys.argv[3]))
    elif cmd == "setup":  # configure + bootstrap in one process (one import of rucio)
        configure(state_arg, int(sys.argv[3]))
        os.environ["RUCIO_CONFIG"] = str(state_arg / "server" / "rucio.cfg")
        bootstrap(state_arg)
    elif cmd == "bootstrap":
        bootstrap(state_arg)
    elif cmd == "daemons":
        daemons()
    else:
        sys.exit(f"unknown command {cmd!r}: use configure, setup, bootstrap or daemons")
