"""The `gridml` command line. Thin: parse, call, print; errors in one line (traceback with --debug)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from gridml.errors import GridmlError, NotFoundError, UsageError
from gridml.layout import writable_folder

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode="markdown",
                  help="Hyperparameter campaigns for HEP neural networks: one machine, HPC, grid.")
out = Console()
err = Console(stderr=True)
_state: dict[str, Any] = {"debug": False}


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="show tracebacks"),
          server: str | None = typer.Option(None, "--server", envvar="GRIDML_SERVER",
                                               help="URL of a `gridml serve` (default: the local store)"),
          token: str | None = typer.Option(None, "--token", envvar="GRIDML_TOKEN",
                                              help="study token for a remote server")) -> None:
    _state.update(debug=debug, server=server, token=token)


def _reader() -> Any:
    """Where studies are read from: the remote server named by --server, or the local store."""
    from gridml.store import open_store

    return open_store(_state.get("server"), token=_state.get("token"))


def _dry_run_reader(server: str) -> Any:
    """The server's store for a dry run; None (and a warning) when it cannot be reached: a
    dry run previews offline too (then an earlier study of the same name is not seen)."""
    from gridml.store import open_store

    reader = open_store(server, token=_state.get("token"))
    try:
        reader.list_studies()
    except GridmlError as exc:
        err.print(f"[yellow]warning[/]: the dry run reads no store: {exc.message}",
                  highlight=False)
        reader.close()
        return None
    return reader


def _data_manager(backend: str | None) -> Any:
    from gridml.data import open_data_manager

    return open_data_manager(backend)


def _load(spec: Path, check_data: bool = True) -> Any:
    from gridml.spec import load_spec
    from gridml.spec.loader import read_yaml

    backend = None
    if check_data:  # the data backend the spec names checks its DIDs
        data, _ = read_yaml(spec)
        backend = (data.get("backend") or {}).get("data") if isinstance(data.get("backend"), dict) else None
    dm = _data_manager(backend) if check_data else None
    loaded = load_spec(spec, did_exists=dm.exists if dm else None)
    if loaded.spec.output.rse or loaded.spec.output.lifetime:
        from gridml.controller import data_manager_for

        dm = data_manager_for(loaded.spec)
    return loaded, dm


def _print_json(doc: Any) -> None:
    out.print_json(json.dumps(doc, default=str)) if out.is_terminal else print(json.dumps(doc, indent=2, default=str))


@app.command()
def validate(spec: Path = typer.Argument(..., help="training spec (YAML)")) -> None:
    """Check a spec: types, ranges, model file, DIDs, and the model built on one batch of the
    data (when the payload's framework is importable here). Exit 2 with every problem listed."""
    loaded, dm = _load(spec)
    _build_check(loaded, dm)
    _live_channel_warning(loaded.spec)  # PanDA without a reachable server: what cannot act
    out.print(f"[green]ok[/]: {spec}: study {loaded.spec.name!r}, {len(loaded.spec.search.space)} "
              f"parameters, {loaded.spec.search.algorithm} search, up to {loaded.spec.search.max_trials} trials")


def _live_channel_warning(spec: Any) -> None:
    """One warning line where early stopping and stall detection cannot act (gridml/executors/
    reach.py: PanDA worker nodes without a reachable backend.server)."""
    from gridml.executors.reach import live_channel_warning

    warning = live_channel_warning(spec)
    if warning:
        err.print(warning, highlight=False, markup=False, soft_wrap=True)


def _build_check(loaded: Any, dm: Any, said_off: bool = True) -> None:
    """The model built on one batch of the data, in the payload's interpreter
    (gridml/executors/probe.py): a problem is a SpecError (exit 2), a skip one line."""
    from gridml.errors import SpecError
    from gridml.executors.probe import build_check
    from gridml.spec.loader import located, read_yaml

    verdict = build_check(loaded, dm)
    if verdict.skipped is not None and not said_off and verdict.skipped.startswith("$"):
        return  # $GRIDML_BUILD_CHECK=0: the user turned it off; submit need not say so
    if verdict.problem is not None:
        field, message = verdict.problem
        _, lines = read_yaml(loaded.path)
        raise SpecError([located(loaded.path, lines, tuple(field.split(".")), message)])
    if verdict.skipped is not None:
        err.print(f"build check skipped: {verdict.skipped}", highlight=False, markup=False)
    else:
        out.print(f"build check: {verdict.ok} ({verdict.seconds:.0f} s)", highlight=False,
                  markup=False)


@app.command()
def init(name: str = typer.Argument(..., help="study name"),
         output: Path | None = typer.Option(None, "-o", "--output", help="default NAME.yaml"),
         framework: str = typer.Option("keras", "--framework", "-f",
                                       help="keras (Horovod) | torch (torch.distributed)")) -> None:
    """Write a commented spec to start from (templates/spec.yaml) and a starter model file beside
    it (models/NAME.py, kept if it exists): with `gridml demo-data` it runs as it is."""
    import re

    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name):
        raise UsageError(f"study name {name!r}: use lowercase letters, digits and ._- (e.g. tau-id)")
    if framework not in ("keras", "torch"):
        raise UsageError(f"--framework {framework!r}: use keras or torch")
    path = output or Path(f"{name}.yaml")
    if path.exists():
        raise UsageError(f"{path} exists; choose another -o or remove it")
    from importlib.resources import files

    templates = files("gridml") / "templates"  # package data: in the wheel too
    model = path.parent / "models" / f"{name}.py"
    text = templates.joinpath("spec.yaml").read_text().replace("name: my-study", f"name: {name}", 1)
    text = re.sub(r"(?m)^  model: models/mlp\.py +#", f"  model: models/{name}.py".ljust(40) + "#",
                  text, count=1).replace(":quickstart.out}", f":{name}.out}}", 1)  # its own
    if framework == "torch":
        text = (text.replace("payload:\n", "payload:\n  framework: torch\n", 1)
                .replace("# per Horovod rank", "# per rank", 1)
                .replace("# Horovod ranks per trial", "# ranks per trial (torchrun)", 1))
    wrote = [str(path)]
    if not model.exists():
        model.parent.mkdir(parents=True, exist_ok=True)
        model.write_text(templates.joinpath("models", f"{framework}_mlp.py").read_text())
        wrote.append(str(model))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    kept = "" if len(wrote) == 2 else f" (kept the model file {model}: it existed)"
    out.print(f"wrote {' and '.join(wrote)}{kept}: set data.train/validation (`gridml demo-data` "
              f"makes the quickstart's) and the search space, then `gridml validate {path}`",
              soft_wrap=True)  # (paths unbroken: the terminal wraps)


