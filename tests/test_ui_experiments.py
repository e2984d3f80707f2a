"""Experiment files in the app: the menu, File → Open experiment…, playing with captions."""

from __future__ import annotations

from pathlib import Path

from batchscope.experiment import list_experiments, load_experiment
from batchscope.ui.experiments_menu import menu_entries, on_sources
from batchscope.ui.segment_table.cells import COLUMNS

BUILT_IN = ["adaptive-budget", "bus-or-taxi", "round-robin", "small-inputs", "starvation"]

QUICK = """
name = "quick"
caption = "two sessions, oldest first."
duration = 20
[base]
backend = "emulated"
profile = "laptop-8gb"
precision = "fp16"
resolution = "256x144"
[[step]]
at = 0
sessions = 2
policy = "oldest"
[[step]]
at = 2.5
sessions = 4
policy = "all"
caption = "four sessions, batch all."
"""


def test_the_built_in_experiments_are_one_click_each_in_the_menu(dashboard):
    built_in = [e.name for kind, e in list_experiments() if kind == "built-in"]
    assert set(BUILT_IN) <= set(built_in)  # the five demos (later issues add more)
    entries = [e for e in menu_entries() if e.experiment is not None]
    actions = {a.text(): a for a in dashboard.experiments_menu.actions()}
    for name in built_in:
        (entry,) = [e for e in entries if e.experiment.name == name]
        assert entry.text.startswith(f"{name} — ") and actions[entry.text].isEnabled()
        assert actions[entry.text].toolTip() == entry.experiment.caption
    assert "Open experiment…" in actions and not actions["Stop experiment"].isEnabled()


def test_an_experiment_without_sources_plays_on_the_open_ones():
    exp = load_experiment("bus-or-taxi")
    assert exp.base.sources == ()
    kept = on_sources(exp, ("a.mp4",))
    assert kept.base.sources == ("a.mp4",)
    assert [c.sources for c in kept.configs] == [("a.mp4",)] * len(exp.steps)
    assert [c.sessions for c in kept.configs] == [3, 6, 6]


def test_one_click_plays_an_experiment_and_a_control_stops_it(dashboard, qtbot):
    (action,) = [a for a in dashboard.experiments_menu.actions() if a.text().startswith("small")]
    action.trigger()
    engine = dashboard.engine
    qtbot.waitUntil(
        lambda: (engine.config.sessions, engine.config.resolution) == (8, (256, 144)),
        timeout=10_000,
    )
    assert dashboard.caption.isVisibleTo(dashboard) and "256×144" in dashboard.caption.text()
    assert dashboard.segments_dock.isVisibleTo(dashboard)
    qtbot.waitUntil(lambda: dashboard.sessions.count.value() == 8, timeout=5000)
    assert dashboard.stop_experiment_action.isEnabled()
    dashboard.controls.policy.setCurrentIndex(0)  # the user takes over
    assert dashboard.presenter.player is None
    assert not dashboard.caption.isVisibleTo(dashboard)
    assert not dashboard.stop_experiment_action.isEnabled()


def test_a_file_plays_with_its_captions_and_the_table_fills(dashboard, qtbot, tmp_path: Path):
    path = tmp_path / "quick.toml"
    path.write_text(QUICK)
    sources = dashboard.engine.config.sources
    assert dashboard.presenter.open_experiment(str(path)) is not None
    engine, table = dashboard.engine, dashboard.segment_table
    qtbot.waitUntil(lambda: engine.config.sessions == 2, timeout=10_000)
    assert dashboard.caption.text() == "two sessions, oldest first."
    qtbot.waitUntil(lambda: dashboard.caption.text() == "four sessions, batch all.", timeout=8000)
    assert (engine.config.sessions, engine.config.policy, engine.config.sources) == (
        4,
        "all",
        sources,
    )

    def last_two():
        return [(s["changes"], s["caption"]) for s in table.segments[-2:]]

    qtbot.waitUntil(
        lambda: (
            last_two()
            == [
                (
                    {"sessions": 2, "policy": "oldest"},  # the app's own skipping stays
                    "two sessions, oldest first.",
                ),
                ({"sessions": 4, "policy": "all"}, "four sessions, batch all."),
            ]
        ),
        timeout=8000,
    )
    row = table.table.rowCount() - 2  # the first step's segment, closed now, has figures
    cells = {c.key: table.table.item(row, i).text() for i, c in enumerate(COLUMNS)}
    assert cells["changed"] == "sessions 3 → 2, policy all → oldest" and cells["policy"] == "oldest"
    assert float(cells["mean_fps"]) > 20 and cells["sessions"] == "2"


def test_a_bad_file_is_one_line_in_the_status_bar_and_the_run_goes_on(
    dashboard, qtbot, tmp_path: Path
):
    bad = tmp_path / "bad.toml"
    bad.write_text('duration = 10\n[[step]]\nat = 1\npolicy = "fastest"\n')
    before = dashboard.engine.config
    assert dashboard.presenter.open_experiment(str(bad)) is None
    text = dashboard.status_line.message.text()
    assert text.startswith(f"{bad}: step 1: policy = 'fastest'") and "\n" not in text
    assert dashboard.engine.running and dashboard.engine.config == before
    delivered = sum(s.delivered for s in dashboard.engine.snapshot().sessions)
    qtbot.waitUntil(
        lambda: sum(s.delivered for s in dashboard.engine.snapshot().sessions) > delivered + 10,
        timeout=5000,
    )
