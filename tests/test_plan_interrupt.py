"""Ctrl-C ends `plan` at once, its forked workers too (issue 44, item 4).

`plan` kept planning 33 s after two SIGINTs: the parent's KeyboardInterrupt waited, in
``shutdown(wait=True)``, for the runs its forked workers had in play. Here a worker's run
is made to last far longer than the test allows, and Ctrl-C (a KeyboardInterrupt in the
parent, where the planner polls) must end the call and the workers within seconds.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from concurrent.futures import ProcessPoolExecutor

import pytest

import batchscope.sim.planner.devices as devices_module
import batchscope.sim.planner.present as present_module
from batchscope.engine.serving.reaper import descendants
from batchscope.profiles.profile import load_profile
from batchscope.sim.planner import Budget, plan, series
from batchscope.sim.planner.devices import fewest_devices
from contract import wait_for

PLAY_S = 20.0  # what one run in a worker would take: far past the test's limit
LIMIT_S = 5.0  # Ctrl-C to the call's end, workers stopped


def _long_run(*_args: object) -> object:
    """A worker's run that would go on for PLAY_S (the stand-in for a long simulation)."""
    time.sleep(PLAY_S)
    raise AssertionError("a run the interrupt should have ended")


def _ctrl_c_once_workers_play(before: set[int]):
    """A ``cancelled`` that raises KeyboardInterrupt (as SIGINT does in the parent) once
    forked workers exist, so the interrupt lands while they are in play."""

    def ctrl_c() -> bool:
        if descendants(os.getpid()) - before:
            raise KeyboardInterrupt
        return False

    return ctrl_c


@pytest.fixture(scope="module")
def small_plan():
    profile = load_profile("laptop-8gb")
    budget = Budget(fps=30, p99_ms=50)
    result = plan(profile, "fp16", (512, 288), budget, policies=["oldest", "all"], seeds=2)
    return profile, result


def _interrupted(call) -> float:
    before = descendants(os.getpid())
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        call(_ctrl_c_once_workers_play(before))
    took = time.monotonic() - start
    assert wait_for(lambda: not (descendants(os.getpid()) - before), timeout=2.0)
    return took


def test_ctrl_c_while_the_plot_plays_ends_its_workers_at_once(small_plan, monkeypatch) -> None:
    profile, result = small_plan
    monkeypatch.setattr(present_module, "_play_cell", _long_run)
    took = _interrupted(lambda ctrl_c: series(result, profile, workers=2, cancelled=ctrl_c))
    assert took < LIMIT_S


def test_ctrl_c_while_devices_play_ends_their_workers_at_once(small_plan, monkeypatch) -> None:
    profile, result = small_plan
    monkeypatch.setattr(devices_module, "seed_figures", _long_run)
    most = result.recommended.max_sessions
    assert most >= 1
    # more than one device's sessions: after the pinned partitions (the planner's own
    # runs, in this process) least-loaded is played on fewer devices, in the workers
    took = _interrupted(
        lambda ctrl_c: fewest_devices(result, profile, 2 * most + 1, workers=2, cancelled=ctrl_c)
    )
    assert took < LIMIT_S


def _ignores_sigint() -> bool:
    return signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_a_worker_ignores_sigint_the_parent_decides() -> None:
    """A terminal's Ctrl-C reaches the whole process group: a worker leaves it to its
    parent (no KeyboardInterrupt in a worker, no traceback of it)."""
    context = mp.get_context("fork")
    with ProcessPoolExecutor(
        1, mp_context=context, initializer=present_module.tie_to_parent, initargs=(os.getpid(),)
    ) as pool:
        assert pool.submit(_ignores_sigint).result(timeout=30)
