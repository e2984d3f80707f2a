"""The Capacity view: planned off the GUI thread, recomputed on new inputs, stopped on close,
its recommendation applied live, and File → Export setting… / Open settings… round-trip."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QObject, Signal

from batchscope.config import RunConfig
from batchscope.profiles.profile import load_profile
from batchscope.sim.planner import Budget, plan
from batchscope.ui.capacity.planning import PlanInputs, Search, compute
from batchscope.ui.capacity.presenter import CapacityPresenter, setting_changes
from batchscope.ui.capacity.view import CapacityView
from batchscope.ui.theme import Look
from contract import wait_for

QUICK = Search(duration_s=5.0, seeds=2, max_sessions=32)  # a plan in about a second
SLOW = Search()  # the CLI's defaults: tens of seconds at 256x144
#: ms a quick plan may take: the planner thread runs niced (NICENESS), so two busy cores
#: beside it stretch its second to a minute or more
PLAN_MS = 180_000
#: ms for a live change or a thread to start on a loaded machine
CHANGE_MS = 30_000


class FakeEngine:
    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.running = False
        self.paused = False


class FakeDashboard(QObject):
    """What the Capacity presenter uses of the dashboard's Presenter."""

    status = Signal(str, str)

    def __init__(self, config: RunConfig) -> None:
        super().__init__()
        self.engine = FakeEngine(config)
        self.changes: list[dict[str, Any]] = []

    def set_paused(self, paused: bool) -> None:
        self.engine.paused = paused

    def change(self, changes: dict[str, Any], by_user: bool = True) -> bool:
        self.changes.append(changes)
        self.engine.config = self.engine.config.with_changes(**changes)
        return True


def laptop(**changes: Any) -> RunConfig:
    base = RunConfig(profile="laptop-8gb", precision="fp16", resolution=(512, 288), fps=30.0)
    return base.with_changes(**changes)


@pytest.fixture
def view(qtbot):
    dashboard = FakeDashboard(laptop())
    presenter = CapacityPresenter(dashboard, QUICK)
    widget = CapacityView(presenter, Look())
    qtbot.addWidget(widget)
    yield widget
    presenter.shutdown()


def table(view: CapacityView) -> list[list[str]]:
    t = view.table
    return [[t.item(r, c).text() for c in range(t.columnCount())] for r in range(t.rowCount())]


def expected(p99_ms: float, resolution=(512, 288)):
    return plan(
        load_profile("laptop-8gb"),
        "fp16",
        resolution,
        Budget(fps=30.0, p99_ms=p99_ms),
        duration_s=QUICK.duration_s,
        seeds=QUICK.seeds,
        max_sessions=QUICK.max_sessions,
    )


def test_the_view_plans_in_the_background_and_a_new_budget_plans_again(view, qtbot):
    view.show()  # shown: it plans for the engine's config
    # the answer first (the table), then its curves (the progress bar gone)
    qtbot.waitUntil(
        lambda: view.table.rowCount() == 6 and view.progress.isHidden(), timeout=PLAN_MS
    )
    want = expected(50.0)
    rows = table(view)
    assert [r[1].split()[0] for r in rows] == [str(p.max_sessions) for p in want.policies]
    assert [r[3] for r in rows] == [f"{p.at_max.p99_worst:.1f}" for p in want.policies]
    star = [r[0] for r in rows if r[0].startswith("★")]
    assert len(star) == 1 and star[0].startswith(f"★ {want.recommended.policy}")
    assert view.apply_button.isEnabled() and view.progress.isHidden()
    assert len(view.fps_plot.curves["all"].xData) >= 6
    assert "≤ 50 ms" in view.p99_plot.title.text()

    # a bad budget is refused with the planner's own rule, and nothing is re-planned
    view.p99.setText("0")
    view.p99.editingFinished.emit()
    assert "p99_ms" in view.budget_error.text() and view.budget_error.isVisibleTo(view)
    assert view.presenter.inputs.budget.p99_ms == 50.0

    view.p99.setText("12")
    view.p99.editingFinished.emit()
    assert not view.budget_error.isVisibleTo(view)
    qtbot.waitUntil(
        lambda: (
            view.presenter.result is not None and view.presenter.result.inputs.budget.p99_ms == 12.0
        ),
        timeout=PLAN_MS,
    )
    want = expected(12.0)
    assert [r[1].split()[0] for r in table(view)] == [str(p.max_sessions) for p in want.policies]
    assert "≤ 12 ms" in view.p99_plot.title.text()


