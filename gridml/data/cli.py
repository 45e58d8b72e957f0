"""``gridml data``: put, ls and get DIDs on the local store or Rucio (docs/data.md).

The ``--json`` shapes printed here are a public interface (other tools and the tests parse them):
change them only together with docs/data.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gridml.data import open_data_manager
from gridml.data.base import parse_did
from gridml.errors import UsageError
from gridml.layout import writable_folder

if TYPE_CHECKING:
    from gridml.data.base import DataManager, FileInfo

data_app = typer.Typer(help="Datasets and files by DID (scope:name): put, ls, get.",
                       no_args_is_help=True)

BackendOpt = Annotated[str | None, typer.Option(
    "--backend", "-b", help="local | rucio (default: $GRIDML_DATA_BACKEND or local)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output (docs/data.md)")]


def _open(backend: str | None) -> DataManager:

    return open_data_manager(backend)


def file_json(f: FileInfo) -> dict[str, Any]:
    """One file as the ``--json`` outputs show it."""
    return {"did": str(f.did), "scope": f.did.scope, "name": f.did.name, "bytes": f.bytes,
            "adler32": f.adler32, "replicas": list(f.replicas), "metadata": dict(f.metadata)}


def _print_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, sort_keys=True))


def _parse_meta(items: list[str]) -> dict[str, Any]:
    """``key=value`` pairs; a value that parses as JSON (number, true, [..]) is taken as such."""
    meta: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--meta {item!r}: expected key=value", hint="e.g. --meta trial=3")
        try:
            meta[key] = json.loads(value)
        except json.JSONDecodeError:
            meta[key] = value
    return meta


@data_app.command("put")
def put(files: Annotated[list[Path], typer.Argument(help="files to upload", show_default=False)],
        dataset: Annotated[str, typer.Option("--dataset", "-d", help="SCOPE:NAME to upload into")],
        rse: Annotated[str | None, typer.Option(help="RSE to write to (rucio)")] = None,
        meta: Annotated[list[str] | None, typer.Option(
            "--meta", help="key=value metadata set on each file (repeatable)")] = None,
        backend: BackendOpt = None, as_json: JsonOpt = False) -> None:
    """Upload FILE... into the dataset SCOPE:NAME (created if missing) as SCOPE:FILENAME."""
    dm = _open(backend)
    infos = dm.upload(list(files), dataset, metadata=_parse_meta(meta or []), rse=rse)
    if as_json:
        _print_json({"backend": dm.name, "dataset": dataset,
                     "files": [file_json(f) for f in infos]})
        return
    _table(f"{dataset}: {len(infos)} file(s) stored in {dm.where}", infos)


@data_app.command("ls")
def ls(did: Annotated[str, typer.Argument(help="SCOPE:NAME, or SCOPE:PATTERN with * and ?")],
       backend: BackendOpt = None, as_json: JsonOpt = False,
       limit: Annotated[int | None, typer.Option(
           "--limit", min=0, help="list at most this many files (default: all with --json, "
           "else 1000)")] = None,
       offset: Annotated[int, typer.Option("--offset", min=0, help="skip this many files")] = 0,
       ) -> None:
    """List a DID's files (sizes, adler32, replicas), or the DIDs matching a pattern."""
    dm = _open(backend)
    if "*" in did or "?" in did:
        _ls_pattern(dm, did, as_json)
        return

    parse_did(did)
    type_, files, meta = dm.did_type(did), dm.list_files(did), dm.get_metadata(did)
    end = None if limit is None and as_json else offset + (1000 if limit is None else limit)
    page = files[offset:end]  # a page of a dataset of thousands of files (totals: all of them)
    if as_json:
        _print_json({"backend": dm.name, "did": did, "type": type_, "metadata": meta,
                     "total_bytes": sum(f.bytes for f in files), "total_files": len(files),
                     "offset": offset, "files": [file_json(f) for f in page]})
        return
    _table(f"{type_} {did}: {len(files)} file(s), {_human(sum(f.bytes for f in files))}", page)
    if offset + len(page) < len(files):
        print(f"files {offset + 1}-{offset + len(page)} of {len(files)}: the next ones with "
              f"--offset {offset + len(page)}")


def _ls_pattern(dm: DataManager, pattern: str, as_json: bool) -> None:
    scope, _, name = pattern.partition(":")
    found = dm.list_dids(scope, name)
    if as_json:
        _print_json({"backend": dm.name, "pattern": pattern,
                     "dids": [{"did": str(d), "type": t} for d, t in found]})
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"{pattern} in {dm.where}: {len(found)} DID(s)")
    table = Table()
    table.add_column("DID")
    table.add_column("type")
    for d, t in found:
        table.add_row(str(d), t)
    console.print(table)


@data_app.command("get")
def get(did: Annotated[str, typer.Argument(help="SCOPE:NAME (file, dataset or container)")],
        output: Annotated[Path, typer.Option("--output", "-o", help="directory to write into")],
        backend: BackendOpt = None, as_json: JsonOpt = False) -> None:
    """Download a DID's files into DIR (flat, by file name), verifying adler32."""
    writable_folder(output, "-o")
    dm = _open(backend)
    paths = dm.download(did, output)
    if as_json:
        sums = {f.did.name: f.adler32 for f in dm.list_files(did)}
        _print_json({"backend": dm.name, "did": did, "dest": str(output.resolve()),
                     "files": [{"name": p.name, "path": str(p.resolve()),
                                "adler32": sums.get(p.name), "bytes": p.stat().st_size}
                               for p in paths]})
        return
    typer.echo(f"{did}: {len(paths)} file(s) in {output}")
    for p in paths:
        typer.echo(f"  {p}")


def _table(title: str, files: list[FileInfo]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(title)
    table = Table()
    for col, justify in (("DID", "left"), ("size", "right"), ("adler32", "left"),
                         ("replicas", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for f in files:
        table.add_row(str(f.did), _human(f.bytes), f.adler32, ", ".join(f.replicas))
    console.print(table)


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"
