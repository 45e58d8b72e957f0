"""The values gridml writes into batch scripts and grid task parameters, checked once.

Every value that reaches an ``sbatch`` script (``slurm.partition``, ``account``, ``qos``,
``constraint``, ``slurm.options`` and their keys, job names, paths) or a JEDI task parameter
(``panda.site``, ``nickname``, ``working_group``, ``vo``, ``rse``, ``resources.container``) must
be what the scheduler accepts: one word of a small alphabet, never a newline, a blank, a quote or
a shell metacharacter that the scheduler does not use itself. The renderers call these checks
(and quote what is a shell word); ``gridml validate`` calls :func:`spec_problems` so that a bad
value is refused on the submit host, with its field named, before any job exists.

Low on purpose (it imports only :mod:`gridml.errors`): the spec's checks and the executors'
renderers both use it.
"""

from __future__ import annotations

import re
from typing import Any

from gridml.errors import SpecError

# Slurm names: partitions, accounts and QOS are words of letters, digits, '.', '_', '-'
# (several partitions or QOS: comma-separated)
_NAME = re.compile(r"[A-Za-z0-9._-]+")
_NAMES = re.compile(r"[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*")
# --constraint: feature names with Slurm's operators & | , * [ ] ( ) ! and counts
_CONSTRAINT = re.compile(r"[A-Za-z0-9._:&|,*!()\[\]-]+")
# an sbatch long option name
_OPTION_KEY = re.compile(r"[A-Za-z][A-Za-z0-9-]*")
# an sbatch option value: no blank, quote, '$', '`', ';', '<', '>', '#', '\\', control character
_OPTION_VALUE = re.compile(r"[A-Za-z0-9._,:=@%+/*&|!()\[\]~^-]+")
# container images: docker://repo/name:tag, oras://, library://, /cvmfs/... paths, digests
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+=-]*|/[A-Za-z0-9._:/@+=-]+")
# PanDA: queue (site) names, nicknames, working groups, VO, RSE
_SITE = re.compile(r"[A-Za-z0-9._-]+")
_NICKNAME = re.compile(r"[A-Za-z0-9_-]+")
_GROUP = re.compile(r"[A-Za-z0-9._:/-]+")
_JOB_NAME = re.compile(r"[A-Za-z0-9._-]+")
# a path written on an #SBATCH line (sbatch splits those lines at blanks)
_BAD_PATH = re.compile(r"[\s\x00-\x1f\x7f\"'\\$`]")

# sbatch options that take no value: given true they are written bare, false leaves them out
FLAG_ONLY = frozenset({
    "requeue", "no-requeue", "contiguous", "hold", "overcommit", "oversubscribe", "reboot",
    "spread-job", "use-min-nodes", "ignore-pbs", "test-only", "parsable", "quiet", "wait",
})
# the opposite of each flag, for `requeue: false`
NEGATED = {"requeue": "no-requeue", "no-requeue": "requeue"}
# sbatch options gridml sets itself and needs as it sets them (finding jobs, logs, the script)
RESERVED = frozenset({"job-name", "comment", "chdir", "output", "open-mode", "wrap", "array",
                      "parsable", "test-only", "wait"})
_TRUE = ("true", "yes", "1", "on", "")
_FALSE = ("false", "no", "0", "off")

Problem = tuple[tuple[str | int, ...], str]


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "...'"


def _why(text: str) -> str:
    if "\n" in text or "\r" in text:
        return "holds a newline"
    if any(c.isspace() for c in text):
        return "holds a blank"
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        return "holds a control character"
    bad = sorted({c for c in text if c in "\"'`$;<>#\\{}"})
    if bad:
        return f"holds {' '.join(bad)}"
    return "holds a character the scheduler does not take"


def _word(field: str, value: object, pattern: re.Pattern[str], what: str) -> str | None:
    """A problem message if ``value`` is not one word matching ``pattern``, else None."""
    text = str(value)
    if not text:
        return f"{field}: empty; give {what} or leave the field out"
    if len(text) > 255:
        return f"{field}: {len(text)} characters is too long for {what}"
    if text.startswith("-"):
        return f"{field}: {_shown(value)} starts with '-' (it would be read as an option); give {what}"
    if not pattern.fullmatch(text):
        return f"{field}: {_shown(value)} {_why(text)}; give {what}"
    return None


def _raise(problem: str | None) -> None:
    if problem is not None:
        raise SpecError(problem, hint="fix that field of the spec (`gridml validate` names each one)")


