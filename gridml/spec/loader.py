"""Load a YAML spec into a typed model, with errors as ``file:line: field: problem (fix)``."""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from gridml.errors import SpecError

M = TypeVar("M", bound=BaseModel)
Loc = tuple[str | int, ...]


# Limits on what a YAML or JSON input may hold (a spec, a phpo IN, a search space): a spec is a
# few kB; these stop an alias bomb, a 5,000-deep nesting or a runaway file with one clear line
# before anything grows (memory) or recurses (the stack).
MAX_INPUT_BYTES = 8 * 1024 * 1024
MAX_DEPTH = 64  # nested mappings/lists
MAX_NODES = 200_000  # values once aliases are expanded


class InputLimit(ValueError):
    """An input past one of the limits (the message names which, and by how much)."""


class _LimitedLoader(yaml.SafeLoader):
    """SafeLoader that refuses nesting deeper than MAX_DEPTH while composing (before Python's
    recursion limit is reached)."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise InputLimit(f"{mark.line + 1}: nested more than {MAX_DEPTH} levels deep; "
                                 "flatten it")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def check_size(raw: bytes | str, where: str, limit: int = MAX_INPUT_BYTES) -> None:
    if len(raw) > limit:
        raise InputLimit(f"{where}: {len(raw) / 2**20:.1f} MiB, more than the "
                         f"{limit / 2**20:.0f} MiB an input may have; give a smaller file")


def json_depth_ok(text: str, limit: int = MAX_DEPTH) -> bool:
    """No JSON nesting deeper than ``limit`` (brackets outside strings)."""
    depth, in_str, esc = 0, False, False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def load_json(text: str, where: str) -> Any:
    """``json.loads`` within the input limits (size, depth): InputLimit names the limit."""
    check_size(text, where)
    if not json_depth_ok(text):
        raise InputLimit(f"{where}: nested more than {MAX_DEPTH} levels deep; flatten it")
    import json

    return json.loads(text)


def line_map(text: str) -> tuple[dict[Loc, int], list[str]]:
    """Map every key path of a YAML document to its (1-based) line; report duplicate keys.
    InputLimit: nesting past MAX_DEPTH, or more than MAX_NODES values with aliases expanded."""
    lines: dict[Loc, int] = {}
    dups: list[str] = []
    root = yaml.compose(text, Loader=_LimitedLoader)
    seen = [0]

    def walk(node: yaml.Node | None, path: Loc) -> None:
        seen[0] += 1
        if seen[0] > MAX_NODES:
            raise InputLimit(f"{node.start_mark.line + 1 if node else 1}: more than {MAX_NODES} "
                             "values once its aliases (*name) are expanded (an alias bomb?); "
                             "write the values out, or use fewer aliases")
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                sub = path + (key.value,)
                if sub in lines:
                    dups.append(f"{key.start_mark.line + 1}: {_dotted(sub)}: duplicate key "
                                f"(first on line {lines[sub]}); keep one")
                lines[sub] = key.start_mark.line + 1
                walk(value, sub)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                lines[path + (i,)] = item.start_mark.line + 1
                walk(item, path + (i,))

    if root is not None:
        lines[()] = root.start_mark.line + 1
        walk(root, ())
    return lines, dups


def _dotted(loc: Loc) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def line_of(lines: dict[Loc, int], loc: Loc) -> int:
    for cut in range(len(loc), -1, -1):
        if loc[:cut] in lines:
            return lines[loc[:cut]]
    return 1


def read_yaml(path: Path, *, kind: str = "spec", sections: str = "name:, payload:, ..."
              ) -> tuple[dict[str, Any], dict[Loc, int]]:
    """Parse ``path``; missing file, YAML syntax errors, duplicate keys and non-mapping
    documents become SpecError."""
    if not path.is_file():
        raise SpecError(f"{path}: no such file", hint=f"check the path of the {kind}")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SpecError(f"{path}: cannot be read ({exc.strerror})",
                        hint=f"check the {kind}'s path and permissions") from None
    try:
        check_size(raw, str(path))
    except InputLimit as exc:
        raise SpecError(str(exc)) from None
    if b"\x00" in raw:
        raise SpecError(f"{path}:1: not a text file (it holds NUL bytes); give the YAML {kind}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise SpecError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                        f"{exc.start}); save the {kind} as UTF-8, e.g. "
                        f"`iconv -f latin1 -t utf-8 {path.name}`") from None
    try:
        lines, dups = line_map(text)  # first: it refuses alias bombs and deep nesting
        data = yaml.load(text, Loader=_LimitedLoader)  # a SafeLoader with limits
    except InputLimit as exc:
        raise SpecError(f"{path}:{exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise SpecError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}; "
                        "fix the syntax (indentation, colons, quotes)") from None
    if dups:
        raise SpecError([f"{path}:{d}" for d in dups])
    if not isinstance(data, dict):
        raise SpecError(f"{path}:1: (top level): the {kind} must be a mapping of sections ({sections})")
    return data, lines


def _fields_at(model: Any, loc: Loc) -> list[str]:
    """The field names of the (pydantic or dataclass) model found at ``loc`` under ``model``."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or current is None:
            continue
        if isinstance(current, type) and issubclass(current, BaseModel):
            info = current.model_fields.get(str(part))
            current = _model_in(info.annotation) if info is not None else None
        elif dataclasses.is_dataclass(current):
            hints = typing.get_type_hints(current)
            current = _model_in(hints.get(str(part)))
        else:
            return []
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    if dataclasses.is_dataclass(current):
        return [f.name for f in dataclasses.fields(current)]
    return []