def test_the_answer_is_shown_and_applicable_before_its_curves_are_drawn(view, qtbot):
    """The search answers in about a second, the curves take ten more at 256x144: the
    table, the verdict and Apply come with the answer, the progress bar stays for the
    curves, and the curves come after with the same answer."""
    seen = []  # (partial, Apply enabled, progress shown, points on the fps plot) per plan

    def record(result) -> None:  # connected after the view: sees what the view made of it
        points = sum(len(c.xData) for c in view.fps_plot.curves.values() if c.xData is not None)
        shown = not view.progress.isHidden()
        seen.append((result.partial, view.apply_button.isEnabled(), shown, points, result))

    view.presenter.planned.connect(record)
    view.show()
    qtbot.waitUntil(lambda: any(not s[0] for s in seen), timeout=PLAN_MS)
    (answer, *_), (full, *_) = [s[4:] for s in seen]
    assert [s[:4] for s in seen] == [
        (True, True, True, 0),  # the answer: Apply on, the curves to come
        (False, True, False, seen[1][3]),
    ]
    assert seen[1][3] >= 6 * 6  # six curves of at least six counts
    assert answer.series == () and len(full.series) == 6
    assert answer.plan.to_json() == full.plan.to_json()
    assert view.table.rowCount() == 6 and view.verdict.text().startswith("Recommended")


def test_new_inputs_cancel_the_plan_in_progress(qtbot):
    dashboard = FakeDashboard(laptop(resolution=(256, 144)))
    presenter = CapacityPresenter(dashboard, SLOW)
    got, progress = [], []
    presenter.planned.connect(got.append)
    presenter.planner.progressed.connect(
        lambda inputs, done, total, what: progress.append((inputs.resolution, done, total))
    )
    try:
        presenter.refresh()
        qtbot.waitUntil(lambda: presenter.planner.busy, timeout=CHANGE_MS)
        presenter.search = QUICK
        presenter.refresh(laptop())  # 512x288: a new plan; the slow one is dropped
        qtbot.waitUntil(lambda: any(not r.partial for r in got), timeout=PLAN_MS)
        assert [(r.inputs.resolution, r.partial) for r in got] == [
            ((512, 288), True),  # the answer
            ((512, 288), False),  # with its curves
        ]
        # the slow plan (~25 s alone) stopped short of its last step: it was cancelled,
        # not run to its end and then thrown away
        slow = [(done, total) for res, done, total in progress if res == (256, 144)]
        assert all(done < total for done, total in slow)
        quick = [(done, total) for res, done, total in progress if res == (512, 288)]
        assert quick[-1][0] == quick[-1][1]  # the new plan ran to its end
        assert got[1].plan.recommended.max_sessions == expected(50.0).recommended.max_sessions
    finally:
        presenter.shutdown()


def test_closing_stops_the_planner_promptly_mid_plan(qtbot):
    presenter = CapacityPresenter(FakeDashboard(laptop(resolution=(256, 144))), SLOW)
    presenter.refresh()
    qtbot.waitUntil(lambda: presenter.planner.busy, timeout=CHANGE_MS)
    # shutdown joins the planner for at most 2 s: dead after it means the plan in progress
    # saw the terminate flag at its next simulation (left alone it runs ~25 s)
    presenter.shutdown()
    assert not presenter.planner.alive


def test_a_frame_rate_of_source_is_nothing_to_plan(view, qtbot):
    view.presenter.refresh(laptop(fps=None))
    assert view.note.isVisibleTo(view)
    assert "fps" in view.note.text() and view.presenter.inputs is None


