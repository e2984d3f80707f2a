"""The experiment player: applies an experiment's steps to a running engine at their times.

Why a thread of its own: an experiment file (:mod:`batchscope.experiment`)
is a list of changes at fixed seconds, and the same file must play the same
way headless (``run --experiment``) and in the app (``gui --experiment``),
where the UI thread must never block on ``Engine.apply`` (a step that
changes the resolution rebuilds the backend and re-decodes the sources,
which takes seconds). So one small thread sleeps until each step is due and
applies it as ``Engine.apply(..., step=True)`` does, which opens the step's
segment when the change took effect, or a segment with the error when it
failed; the run then goes on under the previous setting and the next steps
still apply (each step's fields onto the engine's config as it is when the
change is made, under the engine's one lock, as the simulator plays them).

The player never starts an engine: the caller opens and starts it on
:func:`first_config` (so the first segment is step 0's setting when step 0
is at 0 s) and the player labels that first segment as the simulator does.
Times are seconds on the engine's clock since :meth:`ExperimentPlayer.start`.

How it stops: at the experiment's ``duration`` (``finished`` is set), or on
:meth:`stop`, which sets the terminate flag, then the event the loop waits
on, and joins at most ``timeout`` s; a step blocked in ``Engine.apply`` is
cut short by ``Engine.stop`` (the caller's, afterwards). An exception in the
loop is reported as an engine ``error`` event and ends the experiment.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from batchscope.config import RunConfig
from batchscope.engine.engine import Engine
from batchscope.engine.loop import LoopThread
from batchscope.experiment import Experiment, Step


def first_config(experiment: Experiment) -> RunConfig:
    """The config an engine starts on: step 0's when step 0 is at 0 s, else the base."""
    steps = experiment.steps
    if steps and steps[0].at == 0:
        return experiment.config_at(0)
    return experiment.base


class ExperimentPlayer(LoopThread):
    """Plays ``experiment`` on ``engine`` (already started on :func:`first_config`).

    ``on_step(index, error)`` is called from the player's thread after each
    step (``error`` None when it took effect); ``on_end()`` once the duration
    has passed (not after ``stop()``).
    """

    def __init__(
        self,
        engine: Engine,
        experiment: Experiment,
        on_step: Callable[[int, str | None], None] | None = None,
        on_end: Callable[[], None] | None = None,
    ) -> None:
        super().__init__("batchscope-player")
        self._engine = engine
        self.experiment = experiment
        self._on_step = on_step
        self._on_end = on_end
        self.finished = threading.Event()
        self.steps_done = 0
        self._origin: float | None = None
        # the segments it played, first and last (None while it plays): a report of a
        # longer run says which of its segments were this experiment's
        self.first_segment: int | None = None
        self.last_segment: int | None = None

    def start(self) -> None:
        self._origin = self._engine.now()
        current = self._engine.segments.current()  # the segment its start opened
        self.first_segment = current.index if current is not None else 0
        super().start()

    def segments(self) -> tuple[int, int | None] | None:
        """The segments it played, (first, last); last None while it plays; None if it
        never started."""
        if self.first_segment is None:
            return None
        return self.first_segment, self.last_segment

    def elapsed(self) -> float:
        """Seconds since the experiment started (0 before), at most its duration."""
        if self._origin is None:
            return 0.0
        return min(self.experiment.duration, self._engine.now() - self._origin)

    def _sleep_until(self, at: float) -> bool:
        """Wait until ``at`` s on the experiment's clock; False if stopped meanwhile."""
        assert self._origin is not None, "start() sets the origin before the thread runs"
        while not self._terminate:
            left = self._origin + at - self._engine.now()
            if left <= 0:
                return True
            self._wake.wait(left)
        return False

    def _run(self) -> None:
        try:
            steps = list(self.experiment.steps)
            if steps and steps[0].at == 0 and self._engine.config == self.experiment.config_at(0):
                first = steps.pop(0)
                self._done(0, self._label_first_segment(first))
            elif self._engine.config == self.experiment.base:  # as simulated: its caption
                self._engine.label_segment(self._first(), {}, self.experiment.caption)
            for step in steps:
                if not self._sleep_until(step.at):
                    return
                # one step, one segment: the change and the step's faults together; only the
                # fields the step sets, on the config of that moment (a change the user made
                # meanwhile stays)
                error = self._engine.apply(
                    step.changes, caption=step.caption, step=True, faults=step.faults
                )
                if self._terminate:
                    return
                self._done(step.index, error)
            if self._sleep_until(self.experiment.duration):
                self.finished.set()
                if self._on_end:
                    self._on_end()
        except Exception as exc:  # never let the player die silently
            self._engine.event("error", f"experiment player: {type(exc).__name__}: {exc}")
        finally:  # at its duration, or stopped after the step in flight: its last segment
            current = self._engine.segments.current()
            self.last_segment = current.index if current is not None else self._first()

    def _first(self) -> int:
        assert self.first_segment is not None, "start() notes it before the thread runs"
        return self.first_segment

    def _done(self, index: int, error: str | None) -> None:
        self.steps_done = index + 1
        if self._on_step:
            self._on_step(index, error)

    def _label_first_segment(self, step: Step) -> str | None:
        """Its first segment (segment 0 of a run started on it, else the one its start
        opened; never another's) says what step 0 set and shows its caption (as
        simulated), with step 0's faults started in it; the first fault's error, if any."""
        base = self.experiment.base
        changes = {k: b for k, (_, b) in base.diff(self.experiment.config_at(0)).items()}
        return self._engine.label_segment(
            self._first(), changes, step.caption or self.experiment.caption, step.faults
        )