@app.command("demo-data")
def demo_data(out_dir: Path | None = typer.Option(None, "--out", help="default $GRIDML_HOME/sample-data"),
              n_train: int = typer.Option(60000, "--n-train"), n_val: int = typer.Option(15000, "--n-val"),
              files: int = typer.Option(3, "--files", help="files per split"),
              seed: int = typer.Option(1, "--seed"),
              ragged: bool = typer.Option(False, "--ragged", help="also write each jet's tracks"),
              register: bool = typer.Option(True, "--register/--no-register", help="put them in the data "
                                            "store as user.demo:quickstart.train/.val (the quickstart's DIDs)"),
              as_json: bool = typer.Option(False, "--json")) -> None:
    """Make the quickstart's sample data (toy taus vs jets, HDF5) and register it."""
    from gridml.demo import demo_data as make

    doc = make(out_dir, n_train=n_train, n_val=n_val, n_files=files, seed=seed, ragged=ragged,
               register=register)
    if as_json:
        return _print_json(doc)
    out.print(f"wrote {len(doc['files'])} files in {doc['dir']}")
    for did in doc["registered"]:
        out.print(f"registered {did} in {doc['where']}")
    for did in doc["existing"]:
        out.print(f"{did} exists in {doc['where']}: kept")


@app.command()
def schema() -> None:
    """Print the JSON Schema of the training spec."""
    from gridml.spec import json_schema

    print(json.dumps(json_schema(), indent=2))


