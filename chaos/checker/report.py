"""A self-contained report.html: summary, bounds, inputs, faults, plots (base64 PNG), every check.

No external CSS, scripts or images: the file can be mailed or attached to a CI run.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

from chaos.checker.config import TIMERS, CheckerConfig
from chaos.checker.loader import History
from chaos.checker.verdict import CheckResult, Verdict

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1180px;color:#222;padding:0 16px}
h1{margin-bottom:4px}h2{margin-top:34px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;margin:8px 0 14px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;
vertical-align:top;font-size:12.5px}th{background:#f4f4f4}
.v-true{background:#dff3df;color:#135f13;font-weight:600}.v-false{background:#fbdcdc;color:#8a1212;font-weight:600}
.v-unknown{background:#fff1cc;color:#7a5600;font-weight:600}.badge{padding:2px 8px;border-radius:4px}
.def{background:#f7f7fa;border-left:3px solid #99a;padding:6px 10px;margin:6px 0;font-size:13px}
img{max-width:100%;border:1px solid #eee;margin:6px 0}code,pre{font-size:12px}
pre{background:#f7f7f7;padding:8px;overflow-x:auto}.muted{color:#777}
tr.zero td{color:#999;background:#fafafa}tr.missing td{color:#8a1212;background:#fff1cc}
"""


def _v(valid: Any) -> str:
    key = {True: "true", False: "false"}.get(valid, "unknown")
    text = {True: "valid", False: "INVALID"}.get(valid, "unknown")
    return f'<span class="badge v-{key}">{text}</span>'


def _e(value: Any) -> str:
    if isinstance(value, dict | list):
        return html.escape(json.dumps(value, default=str))
    return html.escape("" if value is None else str(value))


def _table(records: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    if not records:
        return '<p class="muted">none</p>'
    if columns is None:
        columns = []
        for r in records:
            columns += [k for k in r if k not in columns]
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_e(r.get(c))}</td>" for c in columns) + "</tr>" for r in records)
    return f"<table><tr>{head}</tr>{body}</table>"


def _kv(d: dict[str, Any]) -> str:
    return _table([{"what": k, "value": v} for k, v in d.items()], ["what", "value"])


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _check_section(c: CheckResult) -> str:
    parts = ""
    if c.parts:
        parts = _table([{"part": k, "valid": {True: "valid", False: "INVALID", None: "skipped"}.get(v, str(v)),
                         "skipped because": c.skipped.get(k, "")} for k, v in c.parts.items()])
    reason = f"<p><b>{_e(c.reason)}</b></p>" if c.reason else ""
    error = f"<pre>{_e(c.error)}</pre>" if c.error else ""
    measurements = ""
    if c.measurements:
        measurements = f"<h4>measurements ({len(c.measurements)}, first 50)</h4>" + _table(c.measurements[:50])
    return (f'<h3 id="check-{_e(c.name)}">{_e(c.name)} {_v(c.valid)}</h3>{reason}{error}'
            f'<div class="def">{_e(c.definition)}</div>'
            f"<h4>counts</h4>{_kv(c.counts)}{parts}"
            f"<h4>examples ({len(c.examples)})</h4>{_table(c.examples)}{measurements}"
            f'<p class="muted">{c.seconds:.2f} s</p>')


def _findings_line(verdict: Verdict) -> str:
    found = verdict.info.get("client_findings")
    if not isinstance(found, dict):
        return ""
    broker = {True: "valid", False: "INVALID"}.get(verdict.valid, "unknown")  # type: ignore[call-overload]
    return (f'<p><b>broker verdict: {broker}; <a href="#client-findings">client findings: '
            f'{_e(found.get("count", "?"))}</a></b> (findings never change the verdict)</p>')


def _findings_section(verdict: Verdict) -> str:
    found = verdict.info.get("client_findings")
    if not isinstance(found, dict):
        return ""
    kinds = _table([{"kind": k, "found": found.get("by_kind", {}).get(k, 0), "what": d}
                    for k, d in (found.get("kinds") or {}).items()])
    note = f"<p><b>{_e(found['error'])}</b></p>" if found.get("error") else ""
    return (f'<h2 id="client-findings">client findings ({_e(found.get("count", 0))})</h2>{note}{kinds}'
            f'<h3>evidence (first {_e(len(found.get("findings", [])))})</h3>{_table(found.get("findings", []))}')


def _coverage_line(verdict: Verdict) -> str:
    counts = verdict.info.get("coverage")
    claims = verdict.info.get("coverage_claims") or []
    if not isinstance(counts, dict):
        return ""
    missing = verdict.info.get("coverage_missing") or []
    what = (f"{len(claims) - len(missing)} of {len(claims)} claimed paths reached"
            + (f"; not reached: {', '.join(missing)}" if missing else "")) if claims else "the suite claims no path"
    return (f'<p><b><a href="#coverage">coverage</a>: {_e(what)}</b> '
            f"(coverage never changes the verdict)</p>")


