"""The Segments dock in words: the changed cell as a phrase, the open segment's span whole,
and a header that says what "p99 ÷ sim" is."""

from __future__ import annotations

import copy

from PySide6.QtGui import QFontMetrics

from batchscope.experiment import load_experiment
from batchscope.sim.simulated_experiment import simulate_experiment
from batchscope.ui.segment_table import SegmentTable
from batchscope.ui.segment_table.cells import COLUMNS
from batchscope.ui.segment_table.feed import SegmentUpdate
from batchscope.ui.theme import Look, look_from_name

KEYS = [c.key for c in COLUMNS]


def burst_table(qtbot, look: Look, width: int = 1100) -> SegmentTable:
    segments = copy.deepcopy(simulate_experiment(load_experiment("client-burst"))["segments"])
    segments[-1]["start_s"] = 103.2  # a long run's open segment
    table = SegmentTable(look)
    qtbot.addWidget(table)
    table.resize(width, 400)
    table.show()
    table.update_from(SegmentUpdate(segments, len(segments) - 1, None, 0.0))
    qtbot.waitUntil(lambda: table.table.rowCount() == len(segments), timeout=2000)
    return table


def test_the_changed_column_reads_the_phrase_and_its_tip_says_it_whole(qtbot):
    table = burst_table(qtbot, Look())
    col = KEYS.index("changed")
    texts = [table.table.item(r, col).text() for r in range(table.table.rowCount())]
    assert texts[1] == "burst ×4 on S0 for 5 s"
    assert texts[2] == "ended: burst ×4 on S0 for 5 s"
    assert texts[3] == "policy oldest → all"
    assert table.table.item(1, col).toolTip().startswith("burst ×4 on S0 for 5 s\n")


def test_the_open_segments_span_is_whole_in_every_look(qtbot):
    for look in (Look(), look_from_name("light"), Look(presentation=True)):
        table = burst_table(qtbot, look, width=900)
        col = KEYS.index("span")
        last = table.table.rowCount() - 1
        assert table.table.item(last, col).text() == "103.2–now"
        metrics = QFontMetrics(table.table.font())
        need = max(
            metrics.horizontalAdvance(table.table.item(r, col).text())
            for r in range(table.table.rowCount())
        )
        assert table.table.columnWidth(col) >= need + 6  # the cell's margins


def test_the_changed_column_is_wide_enough_for_its_phrases_and_the_table_scrolls(qtbot):
    for look in (Look(), Look(presentation=True)):
        table = burst_table(qtbot, look, width=900)
        col = KEYS.index("changed")
        metrics = QFontMetrics(table.table.font())
        need = metrics.horizontalAdvance("ended: burst ×4 on S0 for 5 s")
        assert table.table.columnWidth(col) >= need + 6  # whole, not "ended: burst…"
        total = sum(table.table.columnWidth(c) for c in range(len(KEYS)))
        assert total > table.table.viewport().width()  # wider than the dock: it scrolls
        assert table.table.horizontalScrollBar().maximum() > 0


def test_the_ratio_headers_say_what_they_divide(qtbot):
    table = burst_table(qtbot, Look())
    header = table.table.horizontalHeaderItem(KEYS.index("ratio_p99"))
    assert header.text() == "p99 ÷ sim"
    tip = header.toolTip()
    assert "live p99 latency divided by the simulator's prediction" in tip
    assert "for the same segment" in tip
