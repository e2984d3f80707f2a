"""The HTML report of a run or an experiment: one self-contained file.

``run --report``, ``simulate --experiment --report`` and the app's File →
Export report… write it: the experiment's name and caption (a run longer than
one experiment: each one played, with its segments, and its caption), the device,
backend, profile, precision and resolution, the versions, the segment table
with the simulator's predictions (the cells of
:func:`batchscope.engine.report.rows.segment_cells`), plots as PNG data URIs
(:mod:`batchscope.render.charts`), the events, the config and the
experiment files themselves. Qt is imported only to draw (and name its version),
so the CLI can import this module for :func:`experiment_block` at no cost.

Self-contained and safe: nothing is loaded from anywhere (no external CSS,
script, font or image), there is no script at all, and every piece of text
that came from a user or a file (captions, names, paths, error messages, the
TOML) goes through :func:`html.escape`. Made to be read in a 1400 px window,
printed on A4 landscape and on a projector: large type, black on white; the page
never scrolls sideways (a table wider than the page scrolls in its own box;
printed, its type is small enough to fit), plots scale to the column and keep
their category labels whole (:func:`batchscope.render.charts.category_room`).
"""

from __future__ import annotations

import base64
import datetime
import html
import json
import platform
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from batchscope import __version__
from batchscope.config import format_resolution
from batchscope.engine.report.phrases import accuracy_notes
from batchscope.engine.report.rows import (
    COLUMNS,
    FIGURES,
    LIVE_KEYS,
    TEXT_KEYS,
    VERSUS_KEYS,
    has_predictions,
    table_cells,
    with_accuracy,
)
from batchscope.engine.report.segment import too_short
from batchscope.engine.segments import MIN_MEASURED_S

if TYPE_CHECKING:
    from batchscope.engine.snapshot import BusRecords

MAX_EVENTS = 300  # the newest shown; a long soak has thousands


class ReportError(OSError):
    """The report could not be written; ``str()`` names the file and says why."""


#: The page's widest content (px): its column, less its side padding, fits a 1400 px window
#: with room for a scroll bar; what is wider (a table of many columns) scrolls in its box.
PAGE_PX, SIDE_PX = 1360, 16
CONTENT_PX = PAGE_PX - 2 * SIDE_PX

