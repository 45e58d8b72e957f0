"""Read a YAML file keeping the line of every key, and turn pydantic errors into
``file:line: field: what is wrong and how to fix it`` lines (raised as one SpecError)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from gridml.errors import SpecError

M = TypeVar("M", bound=BaseModel)
Loc = tuple[str | int, ...]


def line_map(text: str) -> tuple[dict[Loc, int], list[str]]:
    """Every key path of the document -> its 1-based line; plus duplicate-key problems."""
    lines: dict[Loc, int] = {}
    dups: list[str] = []

    def walk(node: yaml.Node | None, path: Loc) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                sub = path + (key.value,)
                if sub in lines:
                    dups.append(f"{key.start_mark.line + 1}: {dotted(sub)}: duplicate key "
                                f"(first on line {lines[sub]}); keep one")
                lines[sub] = key.start_mark.line + 1
                walk(value, sub)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                lines[path + (i,)] = item.start_mark.line + 1
                walk(item, path + (i,))

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is not None:
        lines[()] = root.start_mark.line + 1
        walk(root, ())
    return lines, dups


def dotted(loc: Loc) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def line_of(lines: dict[Loc, int], loc: Loc) -> int:
    """The line of ``loc``, or of its closest parent that has one."""
    for cut in range(len(loc), -1, -1):
        if loc[:cut] in lines:
            return lines[loc[:cut]]
    return 1


def read_yaml(path: Path) -> tuple[dict[str, Any], dict[Loc, int]]:
    """Parse ``path``; missing file, YAML syntax errors, duplicates, non-mappings -> SpecError."""
    if not path.is_file():
        raise SpecError(f"{path}: no such file", hint="check the path of the prepare spec")
    text = path.read_text()
    try:
        data = yaml.safe_load(text)
        lines, dups = line_map(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise SpecError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}; "
                        "fix the syntax (indentation, colons, quotes)") from None
    if dups:
        raise SpecError([f"{path}:{d}" for d in dups])
    if not isinstance(data, dict):
        raise SpecError(f"{path}:1: (top level): the spec must be a mapping "
                        "(name:, inputs:, preprocess:, ...); see docs/prepare.md")
    return data, lines


def _message(err: Any) -> tuple[Loc, str]:
    loc: Loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p))
    msg: str = err["msg"]
    kind = err["type"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
        head, sep, rest = msg.partition(": ")
        if sep and " " not in head:  # "fractions: must sum to 1 ..." names a sub-field
            loc, msg = loc + tuple(head.split(".")), rest
    elif kind == "extra_forbidden":
        msg = "unknown key; remove it or check its spelling (see docs/prepare.md)"
    elif kind == "missing":
        msg = "required field is missing; add it"
    elif kind in ("literal_error", "enum"):
        msg = f"{msg} (got {err.get('input')!r})"
    else:
        msg = f"{msg} (got {err.get('input')!r}); fix the value"
    return loc, msg


def validate(model: type[M], data: dict[str, Any], path: Path, lines: dict[Loc, int]) -> M:
    """Validate ``data`` against ``model``; every problem becomes one located line."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            loc, msg = _message(err)
            problems.append(f"{path}:{line_of(lines, loc)}: {dotted(loc)}: {msg}")
        raise SpecError(problems) from None


def located(path: Path, lines: dict[Loc, int], loc: Loc, msg: str) -> str:
    """One problem line for a check done after validation."""
    return f"{path}:{line_of(lines, loc)}: {dotted(loc)}: {msg}"