@app.command()
def submit(spec: Path = typer.Argument(..., help="training spec (YAML)"),
           dry_run: bool = typer.Option(False, "--dry-run", help="show the first batch's tasks, submit nothing"),
           as_json: bool = typer.Option(False, "--json", help="with --dry-run: print task parameters as JSON"),
           quiet: bool = typer.Option(False, "--quiet", help="no live display")) -> None:
    """Run a campaign: locally in the foreground (embedded server), or hand it to a server."""
    from gridml import runner

    loaded, dm = _load(spec)
    server = _state.get("server") or (None if loaded.spec.backend.server == "embedded"
                                      else loaded.spec.backend.server)
    # (local: the first trial builds the model here, and a bad model file fails it once,
    # without a retry: docs/payload.md)
    if not dry_run and loaded.spec.backend.executor not in ("local", "dryrun"):
        _build_check(loaded, dm, said_off=False)  # before a job is spent on a bad model file
    if server and not dry_run:
        return _submit_remote(loaded, server)
    if dry_run:  # reads the real store (the server's when there is one), writes nothing to it
        rendered = runner.dry_run(loaded, dm, _dry_run_reader(server) if server else True)
        if as_json:
            print(json.dumps(rendered, indent=2, sort_keys=True))
        else:
            for task in rendered:
                if "script" in task:  # Slurm: the exact batch script, as sbatch gets it
                    print(f"# {task['script_path']}\n{task['script']}")
                    continue
                out.print_json(json.dumps(task, default=str))
        return
    _run(loaded, dm, quiet)


def _submit_remote(loaded: Any, server: str) -> None:
    """Register a grid campaign with a running server, like a grid job: it runs there."""
    from gridml.client import ApiClient

    if loaded.spec.backend.executor == "local":
        raise UsageError(f"{loaded.path}: backend.executor: local runs trials on this machine, in the "
                         "foreground with the embedded server", hint="use backend.server: embedded, or "
                         "executor panda to hand the campaign to the server")
    spec = loaded.resolved()
    spec["x_model_source"] = loaded.model_path.read_text()
    with ApiClient(server, _state.get("token")) as client:
        study = client.create_study(loaded.spec.name, spec, loaded.hash)
    out.print(f"study {study['name']} (id {study['id']}) registered with {server}")
    out.print(f"study token (shown once, keep it): {study['token']}")
    out.print(f"follow it with `gridml --server {server} status {study['name']}`")


@app.command()
def resume(study: str = typer.Argument(..., help="study name or id"),
           quiet: bool = typer.Option(False, "--quiet")) -> None:
    """Continue a campaign after a crash or Ctrl-C: no trial is submitted twice."""
    from gridml import controller
    from gridml.store import open_store

    stored = open_store().get_study(study)
    loaded = controller.loaded_from_study(stored)
    _run(loaded, controller.data_manager_for(loaded.spec), quiet)


def _run(loaded: Any, dm: Any, quiet: bool) -> None:
    from gridml import runner
    from gridml.report import study_document
    from gridml.settings import settings

    try:
        study, store = runner.run_local(loaded, dm, quiet=quiet)
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted[/]: trials stopped; continue with `gridml resume {loaded.spec.name}`")
        raise typer.Exit(130) from None
    doc = study_document(store, study, settings().runs_dir, importance=False)  # not shown here
    best = doc["study"]["best"]
    if doc["study"]["state"] == "stopped":  # `gridml stop`: not an error
        out.print(f"study {study.name} stopped (gridml stop): `gridml status {study.name}` shows "
                  f"its trials; `gridml resume {study.name}` carries it on")
        if best is None:
            return
    if best is None:
        raise GridmlError(f"study {study.name}: no trial completed", hint=f"see `gridml status {study.name}`")
    out.print(f"best trial {best['number']}: {doc['study']['objective']} = {best['objective']:.5g}  "
              f"{best['hparams']}")
    model = next((o["did"] for o in best["outputs"] if o["name"].endswith((".keras", ".h5", ".pt"))), None)
    out.print(f"model: {model}  (get it with `gridml fetch {study.name} --best -o DIR`)")
    if len(doc["study"]["objectives"]) > 1:
        out.print(f"Pareto front: trials {', '.join(str(t['number']) for t in doc['study']['pareto'])}"
                  f"  (`gridml best {study.name}`; fetch them with --pareto)")
    if doc["study"]["convergence_plot"]:
        out.print(f"convergence plot: {doc['study']['convergence_plot']}")


