"""The two commands a phpo task runs: ``gridml steer`` (iDDS steering) and ``gridml evaluate``.
Their engines are imported when they run, not with the CLI: the searchers bring numpy and the
spec models, which every other ``gridml`` command would pay for at start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gridml.layout import writable_file

if TYPE_CHECKING:
    from gridml.phpo.steer import Engine


def _engine_from_spec(spec: Path) -> tuple[Any, Engine]:
    """The spec's search.space and engine; the model file is not needed for steering."""
    from gridml.phpo.steer import Engine
    from gridml.spec import Spec
    from gridml.spec.loader import read_yaml, validate_model

    data, lines = read_yaml(spec)
    parsed = validate_model(Spec, data, spec, lines)
    s = parsed.search
    space = {k: {f: v for f, v in d.model_dump().items() if v is not None} for k, d in s.space.items()}
    return space, Engine(s.algorithm, s.seed, dict(s.options))


def steer(in_file: Path = typer.Option(..., "--in", help="iDDS input (%IN): points and opt_space"),
          out_file: Path = typer.Option(..., "--out", help="where the new points go (%OUT)"),
          num_points: int = typer.Option(..., "--num-points", help="at most this many (%NUM_POINTS)"),
          max_points: int = typer.Option(..., "--max-points",
                                         help="the whole search's budget (%MAX_POINTS)"),
          spec: Path | None = typer.Option(None, "--spec", help="take search.space, algorithm, "
                                                                  "seed and options from a spec"),
          space: Path | None = typer.Option(None, "--space", help="search space JSON (gridml's "
                                                                    "or hpogrid's format)"),
          algorithm: str | None = typer.Option(None, "--algorithm", help="bayes (default), skopt, "
                                                                            "optuna, random, grid, evolution"),
          seed: int | None = typer.Option(None, "--seed", help="default 0 (or the spec's)"),
          options: str | None = typer.Option(None, "--options", help="searcher options, JSON"),
          ) -> None:
    """One iDDS steering step: new hyperparameter points from IN's evaluated and pending ones."""
    from gridml.phpo.steer import Engine, SteerError, read_json, steer as steer_step

    writable_file(out_file, "--out")
    fallback, engine = None, Engine()
    if spec is not None:
        fallback, engine = _engine_from_spec(spec)
    if space is not None:
        fallback = read_json(space, "search space")
    extra = dict(engine.options)
    if options:
        try:
            extra.update(json.loads(options))
        except (ValueError, TypeError) as exc:
            raise SteerError(f"--options: not a JSON object ({exc})") from None
    algo = algorithm or engine.algorithm
    if algo == "external":
        raise SteerError("--algorithm external proposes nothing; use bayes, skopt, optuna, "
                         "random, grid or evolution")
    engine = Engine(algo, engine.seed if seed is None else seed, extra)
    written = steer_step(in_file, out_file, num_points, max_points, engine, fallback_space=fallback)
    typer.echo(f"gridml steer: {len(written)} new point(s) -> {out_file}", err=True)


def evaluate(evaluation_input: Path = typer.Option(Path("input.json"), "--evaluationInput",
                                                   help="the point (phpo's --evaluationInput)"),
             training_data: Path = typer.Option(Path("input_ds.json"), "--evaluationTrainingData",
                                                help="staged training files (JSON list)"),
             evaluation_output: Path = typer.Option(Path("output.json"), "--evaluationOutput",
                                                    help="status, loss, message"),
             metrics: Path | None = typer.Option(None, "--evaluationMetrics",
                                                 help="tarball of metrics, curves, provenance"),
             trial: Path | None = typer.Option(None, "--trial", help="the planned trial document "
                                                                     "(default: gridml_trial.json from the sandbox)"),
             spec: Path | None = typer.Option(None, "--spec", help="plan from a spec instead"),
             sandbox: str | None = typer.Option(None, "--sandbox", help="tarball or URL to unpack "
                                                                         "first (when runHPO did not)"),
             workers: int | None = typer.Option(None, "--workers", help="ranks (default: the "
                                                                          "spec's, at most the job's cores)"),
             server: str | None = typer.Option(None, "--server", envvar="GRIDML_SERVER",
                                               help="a gridml serve to report epochs to"),
             token: str | None = typer.Option(None, "--token", envvar="GRIDML_TOKEN"),
             ) -> None:
    """Evaluate one phpo point: train it with gridml's payload, write phpo's output file."""
    from gridml.phpo.evaluate import TEMPLATE, Files, Server, evaluate as run, template_from_spec
    from gridml.phpo.steer import SteerError as Bad

    # checked before the training (an hour's work lost to a bad path otherwise)
    writable_file(evaluation_output, "--evaluationOutput", example="output.json")
    if metrics is not None:
        writable_file(metrics, "--evaluationMetrics", example="metrics.tgz")
    cwd = Path.cwd()
    files = Files(evaluation_input, training_data, evaluation_output, metrics)
    if spec is not None and trial is None:
        trial = template_from_spec(spec, cwd)
    elif trial is None:
        trial = cwd / TEMPLATE
        if not trial.is_file() and not sandbox:
            raise Bad(f"{trial}: no trial document; give --trial, --spec, or --sandbox")
    out = run(trial, files, cwd=cwd, sandbox=sandbox,
              server=Server(server, token) if server else None, workers=workers)
    typer.echo(f"gridml evaluate: {json.dumps(out)}", err=True)
    if out["status"] != 0:
        raise typer.Exit(1)