def test_torch_without_a_sweep_profile_says_how_to_make_one(monkeypatch):
    from batchscope.sim.planner import background as capacity_planner

    monkeypatch.setattr(capacity_planner, "sweep_profile", lambda device: None)
    inputs = PlanInputs(None, "cpu", "fp32", (256, 144), Budget(30.0, 50.0), QUICK)
    result = compute(inputs, lambda *a: None, lambda: False)
    assert result.plan is None
    assert "batchscope sweep --device cpu --precision fp32 --resolution 256x144" in result.error

    monkeypatch.setattr(capacity_planner, "sweep_profile", lambda d: load_profile("laptop-8gb"))
    inputs = PlanInputs(None, "cpu", "fp16", (512, 288), Budget(30.0, 50.0), QUICK)
    result = compute(inputs, lambda *a: None, lambda: False)
    assert result.profile == "laptop-8gb" and len(result.plan.policies) == 6


def test_the_torch_backend_plans_on_its_sweep_profile(qtbot, monkeypatch):
    from batchscope.sim.planner import background as capacity_planner
    from batchscope.ui.capacity.planning import CapacityPlanner

    seen = []
    monkeypatch.setattr(
        capacity_planner, "sweep_profile", lambda d: seen.append(d) or load_profile("laptop-8gb")
    )
    torch_config = laptop(backend="torch", device="cpu")
    # planned on the planner's thread (compute): the patch is in this process, not a child
    planner = CapacityPlanner(compute)
    presenter = CapacityPresenter(FakeDashboard(torch_config), QUICK, planner)
    try:
        presenter.refresh()
        qtbot.waitUntil(lambda: presenter.result is not None, timeout=PLAN_MS)
        assert seen == ["cpu"] and presenter.result.profile == "laptop-8gb"
    finally:
        presenter.shutdown()


# -- on the live dashboard ------------------------------------------------------------------


def planned_dashboard(dashboard, qtbot):
    capacity = dashboard.capacity
    capacity.presenter.search = QUICK
    dashboard.show_tab(capacity)
    qtbot.waitUntil(lambda: capacity.table.rowCount() == 6, timeout=PLAN_MS)
    return capacity


def test_apply_recommended_puts_the_engine_on_the_recommendation(dashboard, qtbot):
    capacity = planned_dashboard(dashboard, qtbot)
    result = capacity.presenter.result
    assert result.inputs.resolution == (256, 144) and result.profile == "laptop-8gb"
    rec = result.plan.recommended
    want = setting_changes(result.plan, rec, dashboard.engine.config)
    assert want["sessions"] == rec.max_sessions and want["policy"] == rec.policy
    capacity.apply_button.click()
    engine = dashboard.engine
    qtbot.waitUntil(
        lambda: all(getattr(engine.config, k) == v for k, v in want.items()), timeout=CHANGE_MS
    )
    qtbot.waitUntil(lambda: len(engine.snapshot().sessions) == rec.max_sessions, timeout=CHANGE_MS)
    # the live point follows the current segment
    qtbot.waitUntil(
        lambda: f"{rec.max_sessions} sessions" in capacity.live_text.text(), timeout=CHANGE_MS
    )
    assert (engine.config.precision, engine.config.resolution) == ("fp16", (256, 144))
    # the controls show the setting the button applied, not the one before it
    qtbot.waitUntil(lambda: dashboard.sessions.count.value() == rec.max_sessions, timeout=CHANGE_MS)
    assert dashboard.controls.policy.currentData() == rec.policy


def test_closing_the_window_stops_the_planner(dashboard, qtbot):
    capacity = dashboard.capacity
    capacity.presenter.search = SLOW
    dashboard.show_tab(capacity)
    qtbot.waitUntil(lambda: capacity.presenter.planner.busy, timeout=CHANGE_MS)
    assert capacity.progress.isVisibleTo(capacity)
    dashboard.close()  # joins the planner for at most 2 s (see the test above)
    assert not capacity.presenter.planner.alive