@app.command()
def stop(study: str = typer.Argument(..., help="study name or id"),
         trial: int | None = typer.Option(None, "--trial", help="stop only this trial (its number)"),
         now: bool = typer.Option(False, "--now", help="cancel the jobs now (scancel, PanDA's "
                                  "kill, the process group) instead of letting each trial end its "
                                  "current epoch and save its model"),
         as_json: bool = typer.Option(False, "--json")) -> None:
    """Stop a campaign (or one trial): each running trial ends its epoch, saves its model and
    ends `stopped`; the study takes no new trials. Locally, or with --server on a server."""
    server = _state.get("server")
    if server:
        from gridml.client import ApiClient

        with ApiClient(server, _state.get("token")) as client:
            doc = client.stop(study, trial, now)
    else:
        from gridml.store import open_store
        from gridml.store.stopping import request_stop

        store = open_store()
        try:
            doc = request_stop(store, study, trial, now)
        finally:
            store.close()
    if as_json:
        return _print_json(doc)
    asked = [t for t in doc["trials"] if t["state"] == "stopping"]
    how = "cancelled now" if now else "to end after their current epoch"
    what = f"trial {trial}" if trial is not None else f"study {doc['study']} ({doc['state']})"
    out.print(f"{what}: {len(asked)} running trial(s) asked to stop, {how}"
              + (f"; {len(doc['trials']) - len(asked)} queued trial(s) stopped"
                 if len(doc["trials"]) > len(asked) else ""))
    out.print("the campaign's controller (`gridml submit`/`resume`, or the server) acts at its "
              f"next cycle; follow it with `gridml{' --server ' + server if server else ''} "
              f"status {doc['study']}`")


def _study_doc(study: str, importance: bool = False) -> dict[str, Any]:
    """``importance``: with the fANOVA shares (only `status` of a whole study shows them)."""
    from gridml.report import study_document
    from gridml.settings import settings

    store = _reader()
    return study_document(store, store.get_study(study), settings().runs_dir, importance)


@app.command()
def status(study: str | None = typer.Argument(None, help="study name or id; none: list studies"),
           trial: int | None = typer.Option(None, "--trial", help="one trial's epochs and profile"),
           as_json: bool = typer.Option(False, "--json", help="stable JSON (see README)")) -> None:
    """Trials of a study: state, hyperparameters, epochs, objective, time per epoch."""
    from gridml.live import describe_progress
    from gridml.report import test_line

    if study is None:
        return _list_studies(as_json)
    doc = _study_doc(study, importance=trial is None)
    if trial is not None:
        return _trial_status(study, doc, trial, as_json)
    if as_json:
        return _print_json(doc)
    s = doc["study"]
    table = Table(title=f"study {s['name']} ({s['state']}): {s['n_trials']}/{s['max_trials']} trials, "
                        f"{s['objective']} ({s['direction']})")
    jobs = _batch_jobs(s["name"], doc["trials"])
    for col in ("trial", "state", *(["job"] if jobs else []), "epochs", s["objective"], "s/epoch",
                "input\nwait"):
        table.add_column(col)
    # a narrow terminal folds the values instead of cutting them to "learning_ra…"
    table.add_column("hyperparameters", overflow="fold")
    best_id = s["best"]["id"] if s["best"] else None
    for t in doc["trials"]:
        obj = "-" if t["objective"] is None else f"{t['objective']:.5g}" + (" *" if t["id"] == best_id else "")
        if t["state"] == "diverged":
            obj = "NaN (diverged)"
        tpe = "-" if t["time_per_epoch"] is None else f"{t['time_per_epoch']:.2f}"
        wait = "-" if t["input_wait_frac"] is None else f"{100 * t['input_wait_frac']:.0f}%" + (
            " input-bound" if t["input_bound"] else "")
        at = describe_progress(t.get("progress"))  # a running trial: "epoch 3, batch 120/266"
        table.add_row(str(t["number"]), t["state"], *([jobs.get(t["number"], "-")] if jobs else []),
                      str(t["epochs_done"]) + (f" ({at})" if at else ""), obj, tpe, wait,
                      _hparams(t["hparams"]))
    out.print(table)
    for t in doc["trials"]:
        if t["state"] in ("failed", "diverged") and t["error"]:
            out.print(f"[red]trial {t['number']} {t['state']}[/]: {t['error'].splitlines()[0]}")
    if s["best"] and (line := test_line(s["best"])):  # data.test: shown apart
        out.print(f"best trial {s['best']['number']}: {line}", soft_wrap=True)
    if s["convergence_plot"]:
        out.print(f"convergence plot: {s['convergence_plot']}")
    if s.get("importance"):
        top = list(s["importance"].items())[:5]
        out.print("parameter importance (fANOVA): " + ", ".join(f"{k} {v:.0%}" for k, v in top))


