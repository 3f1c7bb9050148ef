"""The web app of `mqlab serve`: two pages and the JSON they poll.

    GET /                 the live page (static/live.html): processes, faults, topics, groups
    GET /runs             the runs page (static/runs.html): past runs with filters
    GET /api/live?run=ID  one cluster now (`harness.serve.live`); no run: `--run-dir`'s
    GET /api/clusters     the clusters a live page can watch: `--run-dir`'s and the live ones under --runs
    GET /api/runs?...     the runs under --runs (`harness.serve.runs`), filtered by suite, verdict,
                          client, kind, parent, seed and q (text)
    GET /files/PATH       any file under --runs (each run's report.html, verdict.json, a matrix's index.html)

Every endpoint answers JSON, errors included (`{"error": "..."}` saying what to do next): a page
never breaks on a cluster that is gone or a run dir that is half written.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from harness.serve.live import LiveRegistry
from harness.serve.runs import VERDICTS, filter_runs, list_runs

STATIC_DIR = Path(__file__).parent / "static"
_NO_CACHE = {"Cache-Control": "no-store"}


def create_app(runs_root: Path, run_dir: Path | None = None) -> Starlette:
    """The app over `runs_root` (past and live runs) and, when given, the cluster in `run_dir`."""
    registry = LiveRegistry(runs_root, run_dir)

    def page(name: str):  # type: ignore[no-untyped-def]
        def endpoint(request: Request) -> FileResponse:
            return FileResponse(STATIC_DIR / name, headers=_NO_CACHE)
        return endpoint

    def live(request: Request) -> JSONResponse:
        try:
            cluster = registry.get(request.query_params.get("run", ""))
        except LookupError as exc:
            return JSONResponse({"error": str(exc)}, status_code=404, headers=_NO_CACHE)
        return JSONResponse(cluster.snapshot(), headers=_NO_CACHE)

    def clusters(request: Request) -> JSONResponse:
        listing = list_runs(runs_root)
        live_runs = [{"id": r.id, "suite": r.suite, "seed": r.seed, "kind": r.kind} for r in listing.runs if r.live]
        fixed = {"id": "", "run_dir": str(run_dir)} if run_dir is not None else None
        return JSONResponse({"run_dir": fixed, "live": live_runs, "runs_root": str(runs_root)}, headers=_NO_CACHE)

    def runs(request: Request) -> JSONResponse:
        listing = list_runs(runs_root)
        rows = filter_runs(listing.runs, request.query_params)
        body: dict[str, Any] = listing.to_json()
        body["runs"] = [r.to_json() for r in rows]
        body["total"] = len(listing.runs)
        body["facets"] = {"suite": sorted({r.suite for r in listing.runs if r.suite}),
                          "client": sorted({r.client or "mqlab" for r in listing.runs if r.kind == "chaos"}),
                          "verdict": [v for v in VERDICTS if any(r.verdict == v for r in listing.runs)]}
        return JSONResponse(body, headers=_NO_CACHE)

    def files(request: Request) -> FileResponse | JSONResponse:
        root = runs_root.resolve()
        path = (root / request.path_params["path"]).resolve()
        if path.is_dir():
            path = path / "index.html"
        if (root not in path.parents) or not path.is_file():
            return JSONResponse({"error": f"no file {request.path_params['path']!r} under {runs_root}: the runs page "
                                 "links the files each run has"}, status_code=404)
        return FileResponse(path, headers=_NO_CACHE)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            registry.close()

    app = Starlette(routes=[
        Route("/", page("live.html")),
        Route("/runs", page("runs.html")),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
        Route("/api/live", live),
        Route("/api/clusters", clusters),
        Route("/api/runs", runs),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
        Route("/files/{path:path}", files),
    ], lifespan=lifespan)
    app.state.registry = registry
    return app