# ---- checks that raise (the renderers) --------------------------------------------------------
def slurm_name(field: str, value: object) -> str:
    """A partition, account or QOS (comma-separated lists allowed)."""
    _raise(_word(field, value, _NAMES, "a Slurm name (letters, digits, . _ -; lists with ,)"))
    return str(value)


def slurm_constraint(field: str, value: object) -> str:
    _raise(_word(field, value, _CONSTRAINT, "a Slurm feature expression, e.g. a100 or a100&ib"))
    return str(value)


def job_name(value: str) -> str:
    _raise(_word("job name", value, _JOB_NAME, "letters, digits, . _ - (the study name)"))
    return value


def script_path(field: str, value: object) -> str:
    """A path sbatch reads from an ``#SBATCH`` line: one word, no quote or ``$``."""
    text = str(value)
    if not text or _BAD_PATH.search(text):
        raise SpecError(f"{field}: {_shown(text)} {_why(text) if text else 'is empty'}; sbatch "
                        "reads it from an #SBATCH line",
                        hint="use a GRIDML_HOME / working folder whose path has no blanks, "
                             "quotes or $")
    return text


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_names(env: dict[str, Any]) -> None:
    """Environment variable names written as ``export NAME=...``."""
    for name in env:
        if not _ENV_NAME.fullmatch(str(name)):
            raise SpecError(f"environment variable {_shown(name)}: not a variable name "
                            "(letters, digits, _)")


def container(field: str, value: object) -> str:
    _raise(_word(field, value, _IMAGE, "an image: docker://repo/name:tag, oras://..., or a path"))
    return str(value)


def walltime(field: str, seconds: float) -> int:
    if not seconds > 0:
        raise SpecError(f"{field}: {seconds!r} s is not a walltime; give a positive duration, "
                        "e.g. 30m or 2h")
    return int(seconds)


def panda_value(field: str, value: object) -> str:
    """``panda.site``, ``nickname``, ``working_group``, ``vo``, ``rse`` as JEDI takes them."""
    _raise(_panda_problem(field, value))
    return str(value)


def _panda_problem(field: str, value: object) -> str | None:
    key = field.rsplit(".", 1)[-1]
    if key == "nickname":
        return _word(field, value, _NICKNAME, "a grid nickname (letters, digits, _ -)")
    if key == "working_group":
        return _word(field, value, _GROUP, "a working group, e.g. AP_HIGGS or /atlas/phys-higgs")
    return _word(field, value, _SITE, "a PanDA/Rucio name (letters, digits, . _ -)")


def sbatch_extra(options: dict[str, Any]) -> list[str]:
    """``slurm.options`` as ``--key[=value]`` words (checked; see the module docstring):
    true or null: the bare flag; false: left out (``requeue: false`` is ``--no-requeue``)."""
    out: list[str] = []
    for raw_key, value in options.items():
        key = str(raw_key).lstrip("-")
        field = f"slurm.options.{raw_key}"
        problem = _option_problem(field, key, value)
        _raise(problem)
        flag = _flag_value(key, value)
        if flag is True:
            out.append(f"--{key}")
        elif flag is False:
            if key in NEGATED:
                out.append(f"--{NEGATED[key]}")
        else:
            out.append(f"--{key}={_text(value)}")
    return out


def option_keys(options: dict[str, Any]) -> set[str]:
    return {str(k).lstrip("-") for k in options}