def _batch_jobs(study: str, trials: list[dict[str, Any]]) -> dict[int, str]:
    """Trial number -> "<job id> <Slurm state>" for trials run as Slurm jobs (their journal)."""
    from gridml.executors.slurm.journal import last_state
    from gridml.layout import RunsLayout
    from gridml.settings import settings

    jobs: dict[int, str] = {}
    for t in trials:
        if not str(t.get("external_id") or "").startswith("slurm:"):
            continue
        seen = last_state(RunsLayout(settings().runs_dir).study(study).trial(t["number"])) or {}
        state = seen.get("state") or "?"
        jobs[t["number"]] = f"{seen.get('job_id') or t['external_id'].split(':')[-1]} {state}" \
            + (" (cancelled)" if seen.get("killed") and state not in ("CANCELLED", "REQUEUED") else "")
    return jobs


def _hparams(hp: dict[str, Any]) -> str:
    return " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in hp.items())


def _trial_status(study: str, doc: dict[str, Any], number: int, as_json: bool) -> None:
    from gridml.report import epoch_rows

    summary = next((t for t in doc["trials"] if t["number"] == number), None)
    if summary is None:
        raise NotFoundError(f"study {study} has no trial {number}", hint=f"see `gridml status {study}`")
    epochs = epoch_rows(_reader().list_epochs(summary["id"]))
    if as_json:
        return _print_json({"trial": summary, "epochs": epochs})
    table = Table(title=f"study {study} trial {number} ({summary['state']})")
    for col in ("epoch", "metrics", "s", "samples/s", "input wait", "peak RSS MB", "threads"):
        table.add_column(col)
    for e in epochs:
        metrics = ", ".join(f"{k}={v:.4g}" for k, v in sorted(e["metrics"].items()))
        fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
        table.add_row(str(e["epoch"]), metrics, fmt(e["epoch_time"], ".2f"), fmt(e["samples_per_s"], ".0f"),
                      fmt(e["input_wait_frac"], ".1%"), fmt(e["peak_rss_mb"], ".0f"), fmt(e["threads"], "d"))
    out.print(table)
    if summary["input_bound"] or summary["input_bound_reason"]:
        reason = summary["input_bound_reason"] or (
            f"{summary['input_wait_frac']:.0%} of each epoch waited on input (> 20%): raise "
            "training.options.prefetch_batches or cache_budget_mb, or prepare the data into larger chunks")
        out.print(f"[yellow]input-bound[/]: {reason}", soft_wrap=True)
    if summary["error"]:
        out.print(f"[red]error[/]: {summary['error']}")


def _list_studies(as_json: bool) -> None:
    studies = _reader().list_studies()
    rows = [{"id": s.id, "name": s.name, "state": s.state} for s in studies]
    if as_json:
        return _print_json({"studies": rows})
    table = Table(title="studies")
    for col in ("id", "name", "state"):
        table.add_column(col)
    for r in rows:
        table.add_row(str(r["id"]), r["name"], r["state"])
    out.print(table)


@app.command()
def best(study: str = typer.Argument(..., help="study name or id"),
         as_json: bool = typer.Option(False, "--json")) -> None:
    """The best trial of a study: hyperparameters and objective (several objectives: the
    Pareto front, each trial with its objectives and hyperparameters)."""
    from gridml.report import test_line

    doc = _study_doc(study)
    b = doc["study"]["best"]
    if b is None:
        raise NotFoundError(f"study {study} has no completed trial yet", hint=f"see `gridml status {study}`")
    objs, front = doc["study"]["objectives"], doc["study"]["pareto"]
    if as_json:
        return _print_json({"study": doc["study"]["name"], "objective_name": doc["study"]["objective"],
                            "direction": doc["study"]["direction"], **b,
                            "objective_names": objs, "pareto": front})
    if len(objs) > 1:
        return _print_front(study, objs, front)
    out.print(f"study {study}: best trial {b['number']}, {doc['study']['objective']} = {b['objective']:.6g}")
    for k, v in b["hparams"].items():
        out.print(f"  {k} = {v}")
    if line := test_line(b):  # data.test: shown apart
        out.print(line, soft_wrap=True)