CSS = f"""
@page {{ size: A4 landscape; margin: 12mm; }}
* {{ box-sizing: border-box; }}
body {{ font-family: "DejaVu Sans", "Segoe UI", Helvetica, Arial, sans-serif; color: #000;
  background: #fff; margin: 24px auto; max-width: {PAGE_PX}px; padding: 0 {SIDE_PX}px;
  font-size: 18px; line-height: 1.45; }}
h1 {{ font-size: 34px; margin: 0 0 6px; overflow-wrap: anywhere; }}
h2 {{ font-size: 25px; margin: 34px 0 10px; border-bottom: 3px solid #000; padding-bottom: 4px;
  overflow-wrap: anywhere; }}
h3 {{ font-size: 21px; margin: 22px 0 6px; overflow-wrap: anywhere; }}
p {{ overflow-wrap: anywhere; }}
p.caption {{ font-size: 21px; margin: 4px 0 14px; }}
p.note {{ color: #333; font-size: 16px; }}
.error {{ color: #a00000; font-weight: bold; }}
.scroll {{ max-width: 100%; overflow-x: auto; margin: 8px 0 12px; }}
table {{ border-collapse: collapse; width: 100%; }}
th, td {{ border: 1px solid #555; padding: 4px 7px; text-align: right; vertical-align: top; }}
th {{ background: #e6e6e6; font-weight: bold; }}
td.text, th.text {{ text-align: left; overflow-wrap: break-word; }}
table.segments td.text {{ min-width: 6em; }}
table.facts td.text {{ overflow-wrap: anywhere; }}
td:not(.text) {{ white-space: nowrap; }}
table.segments {{ font-size: 15px; }}
table.segments th {{ font-size: 13px; }}
table.segments th, table.segments td {{ padding: 3px 4px; }}
table.facts {{ width: auto; max-width: 100%; font-size: 17px; }}
table.facts th {{ text-align: left; white-space: nowrap; }}
tr.failed td {{ background: #fde8e8; }}
figure {{ margin: 10px 0 18px; break-inside: avoid; page-break-inside: avoid; }}
figure img {{ display: block; width: 100%; max-width: 100%; height: auto; border: 1px solid #999; }}
.pair {{ display: flex; flex-wrap: wrap; gap: 16px; }}
.pair figure {{ flex: 1 1 420px; min-width: 0; margin: 4px 0; }}
section.segment {{ break-inside: avoid; page-break-inside: avoid; }}
pre {{ background: #f3f3f3; border: 1px solid #999; padding: 10px; font-size: 14px;
  white-space: pre-wrap; overflow-wrap: anywhere;
  font-family: "DejaVu Sans Mono", Consolas, monospace; }}
@media print {{
  body {{ margin: 0; max-width: none; padding: 0; font-size: 11pt; }}
  h1 {{ font-size: 20pt; }} h2 {{ font-size: 15pt; margin-top: 16pt; }} h3 {{ font-size: 12.5pt; }}
  p.caption {{ font-size: 12pt; }} p.note {{ font-size: 9.5pt; }}
  .scroll {{ overflow: visible; }}
  table.segments, table.segments th {{ font-size: 8pt; }} table.facts {{ font-size: 9.5pt; }}
  th, td {{ padding: 2px 3px; }} th {{ background: none; border-bottom-width: 2px; }}
  thead {{ display: table-header-group; }}
  tr, figure, .pair {{ break-inside: avoid; page-break-inside: avoid; }}
  h2, h3 {{ break-after: avoid; page-break-after: avoid; }}
  pre {{ font-size: 8pt; background: none; }}
  figure img {{ border-color: #bbb; }}
}}
"""


def esc(value: Any) -> str:
    """User-controlled text as HTML text (quotes too: it may land in an attribute)."""
    return html.escape(str(value), quote=True)


def scroll(table: str) -> str:
    """A table in its own box: one wider than the page scrolls there, not the page."""
    return f'<div class="scroll">{table}</div>'


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def _figure(png: bytes, alt: str) -> str:
    """A plot; its title is drawn in it, ``alt`` says what it shows to a screen reader."""
    return f"<figure>{_img(png, alt)}</figure>"


def versions() -> dict[str, str]:
    def version(package: str) -> str:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "batchscope": __version__,
        "torch": version("torch"),
        "PySide6": qt_version(),
        "python": platform.python_version(),
    }


def qt_version() -> str:
    import PySide6

    return PySide6.__version__