def _text(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _flag_value(key: str, value: object) -> bool | None:
    """True/False for a flag given as such (or a flag-only option given yes/no), else None."""
    if value is True or value is None:
        return True
    if value is False:
        return False
    if key in FLAG_ONLY:
        text = str(value).strip().lower()
        return True if text in _TRUE else False if text in _FALSE else None
    return None


def _option_problem(field: str, key: str, value: object) -> str | None:
    if not _OPTION_KEY.fullmatch(key):
        return (f"{field}: {_shown(key)} is not an sbatch option name (letters, digits and -, "
                "e.g. gpus-per-task)")
    if key in RESERVED:
        return f"{field}: gridml sets --{key} itself (it finds its jobs and logs by it); remove it"
    if key in FLAG_ONLY and _flag_value(key, value) is None:
        return f"{field}: --{key} takes no value; give true or false (got {_shown(value)})"
    if isinstance(value, (bool, type(None))):
        return None
    if isinstance(value, float) and value != value:
        return f"{field}: NaN is not a value; give a number or a word"
    return _word(field, _text(value), _OPTION_VALUE,
                 "one word of letters, digits and . _ , : = @ % + / * & | ! ( ) [ ] -")


# ---- problems for `gridml validate` (the spec's checks) -----------------------------------------
def spec_problems(spec: Any) -> list[Problem]:
    """Every batch-script and task-parameter value of a (validated) spec, checked: a list of
    (location, message) as the spec's checks report them."""
    problems: list[Problem] = []

    def add(loc: tuple[str | int, ...], problem: str | None) -> None:
        if problem is not None:
            problems.append((loc, problem.split(": ", 1)[1] if ": " in problem else problem))

    slurm = getattr(spec, "slurm", None)
    if slurm is not None:
        for key in ("partition", "account", "qos"):
            value = getattr(slurm, key, None)
            if value is not None:
                add(("slurm", key), _word(f"slurm.{key}", value, _NAMES,
                                          "a Slurm name (letters, digits, . _ -; lists with ,)"))
        if getattr(slurm, "constraint", None) is not None:
            add(("slurm", "constraint"), _word("slurm.constraint", slurm.constraint, _CONSTRAINT,
                                               "a Slurm feature expression, e.g. a100 or a100&ib"))
        for key, value in (getattr(slurm, "options", None) or {}).items():
            add(("slurm", "options", str(key)),
                _option_problem(f"slurm.options.{key}", str(key).lstrip("-"), value))
        for i, line in enumerate(getattr(slurm, "setup", None) or []):
            if "\n" in str(line) or "\r" in str(line) or "\x00" in str(line):
                add(("slurm", "setup", i), f"slurm.setup.{i}: one shell line per item (it holds "
                    "a newline or NUL); split it into several items")
        problems += _packing_problems(spec, slurm)
    panda = getattr(spec, "panda", None)
    if panda is not None:
        for key in ("site", "nickname", "working_group", "vo", "rse"):
            value = getattr(panda, key, None)
            if value is not None:
                add(("panda", key), _panda_problem(f"panda.{key}", value))
    resources = getattr(spec, "resources", None)
    if resources is not None:
        if getattr(resources, "container", None) is not None:
            add(("resources", "container"),
                _word("resources.container", resources.container, _IMAGE,
                      "an image: docker://repo/name:tag, oras://..., or a path"))
        try:
            seconds = resources.walltime_s
        except (ValueError, TypeError, AttributeError):
            seconds = 1
        if not seconds > 0:
            add(("resources", "walltime"), f"resources.walltime: {resources.walltime!r} is not "
                "a walltime; give a positive duration, e.g. 30m or 2h")
    return problems


def _packing_problems(spec: Any, slurm: Any) -> list[Problem]:
    """slurm.pack / slurm.array against the rest of the spec (docs/hpc.md, packed allocations)."""
    out: list[Problem] = []
    pack, array = getattr(slurm, "pack", None), bool(getattr(slurm, "array", False))
    if pack and array:
        out.append((("slurm", "array"), "slurm.pack and slurm.array exclude each other: packed "
                    "trials are job steps of allocations, not array tasks; keep one of them"))
    if getattr(slurm, "array_throttle", None) is not None and not array:
        out.append((("slurm", "array_throttle"), "slurm.array_throttle needs slurm.array: true"))
    if getattr(slurm, "pack_walltime", None) is not None and not pack:
        out.append((("slurm", "pack_walltime"), "slurm.pack_walltime needs slurm.pack: K"))
    resources = getattr(spec, "resources", None)
    if pack and resources is not None:
        if getattr(resources, "nodes", 1) > 1:
            out.append((("slurm", "pack"), f"slurm.pack packs one-node trials; resources.nodes is "
                        f"{resources.nodes}: leave pack out or set resources.nodes: 1"))
        training = getattr(spec, "training", None)
        if getattr(training, "horovod", "gloo") == "mpi":
            out.append((("slurm", "pack"), "slurm.pack runs each trial as one job step whose "
                        "launcher starts the ranks; training.horovod: mpi needs an allocation of its "
                        "own: use horovod: gloo or leave pack out"))
        if getattr(slurm, "pack_walltime", None) is not None:
            try:
                short = slurm.pack_walltime_s < resources.walltime_s + 60
            except (ValueError, TypeError, AttributeError):
                short = False
            if short:
                out.append((("slurm", "pack_walltime"), f"slurm.pack_walltime {slurm.pack_walltime!r} "
                            f"leaves no room for a trial of resources.walltime {resources.walltime!r} "
                            "(the allocation needs the trial's walltime + 1 min); raise it"))
    return out
