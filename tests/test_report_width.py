"""The HTML report fits a 1400 px window and prints: no sideways page scroll (every table
in its own scrolling box, every plot no wider than the column, text that breaks long
names), chart category labels whole, and print CSS that keeps tables and plots whole."""

from __future__ import annotations

import base64
import copy
import re
import struct
from html.parser import HTMLParser

import pytest
from PySide6.QtGui import QFontMetricsF

from batchscope.experiment import load_experiment
from batchscope.sim.simulated_experiment import simulate_experiment

LONG_PATH = "/home/someone/videos/recorded_on_the_court_tuesday_evening_camera_north_1080p60.mp4"
ACCURACY = {
    "scored": 300,
    "visible": 280,
    "hit_rate": 0.87,
    "no_ball": 20,
    "false_detection_rate": 0.1,
    "median_error_px": 1.2,
    "median_freshness_px": 6.5,
}


@pytest.fixture(scope="module")
def wide_report() -> dict:
    """client-burst twice over (12 segments), predicted, scored, with a long source path,
    a failed step that asked for four changes, and long event messages: a wide report."""
    report = simulate_experiment(load_experiment("client-burst"))
    segments = []
    for seg in report["segments"] * 2:
        seg = copy.deepcopy(seg)
        seg["index"] = len(segments)
        seg["predicted"] = {
            "mean_fps": 16.0,
            "min_fps": 14.0,
            "latency_ms": {"p50": 3.3, "p99": 2.8},
            "throughput_wps": 70.0,
        }
        seg["overall"]["accuracy"] = dict(ACCURACY)
        segments.append(seg)
    segments[3]["changes"] = {"resolution": [1280, 720], "precision": "fp32", "max_batch": 16}
    segments[3]["error"] = "profile laptop-8gb has no curve for fp32 at 1280x720"
    report["segments"] = segments
    report["overall"]["accuracy"] = dict(ACCURACY)
    report["config"]["sources"] = [LONG_PATH, "rtsp://camera-east.local:554/stream1"]
    report["events"] = [
        {"t": float(i), "kind": "config", "message": f"policy oldest → all, {LONG_PATH} ({i})"}
        for i in range(5)
    ]
    return report


@pytest.fixture(scope="module")
def page(wide_report) -> str:
    from batchscope.render.page import build_html

    return build_html(wide_report)


class Tree(HTMLParser):
    """Each start tag with its ancestors' (tag, class) pairs; each image's data."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, str]] = []
        self.tables: list[list[tuple[str, str]]] = []
        self.images: list[bytes] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "table":
            self.tables.append(list(self.stack))
        if tag == "img":
            self.images.append(base64.b64decode(a["src"].split(",", 1)[1]))
        if tag not in ("img", "meta", "br"):
            self.stack.append((tag, a.get("class", "")))

    def handle_endtag(self, tag: str) -> None:
        if tag not in ("img", "meta", "br") and self.stack and self.stack[-1][0] == tag:
            self.stack.pop()


def css_rule(page: str, selector: str, media: str = "") -> str:
    css = page[page.index("<style>") : page.index("</style>")]
    if media:
        css = css[css.index(media) :]
    match = re.search(re.escape(selector) + r"\s*\{([^}]*)\}", css)
    assert match, f"no CSS rule for {selector}"
    return match.group(1)


def test_every_table_scrolls_in_its_own_box_not_the_page(page):
    tree = Tree()
    tree.feed(page)
    assert len(tree.tables) >= 5  # facts, whole run, segments, vs the simulator, events
    assert all(ancestors[-1] == ("div", "scroll") for ancestors in tree.tables)
    assert "overflow-x: auto" in css_rule(page, ".scroll")
    assert "overflow-wrap: anywhere" in css_rule(page, "table.facts td.text")  # the long path


def test_the_column_and_every_plot_fit_a_1400_px_window(page):
    from batchscope.render.charts import SCALE
    from batchscope.render.page import CONTENT_PX, PAGE_PX

    assert f"max-width: {PAGE_PX}px" in css_rule(page, "body")
    assert PAGE_PX <= 1400 - 20  # a scroll bar and a margin
    tree = Tree()
    tree.feed(page)
    assert len(tree.images) >= 2 + 2 * 12  # the two by-segment plots, two per segment
    for png in tree.images:
        (width,) = struct.unpack(">I", png[16:20])  # the IHDR: width, then height
        assert width / SCALE <= CONTENT_PX
    assert "max-width: 100%" in css_rule(page, "figure img")
    assert "min-width: 0" in css_rule(page, ".pair figure")  # a pair wraps, never widens


def test_every_category_label_is_whole_in_the_room_its_chart_gives_it(wide_report):
    from batchscope.engine.report.rows import table_cells
    from batchscope.render.charts import LABEL_PAD, category_room

    labels = [f"{r['index']}: {r['changed']}" for r in table_cells(wide_report["segments"])]
    assert any(len(label) > 60 for label in labels)  # the failed step's four changes
    for room, shown in (
        (category_room(labels), labels),
        (category_room(sessions := [f"s{i}" for i in range(64)], 560), None),
    ):
        shown = shown or room.shown(sessions)
        metrics = QFontMetricsF(room.font())
        assert not room.anywhere
        for label in shown:
            rect = room.rect(label)
            assert rect.width() <= room.room - 2 * LABEL_PAD + 0.5, label
            assert rect.height() <= room.height + 0.5, label
            words = max(metrics.horizontalAdvance(w) for w in label.split())
            assert words <= room.room - 2 * LABEL_PAD, label  # no word broken
    assert category_room(labels).every == 1  # every segment is named
    many = category_room(sessions, 560)
    assert 1 < many.every <= 8 and many.shown(sessions)[:2] == ["s0", f"s{many.every}"]


def test_printed_the_tables_fit_the_page_and_nothing_splits_a_plot(page):
    assert "overflow: visible" in css_rule(page, ".scroll", "@media print")
    assert "display: table-header-group" in css_rule(page, "thead", "@media print")
    assert "break-inside: avoid" in css_rule(page, "tr, figure, .pair", "@media print")
    assert "size: A4 landscape" in css_rule(page, "@page")
