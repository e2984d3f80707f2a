"""Demo scenarios: one click sets up an experiment from the study and narrates it.

A scenario is a frozen list of timed steps; each step is a set of RunConfig
changes and, optionally, a new caption for the banner above the plots. All
run on the emulated laptop GPU of the study so the demo gives the same
picture on any machine. The runner drives the steps with one single-shot
QTimer; starting another scenario or touching a control cancels it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from batchscope.config import DEFAULT_RESOLUTION


@dataclass(frozen=True)
class Step:
    at_s: float  # seconds after the scenario started
    changes: tuple[tuple[str, Any], ...]  # RunConfig field -> value
    caption: str = ""  # replaces the banner text from this step on

    def as_dict(self) -> dict[str, Any]:
        return dict(self.changes)


@dataclass(frozen=True)
class Scenario:
    key: str  # short name for --scenario
    name: str  # menu text
    caption: str  # one sentence shown while it runs
    steps: tuple[Step, ...]


def step(at_s: float, caption: str = "", **changes: Any) -> Step:
    return Step(at_s, tuple(changes.items()), caption)


#: The study's laptop GPU, replayed from its measured batch curve.
LAPTOP = {
    "backend": "emulated",
    "device": "cpu",
    "profile": "laptop-8gb",
    "precision": "fp16",
    "resolution": DEFAULT_RESOLUTION,
    "fps": 30.0,
    "max_batch": None,
}

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "bus-or-taxi",
        "Bus or taxi: 3 → 6 sessions on the laptop GPU (oldest vs all)",
        "3 sessions, oldest first: the laptop GPU (≈ 100 windows/s) keeps up with 90 frames/s.",
        (
            step(0, **LAPTOP, sessions=3, policy="oldest"),
            step(
                10,
                "6 sessions want 180 windows/s: oldest-first now starves some sessions.",
                sessions=6,
            ),
            step(
                20,
                "Batch all waiting: every session gets the same fps — fair, but no faster "
                "at 512×288.",
                policy="all",
            ),
        ),
    ),
    Scenario(
        "starvation",
        "Starvation under overload",
        "5 sessions, oldest first, on a GPU that manages ≈ 100 windows/s: watch one session "
        "fall to a few fps.",
        (step(0, **LAPTOP, sessions=5, policy="oldest"),),
    ),
    Scenario(
        "small-inputs",
        "Small inputs do batch well: 256×144 FP16",
        "At 256×144 FP16 a batch of 4 costs 9.3 ms instead of 4 × 4.7 ms: batching all "
        "waiting windows doubles throughput.",
        (step(0, **{**LAPTOP, "resolution": (256, 144)}, sessions=8, policy="all"),),
    ),
    Scenario(
        "adaptive-budget",
        "Find the largest batch inside a 50 ms budget (adaptive)",
        "AIMD grows the batch by one while the worst latency stays under 50 ms and cuts it "
        "by 10% when over: watch the batch sizes settle where the objective line sits.",
        (step(0, **LAPTOP, sessions=8, policy="adaptive", slo_ms=50.0),),
    ),
    Scenario(
        "round-robin",
        "Round robin vs batching",
        "Round robin, one at a time: fair without batching — every session gets the same share.",
        (
            step(0, **LAPTOP, sessions=6, policy="round-robin"),
            step(
                15,
                "Batch all waiting: the same fairness; latency now includes the wait for "
                "the batch.",
                policy="all",
            ),
        ),
    ),
)


def find_scenario(name: str) -> Scenario:
    """A scenario by key or menu name (case-insensitive); KeyError lists the keys."""
    wanted = name.strip().lower()
    for s in SCENARIOS:
        if wanted in (s.key, s.name.lower()):
            return s
    keys = ", ".join(s.key for s in SCENARIOS)
    raise KeyError(f"scenario {name!r}: unknown; choose from {keys}")


class ScenarioRunner(QObject):
    """Emits each step of the running scenario at its time, from a single-shot QTimer."""

    step_due = Signal(object, int)  # (Step, index)
    caption_changed = Signal(str)  # "" when no scenario runs

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._fire)
        self.scenario: Scenario | None = None
        self._next = 0
        self._elapsed_s = 0.0

    def start(self, scenario: Scenario) -> None:
        self.cancel()
        self.scenario = scenario
        self._next = 0
        self._elapsed_s = 0.0
        self.caption_changed.emit(scenario.caption)
        self._fire()

    def cancel(self) -> None:
        self._timer.stop()
        if self.scenario is not None:
            self.scenario = None
            self.caption_changed.emit("")

    @property
    def pending_steps(self) -> int:
        return 0 if self.scenario is None else len(self.scenario.steps) - self._next

    def _fire(self) -> None:
        scenario = self.scenario
        if scenario is None or self._next >= len(scenario.steps):
            return
        index = self._next
        current = scenario.steps[index]
        self._next += 1
        self._elapsed_s = current.at_s
        if current.caption:
            self.caption_changed.emit(current.caption)
        self.step_due.emit(current, index)
        if self._next < len(scenario.steps):
            delay_s = scenario.steps[self._next].at_s - self._elapsed_s
            self._timer.start(max(0, int(delay_s * 1000)))