def test_export_then_open_gives_the_same_setting(dashboard, qtbot, tmp_path: Path):
    engine, capacity = dashboard.engine, dashboard.capacity
    p = dashboard.presenter
    p.change({"policy": "dynamic", "max_batch": 4, "max_delay_ms": 5.0, "sessions": 4})
    qtbot.waitUntil(lambda: engine.config.policy == "dynamic", timeout=CHANGE_MS)
    before = engine.config
    folder = capacity.presenter.export_current(tmp_path / "setting")
    assert folder is not None and "exported" in dashboard.status_line.message.text()
    data = json.loads((folder / "policy.json").read_text())
    assert (data["policy"], data["max_batch"], data["max_delay_ms"], data["sessions"]) == (
        "dynamic",
        4,
        5.0,
        4,
    )
    pbtxt = (folder / "config.pbtxt").read_text()
    assert "max_batch_size: 4" in pbtxt and "max_queue_delay_microseconds: 5000" in pbtxt

    p.change({"policy": "oldest", "sessions": 2})
    qtbot.waitUntil(lambda: engine.config.policy == "oldest", timeout=CHANGE_MS)
    assert capacity.presenter.open_setting(folder / "policy.json")
    fields = ("policy", "max_batch", "max_delay_ms", "batch", "slo_ms", "sessions", "fps")
    qtbot.waitUntil(
        lambda: all(getattr(engine.config, k) == getattr(before, k) for k in fields),
        timeout=CHANGE_MS,
    )

    # a bad file is one line in the status bar, and the run goes on as it was
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**data, "sessions": 0}))
    assert not capacity.presenter.open_setting(bad)
    message = dashboard.status_line.message.text()
    assert str(bad) in message and "sessions" in message and "\n" not in message
    assert engine.config.sessions == 4 and engine.running
    assert not capacity.presenter.open_setting(tmp_path / "missing.json")
    assert "cannot read" in dashboard.status_line.message.text()
    # and a folder that cannot be written
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert capacity.presenter.export_current(blocker / "sub") is None
    assert "cannot write" in dashboard.status_line.message.text()


# -- the plan in a child process ------------------------------------------------------------


def test_the_plan_runs_in_a_child_of_lower_priority_and_equals_the_one_here():
    import os

    from batchscope.sim.planner.background import NICENESS, PlanProcess

    inputs = PlanInputs("laptop-8gb", "cpu", "fp16", (512, 288), Budget(30.0, 50.0), QUICK)
    process = PlanProcess()
    seen: list[str] = []
    try:
        answers: list = []  # the answer, sent ahead of the curves
        there = process.compute(
            inputs, lambda done, total, what: seen.append(what), lambda: False, answers.append
        )
        child = process.pid
        assert child is not None and child != os.getpid()
        assert (
            os.getpriority(os.PRIO_PROCESS, child) >= os.getpriority(os.PRIO_PROCESS, 0) + NICENESS
        )
    finally:
        process.stop()
    here = compute(inputs, lambda *a: None, lambda: False)
    assert there.plan.to_json() == here.plan.to_json()
    assert [s.policy for s in there.series] == [s.policy for s in here.series]
    assert "searched oldest" in seen and "drew adaptive" in seen  # progress came back
    assert answers[0].partial and answers[0].plan.to_json() == there.plan.to_json()
    assert gone(child)  # stopped


def test_a_cancelled_plan_in_the_child_raises_plan_cancelled():
    from batchscope.sim.planner import PlanCancelled
    from batchscope.sim.planner.background import PlanProcess

    inputs = PlanInputs("laptop-8gb", "cpu", "fp16", (256, 144), Budget(30.0, 50.0), Search())
    process = PlanProcess()
    try:
        with pytest.raises(PlanCancelled):
            process.compute(inputs, lambda *a: None, lambda: True)
    finally:
        process.stop()


