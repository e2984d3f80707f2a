"""Words for people: one formatter turns a change or a fault into a short phrase, and every
place that shows one (the segment table's cells, the text table, the CSV, the HTML report,
compare, the events) reads it; the JSON keeps its keys and values."""

from __future__ import annotations

import csv
import io
import json

import pytest

from batchscope.engine.report.phrases import (
    change_phrase,
    changes_phrase,
    fault_phrase,
    segment_phrase,
)
from batchscope.engine.report.rows import segments_csv, table_cells
from batchscope.engine.report.text import format_segments
from batchscope.experiment import Fault, load_experiment
from batchscope.sim.simulated_experiment import simulate_experiment


@pytest.mark.parametrize(
    ("fault", "phrase"),
    [
        (Fault("burst", 5.0, session=0, factor=4.0), "burst ×4 on S0 for 5 s"),
        (Fault("stall", 4.0, session=1), "S1 stalls for 4 s"),
        (Fault("slow_device", 6.0, factor=2.0), "every device ×2 slower for 6 s"),
        (Fault("source_error", 2.5, session=3), "S3's source fails for 2.5 s"),
    ],
)
def test_each_fault_reads_as_a_short_phrase(fault, phrase):
    assert fault_phrase(fault) == phrase
    assert fault_phrase(fault.as_json()) == phrase  # as a segment lists it


def test_a_change_reads_field_before_arrow_after():
    assert change_phrase("policy", "oldest", "all") == "policy oldest → all"
    assert change_phrase("sessions", 4, 8) == "sessions 4 → 8"
    assert change_phrase("resolution", (256, 144), (512, 288)) == "resolution 256×144 → 512×288"
    assert change_phrase("resolution", [256, 144], [512, 288]) == "resolution 256×144 → 512×288"
    assert change_phrase("max_batch", None, 8) == "max batch no cap → 8"
    assert change_phrase("max_delay_ms", 10.0, 20.0) == "max delay 10 → 20 ms"
    assert change_phrase("fps", 30.0, None) == "fps 30 → source's own"
    assert change_phrase("channels_last", False, True) == "channels last off → on"
    assert (
        changes_phrase({"sessions": (4, 8), "policy": ("all", "oldest")})
        == "sessions 4 → 8, policy all → oldest"
    )


def burst_report() -> dict:
    return simulate_experiment(load_experiment("client-burst"))


def test_a_burst_segment_and_the_one_after_it_read_in_words_everywhere():
    report = burst_report()
    segments = report["segments"]
    changed = [row["changed"] for row in table_cells(segments)]
    assert changed == [
        "sessions 5, policy oldest",
        "burst ×4 on S0 for 5 s",
        "ended: burst ×4 on S0 for 5 s",
        "policy oldest → all",
        "burst ×4 on S0 for 5 s",
        "ended: burst ×4 on S0 for 5 s",
    ]
    text = format_segments(report)
    assert "burst ×4 on S0 for 5 s" in text and "ended: burst ×4 on S0 for 5 s" in text
    assert "fault kind" not in text and "for_s" not in text
    rows = list(csv.DictReader(io.StringIO(segments_csv(segments))))
    assert [r["what changed"] for r in rows] == changed
    # the contract is untouched: the JSON keeps the keys and values
    assert segments[1]["changes"] == {
        "fault": {"kind": "burst", "for_s": 5.0, "session": 0, "factor": 4.0}
    }
    assert json.loads(json.dumps(segments))[3]["changes"] == {"policy": "all"}
    assert segments[2]["caption"] == "after: burst ×4 on S0 for 5 s"


def test_a_segment_without_its_predecessor_says_what_it_set_and_a_failed_step_says_so():
    seg = {"index": 2, "changes": {"sessions": 6}, "config": {"sessions": 6}}
    assert segment_phrase(seg) == "sessions 6"
    assert segment_phrase(seg, {"config": {"sessions": 3}}) == "sessions 3 → 6"
    failed = {**seg, "config": {"sessions": 3}, "error": "no curve"}
    assert segment_phrase(failed, {"config": {"sessions": 3}}) == "sessions 3 → 6 (not applied)"
    assert segment_phrase({"index": 0, "changes": {}}) == "start"
    reset = {"index": 4, "changes": {}, "caption": "statistics reset"}
    assert segment_phrase(reset) == "statistics reset"


def test_the_html_report_shows_the_phrases_not_the_keys():
    from batchscope.render.page import build_html

    html = build_html(burst_report())
    assert "burst ×4 on S0 for 5 s" in html and "policy oldest → all" in html
    assert "fault kind" not in html
