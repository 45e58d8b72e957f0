"""An external optimizer driving a gridml campaign over the metrics API: scikit-optimize's
``Optimizer`` in a plain ask -> enqueue -> wait -> tell loop, speaking only HTTP to gridml.

    gridml submit spec.yaml            # spec with search.algorithm: external; prints URL + token
    python examples/external_skopt.py --study NAME           # reads $GRIDML_HOME/runs/NAME/api.json
    python examples/external_skopt.py --url URL --token TOKEN --study NAME   # e.g. a gridml serve

Each round it asks the optimizer for as many points as the campaign runs at once
(``search.parallel``), enqueues them (``POST /api/v1/studies/{study}/trials``; the campaign runs
them in that order), waits until they have finished (``GET /api/v1/trials/{id}``), tells the
optimizer their objectives, and repeats until ``search.max_trials`` points have run; then it
closes the study (``POST /api/v1/studies/{study}/close``), which ends the campaign. Run again
after a crash, it tells the optimizer the trials already there and carries on.

The search space is the study's ``search.space`` (from its spec, read over the API), or
``--space '{"lr": {"type": "real", "low": 1e-4, "high": 0.1, "log": true}, ...}'``.
Nothing of gridml is imported: only the standard library and scikit-optimize.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

FINISHED = ("completed", "failed", "pruned", "killed")


class ApiError(Exception):
    pass


class Api:
    """The few calls this client makes, with a bearer token and retries while the API is busy."""

    def __init__(self, url: str, token: str, retries: int = 8) -> None:
        self.url, self.token, self.retries = url.rstrip("/"), token, retries

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(self.url + path, data=data, method=method, headers={
                "Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=30) as reply:
                    return json.loads(reply.read() or b"null")
            except urllib.error.HTTPError as exc:
                if exc.code in (502, 503, 504) and attempt < self.retries:
                    time.sleep(0.5 * 2 ** attempt)
                    continue
                raise ApiError(_error_line(method, path, exc)) from None
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                if attempt < self.retries:
                    time.sleep(0.5 * 2 ** attempt)
                    continue
                raise ApiError(f"{method} {self.url}{path}: {exc}; is the campaign "
                               f"(gridml submit / gridml serve) still running?") from None
        raise AssertionError("unreachable")


def _error_line(method: str, path: str, exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read())
    except ValueError:
        body = {}
    detail = body.get("detail") or exc.reason
    hint = f" ({body['hint']})" if body.get("hint") else ""
    return f"{method} {path}: HTTP {exc.code}: {detail}{hint}"


def dimensions(space: dict[str, Any]) -> tuple[list[str], list[Any]]:
    """skopt dimensions for a gridml ``search.space``."""
    from skopt.space import Categorical, Integer, Real

    names, dims = [], []
    for name, dim in space.items():
        if dim.get("conditional"):
            raise ApiError(f"search.space.{name}: conditional parameters are not handled by this "
                           f"example; drop `conditional` or pass --space without it")
        kind = dim["type"]
        if kind == "real":
            dims.append(Real(dim["low"], dim["high"],
                             prior="log-uniform" if dim.get("log") else "uniform", name=name))
        elif kind == "int":
            dims.append(Integer(int(dim["low"]), int(dim["high"]),
                                prior="log-uniform" if dim.get("log") else "uniform", name=name))
        elif kind == "categorical":
            dims.append(Categorical(dim["choices"], name=name))
        else:
            raise ApiError(f"search.space.{name}: unknown type {kind!r}")
        names.append(name)
    return names, dims


def plain(value: Any) -> Any:
    """numpy scalars (what skopt returns) as JSON values."""
    return value.item() if hasattr(value, "item") else value


class Campaign:
    def __init__(self, api: Api, study: str, space: dict[str, Any] | None, seed: int,
                 poll_s: float) -> None:
        from skopt import Optimizer

        self.api, self.study, self.poll_s = api, study, poll_s
        summary = api.call("GET", f"/api/v1/studies/{study}")
        search = summary["spec"].get("search") or {}
        self.max_trials = int(search.get("max_trials", 8))
        self.parallel = int(search.get("parallel", 1))
        self.sign = -1.0 if search.get("direction") == "maximize" else 1.0
        space = space or search.get("space")
        if not space:
            raise ApiError(f"study {study} has no search.space: pass --space")
        self.names, dims = dimensions(space)
        self.opt = Optimizer(dims, base_estimator="GP", random_state=seed,
                             n_initial_points=max(2, self.parallel), acq_optimizer="sampling")
        self.told = 0

    def trials(self) -> list[dict[str, Any]]:
        page = self.api.call("GET", f"/api/v1/studies/{self.study}/trials?limit=1000")
        return page["trials"]  # type: ignore[no-any-return]

    def tell(self, finished: list[dict[str, Any]]) -> None:
        xs, ys = [], []
        for trial in finished:
            objective = trial.get("objective")
            if trial["state"] in ("completed", "pruned") and objective is not None \
                    and math.isfinite(objective):
                xs.append([trial["hparams"][n] for n in self.names])
                ys.append(self.sign * float(objective))
            print(f"trial {trial['number']}: {trial['state']}  objective {objective}  "
                  f"{trial['hparams']}", flush=True)
        if xs:
            self.opt.tell(xs, ys)
        self.told += len(finished)

    def wait(self, ids: list[int], timeout: float | None) -> list[dict[str, Any]]:
        start, left = time.monotonic(), set(ids)
        done: dict[int, dict[str, Any]] = {}
        while left:
            for tid in sorted(left):
                trial = self.api.call("GET", f"/api/v1/trials/{tid}")
                if trial["state"] in FINISHED:
                    done[tid] = trial
            left -= set(done)
            if left:
                if timeout is not None and time.monotonic() - start > timeout:
                    raise ApiError(f"trials {sorted(left)} of study {self.study} not finished "
                                   f"after {timeout:.0f} s; raise --timeout")
                time.sleep(self.poll_s)
        return [done[i] for i in ids]

    def run(self, timeout: float | None, close: bool) -> dict[str, Any] | None:
        existing = self.trials()  # a rerun: tell what is there, wait for what still runs
        self.tell([t for t in existing if t["state"] in FINISHED])
        pending = [t["id"] for t in existing if t["state"] not in FINISHED]
        enqueued = len(existing)
        if pending:
            self.tell(self.wait(pending, timeout))
        while enqueued < self.max_trials:
            k = min(self.parallel, self.max_trials - enqueued)
            points = self.opt.ask(n_points=k) if k > 1 else [self.opt.ask()]
            ids = []
            for x in points:
                hparams = {n: plain(v) for n, v in zip(self.names, x)}
                trial = self.api.call("POST", f"/api/v1/studies/{self.study}/trials",
                                      {"hparams": hparams})
                ids.append(trial["id"])
            enqueued += len(ids)
            self.tell(self.wait(ids, timeout))
        best = self.api.call("GET", f"/api/v1/studies/{self.study}")["best"]
        if close:
            self.api.call("POST", f"/api/v1/studies/{self.study}/close")
        return best  # type: ignore[no-any-return]


def connection(args: argparse.Namespace) -> tuple[str, str]:
    """URL and study token: the flags, else runs/<study>/api.json written by `gridml submit`."""
    if args.url and args.token:
        return args.url, args.token
    record = Path(args.api_json) if args.api_json else Path(
        os.environ.get("GRIDML_HOME", Path.home() / ".gridml")) / "runs" / args.study / "api.json"
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError) as exc:
        raise ApiError(f"{record}: cannot read the API record ({exc}); start the campaign with "
                       f"`gridml submit`, or pass --url and --token") from None
    return args.url or data["url"], args.token or data["token"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", required=True, help="the study's name (the spec's name:)")
    parser.add_argument("--url", help="the API, e.g. http://127.0.0.1:8765")
    parser.add_argument("--token", help="the study token")
    parser.add_argument("--api-json", help="the API record (default $GRIDML_HOME/runs/STUDY/api.json)")
    parser.add_argument("--space", help="search space as JSON (default: the study's search.space)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--poll", type=float, default=1.0, help="seconds between status checks")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds to wait for one round of trials (default: no limit)")
    parser.add_argument("--no-close", action="store_true", help="leave the study open at the end")
    args = parser.parse_args(argv)
    try:
        url, token = connection(args)
        space = json.loads(args.space) if args.space else None
        best = Campaign(Api(url, token), args.study, space, args.seed, args.poll).run(
            args.timeout, close=not args.no_close)
    except ApiError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if best:
        print(f"best trial {best['number']}: objective {best['objective']}  {best['hparams']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
