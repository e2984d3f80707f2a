"""The presenter without a screen: a fake engine, jobs run on the test's thread, no window."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from batchscope.config import RunConfig
from batchscope.engine.metrics import Event
from batchscope.experiment import parse_experiment
from batchscope.ui.live.commands import EngineCommands
from batchscope.ui.live.presenter import LiveEngine, Presenter

CONFIG = RunConfig(sources=("a.mp4", "b.mp4"), sessions=2, max_delay_ms=500.0, slo_ms=2000.0)


class FakeEngine:
    """What the presenter uses of the engine, recorded; ``apply`` fails with ``apply_error``."""

    def __init__(self, config: RunConfig = CONFIG) -> None:
        self.config = config
        self.running = False
        self.recorder: object | None = None
        self.sources = [SimpleNamespace(spec=s, error=None) for s in config.sources]
        self.backend = SimpleNamespace(label="fake device")
        self.where = "fake device"
        self.open_error: Exception | None = None
        self.apply_error: str | None = None
        self.applied: list[RunConfig] = []
        self.fresh: list[bool] = []  # each apply's: start over from it (an experiment's start)
        self.captions: list[str] = []
        self.scopes: list[str] = []
        self.calls: list[str] = []
        self.listeners: list[Callable[[Event], None]] = []
        self.progress: str | None = None

    def open(self) -> None:
        self.calls.append("open")
        if self.open_error is not None:
            raise self.open_error

    def start(self) -> None:
        self.calls.append("start")
        self.running = True

    def stop(self, timeout: float = 2.0) -> None:
        self.calls.append("stop")
        self.running = False

    def apply(
        self,
        change: RunConfig | Mapping[str, Any],
        on_done: Callable[[str | None], None] | None = None,
        caption: str = "",
        step: bool = False,
        fresh: bool = False,
    ) -> str | None:
        new = change if isinstance(change, RunConfig) else self.config.with_changes(**change)
        self.applied.append(new)
        self.fresh.append(fresh)
        self.captions.append(caption)
        if self.apply_error is None:
            self.config = new
        if on_done:
            on_done(self.apply_error)
        return self.apply_error

    def snapshot(self, scope: str = "segment") -> SimpleNamespace:
        self.scopes.append(scope)
        return SimpleNamespace(scope=scope, segment=None, timeline=[])

    def report(self, kind: str = "run") -> dict:
        return {"segments": []}

    def subscribe(self, listener: Callable[[Event], None]) -> None:
        self.listeners.append(listener)

    def add_source(self, spec: str) -> SimpleNamespace:
        slot = SimpleNamespace(spec=spec, error="cannot open" if spec.startswith("bad") else None)
        self.sources.append(slot)
        return slot

    def remove_source(self, spec: str) -> None:
        self.sources = [s for s in self.sources if s.spec != spec]

    def set_paused(self, paused: bool) -> None:
        self.calls.append(f"paused={paused}")

    def reset_stats(self, announce: bool = True) -> None:
        self.calls.append(f"reset announce={announce}")

    def start_recording(self, folder: str | Path) -> Path:
        self.recorder = object()
        return Path(folder)

    def stop_recording(self) -> Path | None:
        self.recorder = None
        return Path("done")


@pytest.fixture
def fake(qapp) -> FakeEngine:
    engine: LiveEngine = FakeEngine()  # the fake satisfies the presenter's protocol
    return engine


class FakePlayer:
    """An ExperimentPlayer that plays nothing by itself: the test calls ``step``/``end``."""

    made: ClassVar[list[FakePlayer]] = []

    def __init__(self, engine, experiment, on_step=None, on_end=None) -> None:
        self.engine, self.experiment = engine, experiment
        self.on_step, self.on_end = on_step, on_end
        self.started = self.stopped = False
        FakePlayer.made.append(self)

    def start(self) -> None:
        self.started = True

    def stop(self, timeout: float = 2.0) -> None:
        self.stopped = True

    def step(self, index: int, error: str | None = None) -> None:
        self.on_step(index, error)

    def segments(self) -> tuple[int, int | None] | None:
        return (1, None) if self.started else None


TWO_STEPS = parse_experiment(
    """
