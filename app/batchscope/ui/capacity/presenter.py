"""The Capacity view's presenter: what to plan for, the budget, and applying the answer.

The view is dumb: it shows what :class:`CapacityPresenter` says (``computing``,
``planned``, ``note``) and hands it the budget text and the user's clicks. The
presenter decides the planner's inputs from the running config (the emulated
backend's profile; on the torch backend the profile ``batchscope sweep`` made for
this device, found by :func:`~batchscope.ui.capacity.planning.sweep_profile`), checks
the budget with the planner's own :class:`~batchscope.sim.planner.Budget`, and
applies a recommendation through the dashboard's :class:`Presenter` (the same
path as the controls: one change, one segment).
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from batchscope.config import KNOBS, POLICY_PARAMS, ConfigError, RunConfig
from batchscope.engine.stats import fps_figures, served
from batchscope.setting import SettingError
from batchscope.sim.planner import (
    DEFAULT_MIN_FPS_RATIO,
    ENGINE_NAMES,
    VERIFY_S,
    Budget,
    Plan,
    PolicyPlan,
    VerifyCancelled,
    format_verify,
    verify,
)
from batchscope.ui.capacity.planning import CapacityPlanner, PlanInputs, PlanResult, Search
from batchscope.ui.capacity.setting_files import (
    POLICY_FILE,
    TRITON_FILE,
    changes_from_file,
    export_setting,
)

if TYPE_CHECKING:
    from batchscope.engine.snapshot import Snapshot
    from batchscope.ui.live import Presenter

#: The p99 budget the view starts with (``plan --p99-ms`` has no default; the issue's example).
DEFAULT_P99_MS = 50.0


@dataclass(frozen=True)
class OperatingPoint:
    """Where the live run is: its sessions, the slowest session's fps, the p99 (ms)."""

    sessions: int
    min_fps: float
    p99_ms: float
    label: str  # what the figures cover, e.g. "segment 2"


def operating_point(snap: Snapshot) -> OperatingPoint | None:
    """The current segment's point (the headline's definitions); None while it settles."""
    if snap.settling or not any(served(s.state) for s in snap.sessions):
        return None
    if not any(len(ms) for ms in snap.recent_latency_ms.values()):
        return None
    fleet = fps_figures((s.state, s.fps) for s in snap.sessions)
    label = f"segment {snap.segment.index}" if snap.segment is not None else snap.scope_label
    return OperatingPoint(len(snap.sessions), fleet["min_fps"], snap.latency_ms["p99"], label)


def parse_budget(p99_text: str, ratio_text: str) -> tuple[float, float]:
    """The budget's (p99 ms, min fps ratio) from the view's text, checked by ``Budget``.

    ConfigError names the field. The frame rate is the run's, checked apart (a run
    whose fps is each source's own has none to plan for), so a stand-in one is used.
    """
    values = []
    for name, text in (("p99_ms", p99_text), ("min_fps_ratio", ratio_text)):
        try:
            values.append(float(text.strip()))
        except ValueError:
            raise ConfigError(name, text, "expected a number") from None
    Budget(fps=KNOBS["fps"].default, p99_ms=values[0], min_fps_ratio=values[1])
    return values[0], values[1]


def setting_changes(plan_: Plan, policy_plan: PolicyPlan, base: RunConfig) -> dict[str, Any]:
    """The live changes that put ``base`` on ``policy_plan``'s setting: policy, knobs, sessions.

    Precision, resolution, fps and the device stay: the plan was made for them.
    """
    new = dataclasses.replace(plan_, recommended=policy_plan).config(base)
    names = ("policy", "sessions", *POLICY_PARAMS[new.policy])
    return {name: getattr(new, name) for name in names}