def _print_front(study: str, objs: list[dict[str, Any]], front: list[dict[str, Any]]) -> None:
    from gridml.report import test_line

    names = [f"{o['metric']} ({o['direction'][:3]})" for o in objs]
    table = Table(title=f"study {study}: Pareto front, {len(front)} trial(s)")
    for col in ("trial", *names):
        table.add_column(col)
    table.add_column("hyperparameters", overflow="fold")
    for t in front:
        table.add_row(str(t["number"]), *(f"{v:.5g}" for v in t["objectives"]), _hparams(t["hparams"]))
    out.print(table)
    for t in front:  # data.test: shown apart, per trial of the front
        if line := test_line(t):
            out.print(f"trial {t['number']}: {line}", soft_wrap=True)


@app.command()
def fetch(study: str = typer.Argument(..., help="study name or id"),
          best_: bool = typer.Option(False, "--best", help="the best trial"),
          pareto: bool = typer.Option(False, "--pareto", help="every trial of the Pareto front"),
          trial: int | None = typer.Option(None, "--trial", help="this trial number"),
          output: Path = typer.Option(..., "-o", "--output", help="folder to write into"),
          backend: str | None = typer.Option(None, "--backend", help="data backend (default: the study's)")) -> None:
    """Retrieve a trial's model, plots and metrics from the data store."""
    if best_ + pareto + (trial is not None) != 1:
        raise UsageError("say which trial: --best, --pareto or --trial N (one of them)")
    writable_folder(output, "-o")  # before anything is downloaded
    doc = _study_doc(study)
    if pareto:
        chosen = doc["study"]["pareto"]
        if not chosen:
            raise NotFoundError(f"study {study}: no completed feasible trial, the Pareto front is "
                                "empty", hint=f"see `gridml status {study}`")
    else:
        t = doc["study"]["best"] if best_ else next((x for x in doc["trials"] if x["number"] == trial), None)
        if t is None:
            raise NotFoundError(f"study {study}: no completed trial" if best_
                                else f"study {study} has no trial {trial}",
                                hint=f"see `gridml status {study}`")
        chosen = [t]
    for t in chosen:
        if not t["outputs"]:
            raise NotFoundError(f"study {study} trial {t['number']} has no stored outputs ({t['state']})")
    from gridml.store import spec_of

    dm = _data_manager(backend or spec_of(_reader().get_study(study)).backend.data)
    output.mkdir(parents=True, exist_ok=True)
    for t in chosen:
        for o in t["outputs"]:
            for path in dm.download(o["did"], output):
                for got in _unpacked(doc["study"]["name"], t, Path(path)):
                    out.print(f"{o['did']} -> {got}")


def _unpacked(study: str, trial: dict[str, Any], path: Path) -> list[Path]:
    """A phpo trial's one stored output is its evaluation tarball (model, metrics, plots,
    provenance: gridml.executors.panda.phpo_outputs): unpacked as a local trial's outputs are named,
    ``<study>.trial-NNNN.<file>``, each file checked, and the tarball removed. Anything else as is."""
    from gridml.executors.panda import phpo_outputs
    from gridml.planner import output_name

    if trial.get("source") != "phpo" or not phpo_outputs.is_evaluation_tarball(path):
        return [path]
    files = phpo_outputs.unpack(path, path.parent,
                                lambda member: output_name(study, int(trial["number"]), member))
    path.unlink()
    return files