name = "two"
caption = "two sessions."
duration = 30
[base]
backend = "emulated"
[[step]]
at = 0
sessions = 1
[[step]]
at = 10
sessions = 2
caption = "now two."
""",
    "two.toml",
)


@pytest.fixture
def presenter(fake: FakeEngine):
    """A presenter whose command jobs run only when the test calls ``run()``."""
    FakePlayer.made.clear()
    p = Presenter(fake, commands=EngineCommands(fake, start=False), make_player=FakePlayer)
    p.statuses, p.shown, p.starts = [], [], []
    p.status.connect(lambda text, level: p.statuses.append((text, level)))
    p.config_shown.connect(p.shown.append)
    p.started.connect(p.starts.append)
    p.run = p.commands.run_queued
    yield p
    p.shutdown()


def started(p: Presenter) -> Presenter:
    p.start_engine()
    p.run()
    assert p.starts == [None]
    p.statuses.clear()
    p.shown.clear()
    return p


def test_start_opens_then_starts_and_shows_the_config(presenter, fake):
    presenter.start_engine()
    assert presenter.statuses == [("Opening 2 source(s) and emulated:laptop-8gb…", "busy")]
    assert fake.calls == []  # on the command thread, not here
    presenter.run()
    assert fake.calls == ["open", "start"]
    assert presenter.starts == [None]
    assert presenter.shown == [CONFIG]
    assert presenter.statuses[-1] == ("Running on fake device", "ok")


def test_a_start_failure_emits_started_with_the_error(presenter, fake):
    fake.open_error = RuntimeError("profile laptop-8gb has no curve for fp32")
    presenter.start_engine()
    presenter.run()
    assert presenter.starts == ["RuntimeError: profile laptop-8gb has no curve for fp32"]
    assert presenter.statuses[-1] == (
        "Could not start: RuntimeError: profile laptop-8gb has no curve for fp32",
        "error",
    )
    assert fake.calls == ["open"] and not presenter.running
    assert presenter.snapshot() is None


def test_a_config_error_is_shown_and_not_applied(presenter, fake):
    started(presenter)
    assert presenter.change({"fps": -1.0}) is False
    assert presenter.statuses == [
        ("Not applied: fps = -1.0: must be greater than 0 and at most 1000 fps", "error")
    ]
    assert not presenter.commands.busy
    presenter.run()
    assert fake.applied == [] and fake.config == CONFIG


def test_a_backend_change_shows_busy_then_the_result(presenter, fake):
    started(presenter)
    assert presenter.change({"precision": "fp32"}) is True
    assert presenter.statuses == [("Applying: building the new backend…", "busy")]
    presenter.run()
    assert presenter.statuses[-1] == ("Applied: batch all waiting on fake device", "ok")
    assert fake.config == CONFIG.with_changes(precision="fp32")


def test_a_failed_apply_says_not_applied_and_shows_the_engines_config(presenter, fake):
    started(presenter)
    fake.apply_error = "profile laptop-8gb has no curve for bf16"
    presenter.change({"precision": "bf16"})
    presenter.run()
    assert presenter.statuses[-1] == (
        "Not applied: profile laptop-8gb has no curve for bf16",
        "error",
    )
    assert presenter.shown == [CONFIG]  # the controls go back to what runs
    assert fake.config == CONFIG


def test_an_unrelated_change_keeps_every_other_field(presenter, fake):
    started(presenter)
    presenter.change({"policy": "dynamic", "max_batch": 8})
    presenter.change({"sessions": 3})  # merged with the one above: one apply
    presenter.run()
    assert fake.applied == [CONFIG.with_changes(policy="dynamic", max_batch=8, sessions=3)]
    assert (fake.config.max_delay_ms, fake.config.slo_ms) == (500.0, 2000.0)


def test_the_controls_through_the_presenter_keep_values_outside_the_sliders(presenter, fake, qtbot):
    from batchscope.ui.controls.device_options import device_choices
    from batchscope.ui.controls.panel import ControlsPanel

    controls = ControlsPanel(device_choices(gpus=[]))
    qtbot.addWidget(controls)
    controls.changed.connect(presenter.change)
    started(presenter)
    controls.show_config(fake.config)
    controls.precision.setCurrentIndex(controls.precision.findData("fp32"))
    presenter.run()
    assert fake.config.precision == "fp32"
    assert (fake.config.max_delay_ms, fake.config.slo_ms) == (500.0, 2000.0)


def test_a_change_before_the_engine_runs_is_refused_with_the_reason(presenter, fake):
    presenter.change({"sessions": 3})
    presenter.run()
    assert presenter.statuses[-1] == (
        "Not applied: the engine is not running (see the start error)",
        "error",
    )
    assert fake.applied == []


def test_an_experiment_from_the_menu_applies_its_first_config_then_plays(presenter, fake):
    captions = []
    presenter.caption.connect(captions.append)
    presenter.play_experiment(TWO_STEPS)  # before the start: waits for it
    assert FakePlayer.made == []
    started(presenter)  # the engine is not on its first config: applied as a step first
    presenter.run()
    first = fake.applied[-1]
    assert (first.sessions, first.sources) == (1, CONFIG.sources)  # the user's sources kept
    assert fake.captions[-1] == "two sessions."
    player = FakePlayer.made[-1]
    assert player.started and player.experiment.config_at(1).sources == CONFIG.sources
    player.step(1)
    assert captions == ["two sessions.", "now two."]
    assert presenter.statuses[-1] == ("two, step 2 of 2 at 10 s: sessions 2", "ok")
    presenter.change({"sessions": 4})  # the user takes over
    assert player.stopped and presenter.player is None and captions[-1] == ""


def test_a_step_that_failed_is_one_line_and_the_experiment_goes_on(presenter, fake):
    started(presenter)
    presenter.play_experiment(TWO_STEPS)
    presenter.run()
    player = FakePlayer.made[-1]
    player.step(1, "profile laptop-8gb has no curve for bf16")
    assert presenter.statuses[-1] == (
        "two, step 2 of 2 at 10 s: not applied: profile laptop-8gb has no curve for bf16",
        "error",
    )
    assert presenter.player is player and not player.stopped
    player.on_end()
    assert presenter.player is None
    assert presenter.statuses[-1][0].startswith("Experiment two finished (30 s)")


FAULT_STEP = parse_experiment(
    """
