"""The job side of a grid trial: what a PanDA job runs on the worker node (stdlib only).

The pilot has already staged the trial's input files into the job's working directory and runs
prun's transformation (runGen), which calls::

    python -m payloads.pilot_wrapper --train f1,f2 --validation v1 [--test e1] --trial <b64> \\
        --sandbox jobO.gridml-<hash>.tar.gz --model-name mlp.py [--gpus N] -- \\
        python -m payloads.hvdrun -np 2 -H localhost:2 --gloo python -m payloads.train_keras trial.json

This wrapper then
1. unpacks the user's code from the task's sandbox (``-a``: runGen fetched it from PanDA's
   cache into the working directory; a runGen that unpacked it already leaves nothing to do;
   ``--model <b64>`` instead carries a lone model file), writes the trial file, fixing the
   paths the submit host wrote (inputs -> the staged files, model_file, output_dir);
2. checks every staged input against the size and adler32 the controller recorded;
3. reports the GPUs the node gave (PanDA has no GPU count, see docs/grid.md);
4. runs the payload's horovodrun line, its output in ``payload.log`` (which goes to the log tarball);
5. moves the payload's outputs (model, plots, metrics.jsonl, provenance.json, result.json, and
   model.onnx when the export worked, roc.json/roc.png/scores.png for a classifier, and
   roc_test.json/roc_test.png/scores_test.png with a test split, ``--test``: stream IN3) into the
   working directory, where runGen renames them and
   the pilot stages them out (model.onnx is declared allowed-not-produced: a job without it still
   finishes, see docs/grid.md).
Exit status: the payload's (for torchrun, the failing rank's code from ``payload_exit_code``, as
torchrun exits 1 whatever it was); 65 when an input is missing or corrupt, 64 for a bad command
line.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path
from typing import Any

OUTPUTS = ("model.keras", "model.h5", "curves.png", "metrics.jsonl", "provenance.json", "result.json",
           "model_source.py", "model.onnx", "model.pt", "roc.json", "roc.png", "scores.png",
           "roc_test.json", "roc_test.png", "scores_test.png")
# Horovod's 30 s defaults for rank start-up and Gloo rendezvous are too short when TensorFlow
# imports on a busy worker node (the local executor uses the same); the job's own settings win.
HOROVOD_DEFAULTS = {"HOROVOD_START_TIMEOUT": "300", "HOROVOD_GLOO_TIMEOUT_SECONDS": "300"}
EX_USAGE, EX_DATAERR = 64, 65


def unpack(text: str) -> bytes:
    """The inverse of the submit side's pack(): urlsafe base64 of gzip."""
    return gzip.decompress(base64.urlsafe_b64decode(text.encode()))


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    if "--" not in argv:
        raise SystemExit(f"pilot_wrapper: no payload command after `--` in {argv!r}")
    cut = argv.index("--")
    p = argparse.ArgumentParser(prog="pilot_wrapper")
    p.add_argument("--train", default="", help="comma-separated staged training files (%%IN)")
    p.add_argument("--validation", default="", help="comma-separated staged validation files (%%IN2)")
    p.add_argument("--test", default="", help="comma-separated staged test files (%%IN3, data.test)")
    p.add_argument("--trial", required=True, help="the trial file, gzip+base64")
    p.add_argument("--model", default=None, help="the user's model file, gzip+base64 (no sandbox)")
    p.add_argument("--sandbox", default=None, help="the task's sandbox tarball (prun's -a)")
    p.add_argument("--model-name", required=True)
    p.add_argument("--gpus", type=int, default=0, help="GPUs the spec asked for")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment for the payload (the trial request's env)")
    return p.parse_args(argv[:cut]), argv[cut + 1:]


def file_list(text: str, fallback: list[str]) -> list[str]:
    """runGen's comma list (a placeholder left as is means: not substituted, use the trial file)."""
    names = [n for n in text.split(",") if n and not n.startswith("%")]
    return names or [Path(n).name for n in fallback]


def adler32(path: Path) -> str:
    value = 1
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            value = zlib.adler32(chunk, value)
    return f"{value & 0xFFFFFFFF:08x}"


def check_inputs(doc: dict[str, Any], cwd: Path) -> list[str]:
    """Problems with the staged inputs (missing, wrong size, wrong adler32); empty when all good."""
    problems = []
    for item in doc.get("inputs", []):
        name = str(item["did"]).split(":", 1)[-1]
        path = cwd / name
        if not path.is_file():
            problems.append(f"{name}: not staged in")
        elif item.get("bytes") is not None and path.stat().st_size != item["bytes"]:
            problems.append(f"{name}: {path.stat().st_size} bytes, expected {item['bytes']}")
        elif item.get("adler32") and adler32(path) != item["adler32"]:
            problems.append(f"{name}: adler32 {adler32(path)}, expected {item['adler32']}")
    return problems


def fix_trial(doc: dict[str, Any], args: argparse.Namespace, cwd: Path) -> dict[str, Any]:
    """The trial file as this node sees it: local paths for inputs, model and outputs."""
    data = dict(doc["data"])
    data["train"] = [str(cwd / n) for n in file_list(args.train, data.get("train", []))]
    data["validation"] = [str(cwd / n) for n in file_list(args.validation, data.get("validation", []))]
    if data.get("test"):  # data.test: evaluated once after training (result.json "test")
        data["test"] = [str(cwd / n) for n in file_list(args.test, data["test"])]
    fixed = dict(doc, data=data, model_file=str(cwd / Path(args.model_name).name),
                 output_dir=str(cwd / "outputs"))
    fixed["grid"] = {"gpus_requested": args.gpus, "gpus_visible": visible_gpus(),
                     "site": os.environ.get("PANDA_SITE_NAME") or os.environ.get("SITE_NAME"),
                     "panda_id": os.environ.get("PandaID")}
    return fixed


def visible_gpus() -> int:
    """GPUs this job may use: CUDA_VISIBLE_DEVICES when the batch system set it, else nvidia-smi."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return len([d for d in env.split(",") if d.strip() and d.strip() != "-1"])
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20,
                             check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def say(msg: str) -> None:
    print(f"pilot_wrapper: {msg}", file=sys.stderr, flush=True)


def prepare(args: argparse.Namespace, cwd: Path) -> int:
    """Write the model and trial files; 0 when the job can run."""
    try:
        doc = json.loads(unpack(args.trial))
        if args.model is not None:
            (cwd / Path(args.model_name).name).write_bytes(unpack(args.model))
    except (ValueError, OSError, EOFError) as exc:
        say(f"cannot decode the trial or model file from the command line: {exc}")
        return EX_USAGE
    problem = unpack_sandbox(args.sandbox, cwd, Path(args.model_name).name)
    if problem:
        say(problem)
        return EX_DATAERR
    problems = check_inputs(doc, cwd)
    if problems:
        say("staged inputs are not what the controller recorded:\n  " + "\n  ".join(problems))
        return EX_DATAERR
    fixed = fix_trial(doc, args, cwd)
    gpus = fixed["grid"]["gpus_visible"]
    if args.gpus and gpus < args.gpus:
        say(f"the spec asked for {args.gpus} GPU(s), this node gives {gpus}: the ranks share them")
    (cwd / "outputs").mkdir(exist_ok=True)
    (cwd / "trial.json").write_text(json.dumps(fixed, indent=2, sort_keys=True))
    return 0


def unpack_sandbox(name: str | None, cwd: Path, model: str) -> str | None:
    """Unpack the sandbox runGen fetched (``-a``) into ``cwd``; a problem, or None."""
    if not name:
        return None if (cwd / model).is_file() else f"no --sandbox and no --model: {model} is missing"
    tarball = cwd / Path(name).name
    if not tarball.is_file():
        if (cwd / model).is_file():
            return None  # runGen unpacked it and removed the tarball
        return f"the sandbox {name} is not in the job's directory (runGen's -a)"
    try:
        with tarfile.open(tarball) as tar:
            tar.extractall(cwd, filter="data")
            names = tar.getnames()
    except (OSError, tarfile.TarError) as exc:
        return f"cannot unpack the sandbox {name}: {exc}"
    if not (cwd / model).is_file():
        return f"the sandbox {name} has no {model} (it has {', '.join(names[:20])})"
    say(f"sandbox {name}: {len(names)} file(s) unpacked")
    return None


def payload_env(pairs: list[str]) -> dict[str, str]:
    """This job's environment, Horovod's timeouts defaulted, the request's KEY=VALUE pairs on top."""
    env = {**HOROVOD_DEFAULTS, **os.environ}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"pilot_wrapper: --env wants KEY=VALUE, got {pair!r}")
        env[key] = value
    return env