def _facts(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    cfg = report["config"]
    sources = ", ".join(cfg.get("sources") or []) or "the sample videos"
    facts = [
        ("report", "simulated" if report.get("kind") == "simulate" else "live run"),
        ("device", report.get("device_label") or cfg.get("device", "")),
        ("backend", cfg.get("backend", "")),
        ("profile", cfg.get("profile") or "–"),
        ("precision", cfg.get("precision", "")),
        ("resolution", format_resolution(tuple(cfg["resolution"]))),
        ("fps per session", "each source's own" if cfg.get("fps") is None else f"{cfg['fps']:g}"),
        ("sources", sources),
        ("weights", report.get("weights") or cfg.get("weights", "")),
    ]
    exp = report.get("experiment")
    if exp:
        facts.insert(1, ("experiment file", exp.get("source", "")))
        facts.insert(2, ("duration", f"{exp.get('duration', 0):g} s"))
    facts.append(("versions", ", ".join(f"{k} {v}" for k, v in versions().items())))
    facts.append(("written", datetime.datetime.now().strftime("%Y-%m-%d %H:%M")))
    return facts


def _table(rows: Sequence[Mapping[str, str]], keys: Sequence[str], css: str) -> str:
    def cls(key: str) -> str:
        return ' class="text"' if key in TEXT_KEYS else ""

    head = "".join(f"<th{cls(k)}>{esc(COLUMNS[k].title)}</th>" for k in keys)
    body = []
    for r in rows:
        cells = "".join(f"<td{cls(k)}>{esc(r[k])}</td>" for k in keys)
        body.append(f'<tr class="failed">{cells}</tr>' if r["error"] else f"<tr>{cells}</tr>")
    return scroll(
        f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    )


def _number(value: float | None, digits: int) -> str:
    """A figure to ``digits`` places; "–" where it has none (no fairness without windows)."""
    return "–" if value is None else f"{value:.{digits}f}"


def _overall_table(report: Mapping[str, Any]) -> str:
    head = "".join(f"<th>{esc(label)}</th>" for label, _, _ in FIGURES)
    cells = "".join(f"<td>{_number(fig(report), d)}</td>" for _, fig, d in FIGURES)
    return scroll(
        f'<table class="segments"><thead><tr>{head}</tr></thead><tbody><tr>{cells}</tr></tbody>'
        "</table>"
    )


def _bus_figure(seg: Mapping[str, Any], row: Mapping[str, str], bus: BusRecords) -> str:
    """The segment's last seconds (up to BUS_S) on the device, batch by batch; its title
    says what the segment changed (the row's "changed" cell)."""
    from batchscope.engine.report.bus_layout import bus_layout
    from batchscope.engine.snapshot import BUS_S
    from batchscope.render.bus_chart import bus_chart

    span = min(BUS_S, seg["end_s"] - seg["start_s"])
    lay = bus_layout(bus, seg["end_s"], span=span)
    title = f"Segment {seg['index']} ({row['changed']}): the bus, its last {span:.1f} s"
    return _figure(bus_chart(lay, title), f"segment {seg['index']}: the bus view")


def _segment_sections(
    segments: Sequence[Mapping[str, Any]],
    rows: Sequence[Mapping[str, str]],
    buses: Mapping[int, BusRecords],
) -> list[str]:
    from batchscope.render.charts import latency_percentiles_chart, session_fps_chart

    out = []
    for seg, row in zip(segments, rows, strict=True):
        title = f"Segment {seg['index']}: {row['span']} s · {row['changed']}"
        parts = [f'<section class="segment"><h3>{esc(title)}</h3>']
        if seg.get("caption"):
            parts.append(f'<p class="caption">{esc(seg["caption"])}</p>')
        if seg.get("error"):
            parts.append(f'<p class="error">Not applied: {esc(seg["error"])}</p>')
        if too_short(seg):  # no figures; what the bus did is still worth seeing
            parts.append(
                f'<p class="note">Too short to measure: {seg["measured_s"]:.2f} s after the '
                f"settling second (figures need {MIN_MEASURED_S:g} s).</p>"
            )
            if seg["index"] in buses:
                parts.append(_bus_figure(seg, row, buses[seg["index"]]))
            parts.append("</section>")
            out.append("".join(parts))
            continue
        stable = "stable" if seg["stable"] else "not stable"
        parts.append(
            f'<p class="note">{seg["measured_s"]:.1f} s measured after the settling second; '
            f"{stable} (perf_analyzer's test: over the last three 1 s windows, max ÷ min "
            "≤ 1.1 in throughput and in mean latency).</p>"
        )
        parts.append('<div class="pair">')
        parts.append(_figure(session_fps_chart(seg), f"segment {seg['index']}: fps per session"))
        parts.append(
            _figure(latency_percentiles_chart(seg), f"segment {seg['index']}: latency percentiles")
        )
        parts.append("</div>")
        if seg["index"] in buses:
            parts.append(_bus_figure(seg, row, buses[seg["index"]]))
        parts.append("</section>")
        out.append("".join(parts))
    return out


def build_html(report: Mapping[str, Any], buses: Mapping[int, BusRecords] | None = None) -> str:
    """The whole report as one HTML document (needs a Qt GUI for the plots: offscreen is fine).

    ``buses``: segment index -> the device's records kept at its end (``Snapshot.bus``),
    drawn as that segment's bus view; not part of the JSON report.
    """
    from batchscope.render.charts import segments_fps_chart, segments_latency_chart

    exp = report.get("experiment") or {}
    name = exp.get("name") or ("simulation" if report.get("kind") == "simulate" else "live run")
    segments = report.get("segments") or []
    rows = table_cells(segments)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>BatchScope report: {esc(name)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>BatchScope report: {esc(name)}</h1>",
    ]
    if exp.get("caption"):
        out.append(f'<p class="caption">{esc(exp["caption"])}</p>')
    played = report.get("experiments") or []
    if played and not exp:  # a longer run: each experiment with the segments it played
        items = "".join(
            f"<li>{esc(e['name'])}: {_segments_phrase(e['segments'])}"
            f"{' — ' + esc(e['caption']) if e.get('caption') else ''}</li>"
            for e in played
        )
        out.append(f"<p>Experiments played in this run:</p><ul>{items}</ul>")
    facts = "".join(
        f"<tr><th>{esc(k)}</th><td class='text'>{esc(v)}</td></tr>" for k, v in _facts(report)
    )
    out.append(scroll(f'<table class="facts"><tbody>{facts}</tbody></table>'))

    out.append("<h2>Whole run</h2>")
    out.append(_overall_table(report))
    if segments:
        out.append("<h2>Segments</h2>")
        out.append(
            '<p class="note">A segment runs from one applied change to the next; its figures '
            "leave out its first second, which settles.</p>"
        )
        out.append(_table(rows, with_accuracy(LIVE_KEYS, segments), "segments"))
        out += [f'<p class="note">{esc(note)}</p>' for note in accuracy_notes(report)]
        if has_predictions(segments):
            out.append("<h3>Live vs the simulator's prediction</h3>")
            out.append(_table(rows, VERSUS_KEYS, "segments"))
        labels = [f"{r['index']}: {r['changed']}" for r in rows]
        out.append(_figure(segments_fps_chart(segments, labels), "fps by segment"))
        out.append(_figure(segments_latency_chart(segments, labels), "latency by segment"))
        out += _segment_sections(segments, rows, buses or {})

    events = list(report.get("events") or [])[-MAX_EVENTS:]
    if events:
        out.append("<h2>Events</h2>")
        body = "".join(
            f"<tr><td>{ev['t']:.1f}</td><td class='text'>{esc(ev['kind'])}</td>"
            f"<td class='text'>{esc(ev['message'])}</td></tr>"
            for ev in events
        )
        out.append(
            scroll(
                '<table class="segments"><thead><tr><th>t s</th><th class="text">kind</th>'
                f'<th class="text">message</th></tr></thead><tbody>{body}</tbody></table>'
            )
        )
    out.append("<h2>Config</h2>")
    out.append(f"<pre>{esc(json.dumps(report['config'], indent=2))}</pre>")
    for e in played or ([exp] if exp else []):
        if e.get("text"):
            out.append(f"<h2>Experiment file: {esc(e.get('source', ''))}</h2>")
            out.append(f"<pre>{esc(e['text'])}</pre>")
    out.append("</body></html>")
    return "\n".join(out)


def _segments_phrase(segments: Sequence[int]) -> str:
    first, last = segments
    return f"segment {first}" if first == last else f"segments {first}–{last}"


def write_html_report(
    report: Mapping[str, Any],
    target: str | Path,
    buses: Mapping[int, BusRecords] | None = None,
) -> Path:
    """Build the report and write it to ``target``; ReportError if it cannot be written."""
    path = Path(target)
    text = build_html(report, buses)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"{path}: cannot write the report ({exc.strerror})") from None
    return path