class CapacityPresenter(QObject):
    """Plans for the running config and budget; applies and exports the answers."""

    computing = Signal(int, int, str)  # (done, total, what) while a plan runs
    planned = Signal(object)  # PlanResult of the current inputs (first its answer alone)
    note = Signal(str)  # a line about the inputs ("" when fine), e.g. no frame rate
    verifying = Signal(str)  # what a verification does now ("" once it ended)
    verified = Signal(str, bool)  # planned vs served (the table), or why not; whether it ran
    budget_changed = Signal(float, float)  # (p99 ms, min fps ratio), once valid

    def __init__(
        self,
        dashboard: Presenter,
        search: Search | None = None,
        planner: CapacityPlanner | None = None,
    ) -> None:
        super().__init__()
        self.dashboard = dashboard
        self.search = search or Search()
        self.p99_ms = DEFAULT_P99_MS
        self.min_fps_ratio = DEFAULT_MIN_FPS_RATIO
        self.devices = 1  # >1: also what that many devices carry
        self.carry = 0  # >0: also the fewest devices for that many sessions
        self.mig = 0  # >0: every device a MIG slice of the profile (Kg), by assumption
        self.planner = planner or CapacityPlanner()
        self.planner.progressed.connect(self._on_progress)
        self.planner.answered.connect(self._on_answered)
        self.planner.finished.connect(self._on_finished)
        self.inputs: PlanInputs | None = None
        self.result: PlanResult | None = None  # for ``inputs``, once planned
        self._results: dict[PlanInputs, PlanResult] = {}  # going back to a setting is instant
        self._verifier: threading.Thread | None = None
        self._cancel = threading.Event()
        self._resume_after = False  # the live run was paused for a verification
        self.verified.connect(self._verify_ended)

    @property
    def config(self) -> RunConfig:
        return self.dashboard.engine.config

    def set_budget(self, p99_text: str, ratio_text: str) -> str | None:
        """Take the budget from the view's text; the error (one line) if it is not valid."""
        try:
            self.p99_ms, self.min_fps_ratio = parse_budget(p99_text, ratio_text)
        except ConfigError as exc:
            return str(exc)
        self.budget_changed.emit(self.p99_ms, self.min_fps_ratio)
        self.refresh()
        return None

    def set_devices(self, devices: int, carry: int, mig: int = 0) -> None:
        """Also answer for ``devices`` devices (1: one only) and the fewest devices for
        ``carry`` sessions (0: not asked), each device a ``mig``g MIG slice of the
        profile (0: the whole device); plans again."""
        self.devices, self.carry, self.mig = devices, carry, mig
        self.refresh()

    def inputs_for(self, config: RunConfig) -> PlanInputs:
        """The plan's inputs for ``config``; ConfigError when there is nothing to plan."""
        budget = Budget(fps=config.fps, p99_ms=self.p99_ms, min_fps_ratio=self.min_fps_ratio)
        profile = config.profile if config.runner == "emulated" else None
        return PlanInputs(
            profile,
            config.device,
            config.precision,
            config.resolution,
            budget,
            self.search,
            self.devices,
            self.carry,
            self.mig,
        )

    def refresh(self, config: RunConfig | None = None) -> None:
        """Plan for ``config`` (default: the engine's) unless that plan is made or under way."""
        try:
            inputs = self.inputs_for(config or self.config)
        except ConfigError as exc:
            self.inputs = None
            self.note.emit(f"Nothing to plan: {exc}")
            return
        if inputs == self.inputs:
            return
        self.inputs, self.result = inputs, self._results.get(inputs)
        self.note.emit("")
        if self.result is not None:
            self.planner.request(None)
            self.planned.emit(self.result)
            return
        self.computing.emit(0, 1, "starting")
        self.planner.request(inputs)

    def _on_progress(self, inputs: PlanInputs, done: int, total: int, what: str) -> None:
        if inputs == self.inputs:
            self.computing.emit(done, total, what)

    def _on_answered(self, result: PlanResult) -> None:
        """The answer, ahead of its curves: shown (and applicable) at once."""
        if result.inputs == self.inputs and self.result is None:
            self.result = result
            self.planned.emit(result)

    def _on_finished(self, result: PlanResult) -> None:
        self._results[result.inputs] = result
        if result.inputs == self.inputs:
            self.result = result
            self.planned.emit(result)

    def apply_recommended(self) -> bool:
        """Put the live run on the recommendation (one change, one segment, like the controls)."""
        result = self.result
        if result is None or result.plan is None:
            self.dashboard.status.emit("No plan yet: wait for the Capacity view to finish", "error")
            return False
        rec = result.plan.recommended
        if not rec.max_sessions:
            self.dashboard.status.emit("Nothing meets this budget: no setting to apply", "error")
            return False
        return self.dashboard.change(setting_changes(result.plan, rec, self.config))

    # -- setting files -----------------------------------------------------------------------

    def export_current(self, folder: str | Path) -> Path | None:
        """File → Export setting…: the setting in force (with the plan's figures if it is
        the recommendation)."""
        config, planned, cap = self.config, None, None
        result = self.result
        if result is not None and result.plan is not None:
            rec = result.plan.recommended
            changes = setting_changes(result.plan, rec, config)
            if rec.max_sessions and all(getattr(config, k) == v for k, v in changes.items()):
                planned = {"max_sessions": rec.max_sessions, "at_max": rec.at_max.to_json()}
                cap = rec.at_max.settled_cap
        return self._export(config, folder, planned, cap)

    def export_recommended(self, folder: str | Path) -> Path | None:
        """The Capacity view's Export recommended…: the plan's answer, with its figures."""
        result = self.result
        if result is None or result.plan is None or not result.plan.recommended.max_sessions:
            self.dashboard.status.emit("No recommendation to export yet", "error")
            return None
        rec = result.plan.recommended
        config = self.config.with_changes(**setting_changes(result.plan, rec, self.config))
        planned = {"max_sessions": rec.max_sessions, "at_max": rec.at_max.to_json()}
        return self._export(config, folder, planned, rec.at_max.settled_cap)

    def _export(
        self, config: RunConfig, folder: str | Path, planned: dict | None, cap: int | None
    ) -> Path | None:
        if config.runner != "emulated":  # the profile the plan used, not the emulated default
            config = config.with_changes(profile=self.result.profile if self.result else None)
        try:
            out = export_setting(config, folder, planned, cap)
        except SettingError as exc:
            self.dashboard.status.emit(str(exc), "error")
            return None
        self.dashboard.status.emit(f"Setting exported to {out}: {POLICY_FILE}, {TRITON_FILE}", "ok")
        return out

    def open_setting(self, path: str | Path) -> bool:
        """File → Open settings…: apply a policy.json live; a bad file is one status line."""
        try:
            changes = changes_from_file(path, self.config)
        except SettingError as exc:
            self.dashboard.status.emit(str(exc), "error")
            return False
        if not changes:
            self.dashboard.status.emit(f"{path}: that setting is already in force", "info")
            return True
        return self.dashboard.change(changes)

    # -- verify on an engine ----------------------------------------------------------------

    def verify_on(self, on: str) -> bool:
        """Serve the recommendation on ``on`` (inprocess, ray, triton) for VERIFY_S s, on the
        emulated curve, beside its plan (``plan --verify --on``): on a thread, the live run
        paused meanwhile (so that it does not load the machine the verification measures).
        ``verifying`` says what it does, ``verified`` brings the table or the reason."""
        result = self.result
        if result is None or result.plan is None or not result.plan.recommended.max_sessions:
            self.dashboard.status.emit("No recommendation to verify yet", "error")
            return False
        if self.verifying_now:
            self.dashboard.status.emit("A verification is running: wait for its table", "error")
            return False
        self._resume_after = not self.dashboard.engine.paused
        if self._resume_after:
            self.dashboard.set_paused(True)
        self._cancel.clear()
        name = ENGINE_NAMES[on]
        self.verifying.emit(
            f"Verifying on {name}: the live run is paused; about {VERIFY_S + 5:.0f} s"
            + (" and the engine's start" if on != "inprocess" else "")
        )
        plan_ = result.plan
        self._verifier = threading.Thread(
            target=self._verify, args=(plan_, on), name="batchscope-verify", daemon=True
        )
        self._verifier.start()
        return True

    @property
    def verifying_now(self) -> bool:
        return self._verifier is not None and self._verifier.is_alive()

    def _verify(self, plan_: Plan, on: str) -> None:
        """The verification's thread: the table, or one line of why not."""
        try:
            check = verify(plan_, on=on, cancel=self._cancel)
        except VerifyCancelled:
            return
        except Exception as exc:  # the engine did not start, say: one line, the app goes on
            self.verified.emit(f"Verify on {ENGINE_NAMES[on]}: {exc}", False)
            return
        self.verified.emit(format_verify(check), True)

    def _verify_ended(self, _text: str, _ok: bool) -> None:
        """(GUI thread) the live run goes on as it was before the verification."""
        self.verifying.emit("")
        if self._resume_after:
            self._resume_after = False
            self.dashboard.set_paused(False)

    def shutdown(self) -> None:
        self._cancel.set()
        if self._verifier is not None:
            self._verifier.join(5.0)
        self.planner.stop()