def _coverage_section(verdict: Verdict) -> str:
    """Every path with its meaning and count; zero rows greyed, a claimed path never reached marked."""
    from chaos.checker.coverage_paths import PATHS

    counts = verdict.info.get("coverage")
    error = verdict.info.get("coverage_error")
    note = f"<p><b>{_e(error)}</b></p>" if error else ""
    if not isinstance(counts, dict):
        return f'<h2 id="coverage">coverage</h2>{note}'
    claims = set(verdict.info.get("coverage_claims") or [])
    rows = []
    for p in PATHS:
        n = counts.get(p.name, 0)
        cls = "missing" if n == 0 and p.name in claims else ("zero" if n == 0 else "")
        claimed = "claimed" + (", NOT REACHED" if n == 0 else "") if p.name in claims else ""
        rows.append(f'<tr class="{cls}"><td>{_e(p.name)}</td><td>{_e(p.meaning)}</td><td>{n:,}</td>'
                    f"<td>{_e(claimed)}</td><td>{_e(p.counted)}</td></tr>")
    head = "<tr><th>path</th><th>meaning</th><th>count</th><th>suite</th><th>counted from</th></tr>"
    return f'<h2 id="coverage">coverage</h2>{note}<table>{head}{"".join(rows)}</table>'


def render(h: History, cfg: CheckerConfig, verdict: Verdict) -> str:
    from chaos.checker import plot_routes, plots

    b = cfg.bounds
    summary = "".join(
        f'<tr><td><a href="#check-{_e(c.name)}">{_e(c.name)}</a></td><td>{_v(c.valid)}</td>'
        f"<td>{_e(c.reason)}</td><td>{c.seconds:.2f}</td></tr>" for c in verdict.checks.values())
    summary += "".join(f'<tr><td>{_e(name)}</td><td class="muted">set aside</td><td>{_e(why)}</td><td></td></tr>'
                       for name, why in (verdict.info.get("checks_set_aside") or {}).items())
    summary = f"<table><tr><th>check</th><th>verdict</th><th>reason</th><th>seconds</th></tr>{summary}</table>"
    timers = _table([{"symbol": k, "ms": b.timers[k], "meaning": TIMERS[k], "source": b.sources[k]} for k in TIMERS])
    derived = _table([{"bound": k, "ms": v, "formula": f} for k, (v, f) in b.derived().items()])
    data = plots.plot_data(h)
    figures = [
        ("send and delivery rates", plots.render_rates(h, data)),
        ("latency percentiles", plots.render_latency(h, data)),
        ("queue ownership", plots.render_ownership(h, data)),
        ("routes and ownership per broker group", plot_routes.render_route_ownership(h)),
        ("offsets per queue", plots.render_offsets(h, data)),
    ]
    overall = data["latency_overall"]
    faults = _table([{**w.to_json(), "start_s": round((w.start_ms - h.t0) / 1000, 3),
                      "end_s": round((w.end_ms - h.t0) / 1000, 3)} for w in h.faults])
    exits = _table([{"node": e.node, "t_s": round((e.t_ms - h.t0) / 1000, 3), "expected": e.expected,
                     "exit_code": e.exit_code, "signal": e.signal} for e in h.exits])
    storage = _table([{"op": f.op, "node": f.node, "t_s": round((f.start_ms - h.t0) / 1000, 3),
                       "what": json.dumps(f.detail.get("store", {}).get("commitlog") or
                                          {k: f.detail.get(k) for k in ("file", "phys_offset", "bytes", "msg_ids")
                                           if k in f.detail})[:300]} for f in h.storage_faults])
    stats = h.stats
    inputs = _table([{"history": k, "files": h.present.get(k, 0), "rows": stats["rows"].get(k, 0),
                      "unreadable lines": stats["unreadable_lines"].get(k, 0)} for k in h.present])
    title = f"mqlab chaos check: {verdict.suite or (h.run_dir.name if h.run_dir else 'history')}"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{_e(title)}</title>
<style>{_CSS}</style></head><body>
<h1>{_e(title)} {_v(verdict.valid)}</h1>{_findings_line(verdict)}{_coverage_line(verdict)}
<p class="muted">run dir {_e(verdict.run_dir)} · suite {_e(verdict.suite)} · seed {_e(verdict.seed)} ·
span {(h.t_end - h.t0) / 1000:.1f} s · time scale x{b.scale:g} · slack {b.slack_ms} ms + {b.slack_ratio:g} x bound</p>
<h2>summary</h2>{summary}
{_coverage_section(verdict)}
<h2>plots</h2>{"".join(f"<h3>{_e(name)}</h3>{_img(png, name)}" for name, png in figures)}
<h3>latency overall</h3>{_table([{"kind": k, **v} for k, v in overall.items()])}
<h2>faults</h2>{faults}<h3>storage faults (power loss: the store cut; corrupt: the record flipped)</h3>{storage}
<h3>unexpected and expected exits</h3>{exits}
<h2>checks</h2>{"".join(_check_section(c) for c in verdict.checks.values())}{_findings_section(verdict)}
<h2>bounds</h2><h3>timers</h3>{timers}<h3>derived</h3>{derived}
<h2>inputs</h2>{inputs}<h3>event kinds</h3>{_kv(stats.get("event_kinds", {}))}
</body></html>
"""


def write_report(h: History, cfg: CheckerConfig, verdict: Verdict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(render(h, cfg, verdict), encoding="utf-8")
    tmp.replace(path)
    return path