name = "stalls"
caption = "a stall."
duration = 20
[base]
backend = "emulated"
sessions = 3
[[step]]
at = 5
stall = { session = 2, for_s = 3 }
""",
    "stalls.toml",
)


def test_an_experiment_from_the_menu_starts_afresh(presenter, fake):
    # issue 43 item 7 (86228b5: the start was a plain change, so the sessions kept the
    # phases the run before had drifted to; tests/test_experiment_afresh.py has the engine)
    started(presenter)
    presenter.play_experiment(TWO_STEPS)
    presenter.run()
    assert fake.fresh[-1] is True and fake.captions[-1] == "two sessions."
    presenter.change({"sessions": 4})  # a user's change is no fresh start
    presenter.run()
    assert fake.fresh[-1] is False


def test_every_experiment_played_is_kept_for_the_report(presenter, fake):
    started(presenter)
    presenter.play_experiment(TWO_STEPS)
    presenter.play_experiment(FAULT_STEP)  # the first stops before its start: not played
    presenter.run()
    assert [e.name for e, _ in presenter.experiments_played()] == ["stalls"]
    presenter.play_experiment(TWO_STEPS)
    presenter.run()
    played = presenter.experiments_played()
    assert [(e.name, segments) for e, segments in played] == [
        ("stalls", (1, None)),
        ("two", (1, None)),
    ]


def test_the_caption_leaves_the_banner_when_the_experiment_ends(presenter, fake):
    # 86228b5: the last step's caption stayed in the banner after the end
    captions = []
    presenter.caption.connect(captions.append)
    started(presenter)
    presenter.play_experiment(TWO_STEPS)
    presenter.run()
    player = FakePlayer.made[-1]
    player.step(1)
    assert captions[-1] == "now two."
    player.on_end()
    assert captions[-1] == "" and presenter.player is None


def test_a_fault_step_says_what_it_did(presenter, fake):
    # 86228b5: "stalls, step 1 of 1 at 5 s: no change"
    started(presenter)
    presenter.play_experiment(FAULT_STEP)
    presenter.run()
    FakePlayer.made[-1].step(0)
    assert presenter.statuses[-1] == ("stalls, step 1 of 1 at 5 s: S2 stalls for 3 s", "ok")


def test_a_bad_experiment_file_is_one_line_and_nothing_stops(presenter, fake, tmp_path):
    started(presenter)
    presenter.play_experiment(TWO_STEPS)
    presenter.run()
    playing = presenter.player
    bad = tmp_path / "bad.toml"
    bad.write_text("duration = 30\n[[step]]\nat = 5\nsessions = 0\n")
    assert presenter.open_experiment(str(bad)) is None
    assert presenter.statuses[-1][1] == "error"
    message = presenter.statuses[-1][0]
    assert message.startswith(f"{bad}: step 1: sessions = 0:") and "\n" not in message
    assert presenter.player is playing and not playing.stopped  # still playing
    assert fake.running and "stop" not in fake.calls
    assert presenter.open_experiment("no-such-experiment") is None
    assert "no such experiment or file" in presenter.statuses[-1][0]


def test_the_scope_goes_to_every_snapshot(presenter, fake):
    started(presenter)
    assert presenter.snapshot().scope == "segment"
    presenter.set_scope("60s")
    assert presenter.snapshot().scope == "60s"
    with pytest.raises(ValueError, match="choose from segment, 60s, run"):
        presenter.set_scope("week")
    assert presenter.scope == "60s"


def test_sources_pause_reset_and_events(presenter, fake):
    started(presenter)
    presenter.add_sources(["bad.mp4"])
    presenter.run()
    assert presenter.statuses[-1] == ("bad.mp4: cannot open", "error")
    presenter.remove_source("bad.mp4")
    presenter.run()
    assert presenter.statuses[-1] == ("Sources: a.mp4, b.mp4", "ok")
    presenter.remove_source("a.mp4")
    presenter.run()
    presenter.remove_source("b.mp4")
    assert presenter.statuses[-1] == ("Keep at least one source (add another first).", "error")
    assert [s.spec for s in fake.sources] == ["b.mp4"]
    presenter.set_paused(True)
    presenter.reset_stats()
    assert fake.calls[-2:] == ["paused=True", "reset announce=True"]
    event = Event(1.0, "config", "policy all → oldest")
    for listener in fake.listeners:
        listener(event)
    assert presenter.drain_events() == [event] and presenter.drain_events() == []


def test_recording_toggles(presenter, fake, tmp_path):
    started(presenter)
    folder = presenter.toggle_recording(tmp_path)
    assert folder is not None and folder.parent == tmp_path
    assert presenter.toggle_recording(tmp_path) is None
    assert presenter.statuses[-1] == ("Recorded to done", "ok")


def test_a_checkpoint_needs_the_real_model(presenter, fake):
    started(presenter)
    assert presenter.load_checkpoint("x.pt") is False
    assert "pick CPU or a CUDA GPU" in presenter.statuses[-1][0]
    assert presenter.commands.busy is False


def test_shutdown_stops_everything_once(presenter, fake):
    started(presenter)
    presenter.change({"sessions": 3})  # queued, never run
    presenter.shutdown()
    presenter.shutdown()
    assert fake.calls.count("stop") == 1
    assert presenter.commands.terminating and not presenter.commands.busy
    presenter.run()
    assert fake.applied == []


def test_shutdown_ends_the_real_command_thread(fake):
    p = Presenter(fake)
    assert p.commands.alive
    p.shutdown()
    assert not p.commands.alive
    assert fake.calls == ["stop"]


def test_a_re_decode_during_a_change_says_how_far_once_per_step(presenter, fake):
    fake.snapshot = lambda scope="segment": None
    fake.progress = "decoding long.mp4 at 256x144: 40%"
    presenter.snapshot()
    presenter.snapshot()  # unchanged: said once
    fake.progress = "decoding long.mp4 at 256x144: 42%"
    presenter.snapshot()
    fake.progress = None
    presenter.snapshot()
    assert presenter.statuses == [
        ("Applying: decoding long.mp4 at 256x144: 40%", "busy"),
        ("Applying: decoding long.mp4 at 256x144: 42%", "busy"),
    ]
