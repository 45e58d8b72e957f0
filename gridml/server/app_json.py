"""``SafeJSON``: the API's JSON responses, strict (no NaN/Infinity: a diverged loss is null)."""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi.responses import JSONResponse


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


class SafeJSON(JSONResponse):
    """JSON without NaN/Infinity (a diverged loss is reported as null, never a 500)."""

    def render(self, content: Any) -> bytes:
        try:
            return json.dumps(content, ensure_ascii=False, allow_nan=False,
                              separators=(",", ":")).encode()
        except ValueError:
            return json.dumps(_finite(content), separators=(",", ":")).encode()