def run_payload(command: list[str], cwd: Path, env: dict[str, str]) -> int:
    """The payload's horovodrun line; its output to payload.log and, at the end, a tail to stderr."""
    log, code_file = cwd / "payload.log", cwd / "payload_exit_code"
    code_file.unlink(missing_ok=True)
    env = {**env, "GRIDML_EXIT_FILE": str(code_file)}
    say(f"running {' '.join(command)}")
    with open(log, "wb") as fh:
        rc = subprocess.run(command, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, env=env,
                            check=False).returncode
    if rc != 0:
        rank = rank_exit_code(code_file)
        if rank is not None and rank != rc:
            say(f"the launcher exited with {rc}, the failing rank with {rank}: exiting with {rank}")
            rc = rank
        tail = log.read_text(errors="replace").splitlines()[-40:]
        say(f"payload exited with {rc}; last lines of payload.log:\n" + "\n".join(tail))
    return rc


def rank_exit_code(path: Path) -> int | None:
    """The code a failing rank of the torch payload wrote (torchrun itself exits 1), or None."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and 0 < int(text) < 256 else None


def collect(cwd: Path) -> list[str]:
    """Move the payload's outputs next to the job, where runGen's output map finds them."""
    moved = []
    for name in OUTPUTS:
        src = cwd / "outputs" / name
        if src.is_file():
            os.replace(src, cwd / name)
            moved.append(name)
    return moved


def main(argv: list[str] | None = None) -> int:
    args, command = parse_args(list(sys.argv[1:] if argv is None else argv))
    if not command:
        say("no payload command after `--`")
        return EX_USAGE
    cwd = Path.cwd()
    rc = prepare(args, cwd)
    if rc:
        return rc
    rc = run_payload(command, cwd, payload_env(args.env))
    say(f"outputs: {', '.join(collect(cwd)) or 'none'}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