def _model_in(annotation: Any) -> Any:
    """The model class inside an annotation (``X``, ``X | None``, ``dict[str, X]``), or None."""
    if isinstance(annotation, type) and (issubclass(annotation, BaseModel)
                                         or dataclasses.is_dataclass(annotation)):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _unknown_key(model: Any, loc: Loc, reference: str) -> str:
    what = "option" if loc[-2:-1] == ("options",) else "key"
    names = _fields_at(model, loc[:-1])
    close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
    if close:
        return f"unknown {what}; did you mean {close[0]}?"
    return f"unknown {what}; remove it or check its spelling (see {reference})"


def _message(err: Mapping[str, Any], reference: str, model: Any = None) -> tuple[Loc, str]:
    loc: Loc = tuple(p for p in err["loc"]
                     if not (isinstance(p, str) and (p.startswith("function-") or "[" in p)))
    msg: str = err["msg"]
    kind = err["type"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
        head, sep, rest = msg.partition(": ")
        if sep and " " not in head:  # "low: must be > 0 ..." names a sub-field
            loc, msg = loc + tuple(head.split(".")), rest
    elif kind in ("extra_forbidden", "unexpected_keyword_argument"):
        msg = _unknown_key(model, loc, reference)
    elif kind == "missing":
        msg = "required field is missing; add it"
    elif kind in ("literal_error", "enum"):
        msg = f"{msg} (got {err.get('input')!r})"
    else:
        msg = f"{msg} (got {err.get('input')!r}); fix the value"
    return loc, msg


def located(path: Path, lines: dict[Loc, int], loc: Loc, msg: str) -> str:
    """One ``file:line: field: message`` problem line (for checks made after validation)."""
    return f"{path}:{line_of(lines, loc)}: {_dotted(loc)}: {msg}"


def validate_model(model: type[M], data: dict[str, Any], path: Path,
                   lines: dict[Loc, int], *, reference: str = "`gridml schema`") -> M:
    """Validate ``data``; every problem becomes one ``file:line: field: message`` line."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = [located(path, lines, *_message(err, reference, model))
                    for err in exc.errors(include_url=False)]
        raise SpecError(problems) from None