def test_closing_the_app_mid_plan_cancels_it_without_an_error():
    """stop() (the app closing) while a plan is computing: the plan is cancelled, and the
    call that waited on it does not trip over the child stop() took away (it raised
    AttributeError: 'NoneType' object has no attribute 'is_alive')."""
    import os
    import signal

    from batchscope.sim.planner import PlanCancelled
    from batchscope.sim.planner.background import PlanProcess

    inputs = PlanInputs("laptop-8gb", "cpu", "fp16", (256, 144), Budget(30.0, 50.0), SLOW)
    process = PlanProcess()
    stopping = threading.Event()
    started = threading.Event()
    outcome: list[BaseException | object] = []

    def plan_it() -> None:
        try:
            outcome.append(process.compute(inputs, lambda *a: started.set(), stopping.is_set))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=plan_it)
    thread.start()
    assert started.wait(120), "the plan never progressed"
    os.kill(process.pid, signal.SIGSTOP)  # a child too busy to answer the cancel in time
    stopping.set()  # as CapacityPlanner.stop: cancelled() is true, then the child goes
    process.stop(0.2)
    thread.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], PlanCancelled), outcome


def test_the_planner_child_ends_when_the_app_is_killed(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    script = (
        "from batchscope.sim.planner.background import PlanProcess, PlanInputs, Search\n"
        "from batchscope.sim.planner import Budget\n"
        "p = PlanProcess()\n"
        "i = PlanInputs('laptop-8gb', 'cpu', 'fp16', (512, 288), Budget(30.0, 50.0),"
        " Search(duration_s=5.0, seeds=2, max_sessions=16))\n"
        "p.compute(i, lambda *a: None, lambda: False)\n"
        "print(p.pid, flush=True)\n"
        "import time; time.sleep(60)\n"
    )
    app = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        child = int(app.stdout.readline())
        assert os.path.exists(f"/proc/{child}")
        app.send_signal(signal.SIGKILL)  # no clean-up of any kind
        app.wait(10)
        assert wait_for(lambda: gone(child), timeout=10)
    finally:
        if app.poll() is None:
            app.kill()


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie no one reaped yet counts as ended)."""
    from pathlib import Path

    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "State:\tZ" in status


def test_verify_on_an_engine_pauses_the_live_run_and_shows_planned_vs_served(
    view, qtbot, monkeypatch
):
    """Verify on…: the recommendation served on the chosen engine, off the GUI thread, the
    live run paused meanwhile and resumed after; a failure is one line, resumed too."""
    from batchscope.device.checks import BackendError
    from batchscope.ui.capacity import presenter as module

    calls: list[str] = []
    release = threading.Event()

    def fake_verify(plan_, on="inprocess", cancel=None):
        calls.append(on)
        release.wait(30)
        if on == "triton":
            raise BackendError("Triton is not set up (no pytriton in /nowhere): run it")
        live = {"overall": {"mean_fps": 29.0, "min_fps": 28.0, "throughput_wps": 290.0,
                            "latency_ms": {"p50": 20.0, "p99": 40.0}}}  # fmt: skip
        planned = {"overall": {"mean_fps": 30.0, "min_fps": 29.0, "throughput_wps": 300.0,
                               "latency_ms": {"p50": 18.0, "p99": 36.0}}}  # fmt: skip
        config = plan_.config().with_changes(duration_s=10.0)
        return {"config": config, "planned": planned, "live": live, "on": on}

    monkeypatch.setattr(module, "verify", fake_verify)
    view.show()
    qtbot.waitUntil(view.verify_button.isEnabled, timeout=PLAN_MS)
    dashboard = view.presenter.dashboard
    assert view.verify_engine.itemData(0) == "inprocess"
    view.verify_button.click()
    qtbot.waitUntil(lambda: calls == ["inprocess"], timeout=CHANGE_MS)
    assert dashboard.engine.paused and not view.verify_button.isEnabled()
    assert "Verifying on BatchScope's own worker" in view.verify_text.text()
    release.set()
    qtbot.waitUntil(lambda: "served/planned" in view.verify_text.text(), timeout=CHANGE_MS)
    assert "0.967" in view.verify_text.text()  # 29 / 30 fps
    assert not dashboard.engine.paused and view.verify_button.isEnabled()

    release.clear()
    assert view.presenter.verify_on("triton")
    release.set()
    qtbot.waitUntil(lambda: "Triton is not set up" in view.verify_text.text(), timeout=CHANGE_MS)
    assert view.verify_text.text().startswith("Verify on a real Triton server:")
    assert not dashboard.engine.paused


def test_the_view_answers_for_n_devices_and_the_fewest_devices(view, qtbot):
    """The Devices and "fewest devices for" fields: the planner's answers on several
    devices (sim/planner/devices.py) under the one-device table, the same as the CLI's."""
    view.show()
    qtbot.waitUntil(
        lambda: view.progress.isHidden() and view.table.rowCount() == 6, timeout=PLAN_MS
    )
    assert view.devices_text.isHidden()  # one device, nothing asked
    view.devices.setValue(3)
    view.carry.setValue(10)
    qtbot.waitUntil(
        lambda: (
            view.presenter.result is not None
            and not view.presenter.result.partial
            and view.presenter.result.inputs.carry == 10
        ),
        timeout=PLAN_MS,
    )
    from batchscope.sim.planner.devices import fewest_devices, sessions_for_devices

    want = expected(50.0)
    across = sessions_for_devices(want, load_profile("laptop-8gb"), 3)
    fewest = fewest_devices(want, load_profile("laptop-8gb"), 10)
    assert fewest is not None
    text = view.devices_text.text()
    assert view.devices_text.isVisibleTo(view)
    assert f"3 × laptop-8gb carry {across.sessions} sessions, router {across.router}" in text
    assert f"10 sessions need {fewest.devices} × laptop-8gb, router {fewest.router}" in text
    assert view.presenter.result.across.sessions >= 3 * want.recommended.max_sessions


