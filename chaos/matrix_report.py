"""The seed matrix's summary: a terminal table and an HTML index linking each run's report.

    console.print(summary_table(result))
    write_index(result, out_dir)        # <out_dir>/index.html
"""

from __future__ import annotations

import html
from pathlib import Path

from rich.table import Table

from chaos.matrix import MatrixResult, Row
from chaos.real_clients.wiring import MQLAB

INDEX_HTML = "index.html"
COLUMNS = ("suite", "seed", "scale", "mode", "verdict", "failing checks", "duration s", "faults",
           "acked", "allowed loss", "unallowed loss", "run dir")
_STYLE = {"valid": "[green]valid[/]", "INVALID": "[bold red]INVALID[/]"}


def _cells(r: Row) -> list[str]:
    def num(v: int | None) -> str:
        return "-" if v is None else f"{v:,}"

    failing = ", ".join(r.failing_checks) or (r.error or "")[:80]
    suite = r.suite + "".join(f" ({x})" for x in (r.topology, r.client) if x not in ("single", MQLAB))
    return [suite, str(r.seed), f"{r.time_scale:g}", r.mode or "-", r.verdict, failing, f"{r.duration_s:.0f}",
            num(r.faults_injected), num(r.acked), num(r.allowed_loss), num(r.unallowed_loss), r.run_dir]


def summary_table(result: MatrixResult, title: str = "chaos matrix") -> Table:
    table = Table(title=title)
    for col in COLUMNS:
        table.add_column(col, justify="right" if col in ("seed", "duration s", "faults", "acked",
                                                         "allowed loss", "unallowed loss") else "left")
    for r in result.rows:
        cells = _cells(r)
        cells[4] = _STYLE.get(r.verdict, f"[yellow]{r.verdict}[/]")
        table.add_row(*cells)
    return table


def disagreement_lines(result: MatrixResult) -> list[str]:
    return [f"{d['suite']} seed {d['seed']}" + (f" ({d['mode']})" if d.get("mode") else "")
            + (f" on {d['topology']}" if d.get("topology", "single") != "single" else "")
            + (f" with {d['client']}" if d.get("client", MQLAB) != MQLAB else "") + ": verdict differs "
            "between time scales: " + ", ".join(f"{k} {v}" for k, v in d["verdicts"].items())
            for d in result.scale_disagreements]


def unreached_lines(result: MatrixResult) -> list[str]:
    """One line per suite whose claimed paths no run of the matrix reached."""
    return [f"{suite}: claimed but reached by no run: {', '.join(paths)}"
            for suite, paths in result.unreached_claims.items()]


def write_index(result: MatrixResult, out_dir: Path) -> Path:
    """index.html: the summary table, each row linking its run's report (or its run dir)."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    rows = []
    for r in result.rows:
        cells = [html.escape(c) for c in _cells(r)]
        target = r.report or r.run_dir
        cells[-1] = f'<a href="{html.escape(target)}">{html.escape(r.run_dir)}</a>'
        cls = {"valid": "ok", "INVALID": "bad"}.get(r.verdict, "unknown")
        rows.append(f'<tr class="{cls}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    flags = "".join(f"<li>{html.escape(line)}</li>" for line in disagreement_lines(result))
    unreached = "".join(f"<li>{html.escape(line)}</li>" for line in unreached_lines(result))
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>chaos matrix</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }} table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: 3px 8px; text-align: left; }}
tr.ok td:nth-child(5) {{ color: #070; }} tr.bad td:nth-child(5) {{ color: #b00; font-weight: bold; }}
tr.unknown td:nth-child(5) {{ color: #a60; }}
</style></head><body>
<h1>chaos matrix</h1>
<p>{len(result.rows)} runs; exit code {result.exit_code}{" (interrupted)" if result.interrupted else ""}.</p>
{f"<h2>verdicts that differ between time scales</h2><ul>{flags}</ul>" if flags else ""}
{f"<h2>claimed coverage paths no run reached</h2><ul>{unreached}</ul>" if unreached else ""}
<table><tr>{head}</tr>
{chr(10).join(rows)}
</table></body></html>
"""
    path = out_dir / INDEX_HTML
    path.write_text(page, encoding="utf-8")
    return path