@app.command()
def scale(spec: Path = typer.Argument(..., help="training spec (YAML)"),
          workers: str = typer.Option("1,2", "--workers", help="rank counts, e.g. 1,2,4"),
          batch: str = typer.Option("global", "--batch", help="keep the global batch fixed, or the per-rank one",
                                    case_sensitive=False),
          hparams: str | None = typer.Option(None, "--hparams", help="JSON point; default: middle of the space"),
          nodes: str | None = typer.Option(None, "--nodes", help="Slurm: node counts to spread the ranks "
                                           "over, e.g. 1,2 (each rank count on each)"),
          as_json: bool = typer.Option(False, "--json")) -> None:
    """Scaling study: the same training over 1, 2, ... Horovod ranks (GPUs on GPU nodes, cores here)."""
    from gridml.scale import parse_workers, run_scaling

    if batch not in ("global", "per-rank"):
        raise UsageError(f"--batch {batch!r}: use global or per-rank")
    point = None
    if hparams:
        try:
            point = json.loads(hparams)
        except ValueError as exc:
            raise UsageError(f"--hparams is not JSON: {exc}", hint='e.g. --hparams \'{"units": 64}\'') from None
    loaded, dm = _load(spec)
    doc = run_scaling(loaded, dm, parse_workers(workers), batch=batch, hparams=point, quiet=as_json,
                      nodes=parse_workers(nodes) if nodes else None)
    if as_json:
        return _print_json(doc)
    table = Table(title=f"scaling of {loaded.spec.name} ({batch} batch), hparams {_hparams(doc['hparams'])}")
    for col in ("ranks", "samples/s", "s/epoch", "speedup", "efficiency", "input wait", "global batch"):
        table.add_column(col)
    for r in doc["rows"]:
        wait = "-" if r["input_wait_frac"] is None else f"{r['input_wait_frac']:.1%}"
        ranks = str(r["workers"]) + (f" on {r['nodes']} node(s)" if nodes else "")
        table.add_row(ranks, f"{r['samples_per_s']:.0f}", f"{r['epoch_time']:.2f}",
                      f"{r['speedup']:.2f}", f"{r['efficiency']:.0%}", wait, str(r["global_batch"]))
    out.print(table)
    out.print(f"plot: {doc['plot']}")


def _register_subcommands() -> None:
    """Commands that live with their own modules."""
    try:
        from gridml.data.cli import data_app
        app.add_typer(data_app, name="data", help="Datasets: put, ls, get (local store or Rucio).")
    except ImportError:
        pass
    try:
        from gridml.serve import serve
        app.command("serve")(serve)
    except ImportError:
        pass
    try:
        from gridml.prepare.cli import prepare
        app.command("prepare")(prepare)
    except ImportError:
        pass
    from gridml.phpo.cli import evaluate, steer  # PanDA's HPO service (phpo + iDDS)
    app.command("steer")(steer)
    app.command("evaluate")(evaluate)


_register_subcommands()


def main(argv: list[str] | None = None) -> int:
    """Entry point: returns the exit code; user errors print one line, never a traceback."""
    try:
        result = app(args=argv, prog_name="gridml", standalone_mode=False)
    except GridmlError as exc:
        if _state["debug"]:
            raise
        _report(exc)
        return exc.exit_code
    except (typer.Exit, SystemExit) as exc:
        return int(getattr(exc, "exit_code", getattr(exc, "code", 0)) or 0)
    except (typer.Abort, KeyboardInterrupt):
        err.print("aborted")
        return 130
    except OSError as exc:  # a path given that cannot be read or written: one line, its name
        if _state["debug"]:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        _report(UsageError(f"{where}{exc.strerror or exc}",
                           hint="check the path (a file, not a folder; a writable place)"))
        return 1
    except (RecursionError, MemoryError) as exc:  # the input limits of gridml.spec.loader missed one
        if _state["debug"]:
            raise
        what = "nested too deeply" if isinstance(exc, RecursionError) else "too large"
        _report(UsageError(f"an input is {what} to be read",
                           hint="check the files given (rerun with --debug to see which)"))
        return 2
    except Exception as exc:  # typer's (vendored) click errors: usage, missing parameter ...
        if hasattr(exc, "show") and hasattr(exc, "exit_code"):
            exc.show()
            return int(exc.exit_code)
        raise
    return result if isinstance(result, int) else 0


def _report(exc: GridmlError) -> None:
    lines = str(exc.message).splitlines() or ["error"]
    err.print("[red]error[/]: ", end="")
    err.print(lines[0], highlight=False, markup=False, soft_wrap=True)
    for line in lines[1:]:
        err.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)
    if exc.hint:
        err.print(f"  fix: {exc.hint}", highlight=False, markup=False, soft_wrap=True)


if __name__ == "__main__":
    sys.exit(main())