def test_the_devices_answer_for_mig_slices_plans_each_slice_and_keeps_the_whole_table(view, qtbot):
    """ "MIG 3g" with 2 devices: the line answers for 2 × laptop-8gb@3g (the slice planned
    as a device of its own, its curve scaled by the stated rule, said under the answer);
    the table above stays the whole GPU's. A 1g slice, which cannot hold one 30 fps
    session at 512x288 (89 ms a window), says so in one line."""
    from batchscope.profiles.profile import mig_slice
    from batchscope.sim.planner.devices import sessions_for_devices

    view.show()
    qtbot.waitUntil(
        lambda: view.progress.isHidden() and view.table.rowCount() == 6, timeout=PLAN_MS
    )
    whole = table(view)
    view.devices.setValue(2)
    view.slice.setCurrentIndex(view.slice.findData(3))

    def answered(mig: int) -> bool:
        result = view.presenter.result
        return result is not None and not result.partial and result.inputs.mig == mig

    qtbot.waitUntil(lambda: answered(3), timeout=PLAN_MS)
    three = mig_slice(load_profile("laptop-8gb"), 3)
    one_slice = plan(
        three,
        "fp16",
        (512, 288),
        Budget(fps=30.0, p99_ms=50.0),
        duration_s=QUICK.duration_s,
        seeds=QUICK.seeds,
        max_sessions=QUICK.max_sessions,
    )
    across = sessions_for_devices(one_slice, three, 2)
    text = view.devices_text.text()
    assert f"2 × laptop-8gb@3g carry {across.sessions} sessions, router {across.router}" in text
    assert "MIG 3g: emulated, the whole GPU's curve scaled, not measured" in text
    assert table(view) == whole  # the one-device table is the whole GPU's
    view.slice.setCurrentIndex(view.slice.findData(1))
    qtbot.waitUntil(lambda: answered(1), timeout=PLAN_MS)
    assert "no setting meets the budget at 1 session on laptop-8gb@1g" in view.devices_text.text()
