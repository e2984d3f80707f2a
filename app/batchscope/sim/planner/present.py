"""What the capacity plot draws: each policy's chosen setting over session counts."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import signal
import sys
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from batchscope.config import RunConfig
from batchscope.profiles.profile import DeviceProfile
from batchscope.sim.planner.measure import Evaluator, Figures
from batchscope.sim.planner.results import (
    DEFAULT_MAX_SESSIONS,
    Cancelled,
    Plan,
    PlanCancelled,
    Progress,
)
from batchscope.sim.simulator import DEFAULT_WARMUP_S


@dataclass(frozen=True)
class Series:
    """A policy's best setting over session counts: worst-seed figures, for plotting."""

    policy: str
    params: dict[str, Any]
    sessions: tuple[int, ...]
    min_fps: tuple[float, ...]  # slowest session, worst seed
    p99_ms: tuple[float, ...]  # worst seed
    max_sessions: int


#: Counts a policy's curve goes past its own answer (the plot shows where it stops fitting).
PAST_ANSWER = 3
#: The fewest counts a curve has (a policy that fits few sessions still gets a line).
FEWEST_COUNTS = 6


def plot_counts(max_sessions: int, limit: int = DEFAULT_MAX_SESSIONS) -> tuple[int, ...]:
    """The session counts a policy's curve is simulated at: 1 to ``PAST_ANSWER`` past its
    own answer (at least ``FEWEST_COUNTS``), no more than ``limit``.

    Each policy's own answer, not the largest of all: three counts past it show where and
    how it stops fitting, and the overloaded runs of the one-at-a-time policies up to the
    batching ones' answers (7 fit at 256x144 on laptop-8gb, curves went to 21) were a third
    of the plot's time."""
    return tuple(range(1, min(max(max_sessions + PAST_ANSWER, FEWEST_COUNTS), limit) + 1))


def series(
    plan_: Plan,
    profile: DeviceProfile,
    limit: int = DEFAULT_MAX_SESSIONS,
    warmup_s: float = DEFAULT_WARMUP_S,
    cancelled: Cancelled | None = None,
    workers: int = 1,
    progress: Progress | None = None,
) -> list[Series]:
    """Each policy's chosen setting at its :func:`plot_counts`, every seed — what the plot
    draws. ``progress(done, total, policy)`` as each policy's curve is complete.

    ``workers`` > 1 plays the runs in that many forked processes (where the platform can
    fork): ``plan --plot``, one per core. Each run is the
    same pure function of its config either way, so the figures are the same."""
    base = RunConfig(
        fps=plan_.budget.fps,
        profile=plan_.profile,
        precision=plan_.precision,
        resolution=plan_.resolution,
        backend="emulated",
        duration_s=plan_.duration_s,
    )
    evaluator = plan_.runs
    if evaluator is None or evaluator.warmup_s != warmup_s:
        evaluator = Evaluator(profile, base, plan_.budget, plan_.duration_s, warmup_s, cancelled)
    counts = [plot_counts(p.max_sessions, limit) for p in plan_.policies]
    cells = [(k, n) for k, policy_counts in enumerate(counts) for n in policy_counts]
    left = [len(c) for c in counts]
    figures: dict[tuple[int, int], list[Figures]] = {}
    for cell, played in _play_cells(evaluator, plan_, cells, workers, cancelled):
        figures[cell] = played
        left[cell[0]] -= 1
        if progress is not None and left[cell[0]] == 0:
            progress(sum(1 for n in left if n == 0), len(left), plan_.policies[cell[0]].policy)
    out = []
    for k, p in enumerate(plan_.policies):
        runs = [figures[(k, n)] for n in counts[k]]
        out.append(
            Series(
                policy=p.policy,
                params=p.params,
                sessions=counts[k],
                min_fps=tuple(min(r[0] for r in rs) for rs in runs),
                p99_ms=tuple(max(r[2] for r in rs) for rs in runs),
                max_sessions=p.max_sessions,
            )
        )
    return out


Cell = tuple[int, int]  # (the policy's index in the plan, sessions)
POLL_S = 0.1  # s between two asks of ``cancelled`` while forked workers play
#: What a forked worker plays from: the evaluator and plan (set before the fork, inherited).
_shared: tuple[Evaluator, Plan] | None = None


def _play_cell(evaluator: Evaluator, plan_: Plan, cell: Cell) -> list[Figures]:
    p = plan_.policies[cell[0]]
    return [evaluator.run(p.policy, p.params, cell[1], s) for s in range(plan_.seeds)]


def _play_cells(
    evaluator: Evaluator,
    plan_: Plan,
    cells: list[Cell],
    workers: int,
    cancelled: Cancelled | None = None,
) -> Iterator[tuple[Cell, list[Figures]]]:
    """Each cell's runs, in order (one process) or as they finish (``workers`` forks);
    PlanCancelled when ``cancelled()`` turns true (asked between cells, and every
    :data:`POLL_S` while the workers play)."""
    forks = workers > 1 and len(cells) > 1 and sys.platform == "linux"
    if not forks:
        for cell in cells:
            if cancelled is not None and cancelled():
                raise PlanCancelled()
            yield cell, _play_cell(evaluator, plan_, cell)
        return
    global _shared
    _shared = (evaluator, plan_)
    context = mp.get_context("fork")  # the evaluator's reused runs come along; no pickling
    try:
        with ProcessPoolExecutor(
            workers, mp_context=context, initializer=tie_to_parent, initargs=(os.getpid(),)
        ) as pool:
            # policy after policy (so their curves complete in turn, for the progress), each
            # one's costliest counts first (so the last cells, small, even out the workers)
            order = sorted(cells, key=lambda c: (c[0], -c[1]))
            futures = {pool.submit(_play_in_worker, cell): cell for cell in order}
            running = set(futures)
            try:
                while running:
                    finished, running = wait(running, POLL_S, FIRST_COMPLETED)
                    for done in sorted(finished, key=lambda f: order.index(futures[f])):
                        yield futures[done], done.result()
                    if cancelled is not None and cancelled():
                        raise PlanCancelled()
            except BaseException:  # Ctrl-C, a cancel, an error: the runs in play are dropped
                stop_pool(pool)
                raise
    finally:
        _shared = None


def _play_in_worker(cell: Cell) -> list[Figures]:
    assert _shared is not None, "set before the fork"
    evaluator, plan_ = _shared
    evaluator.cancelled = None  # the parent asks (its test may not hold in a worker)
    return _play_cell(evaluator, plan_, cell)


def stop_pool(pool: ProcessPoolExecutor, timeout_s: float = 1.0) -> None:
    """End ``pool`` now: its pending work cancelled, each worker process terminated by its
    PID (killed if still there after ``timeout_s``).

    Why not ``shutdown(wait=True)``: it waits out the cells in play, seconds each at long
    durations and many seeds; `plan` went on planning 30 s after Ctrl-C (issue 44).
    """
    workers = list((getattr(pool, "_processes", None) or {}).values())
    # the pool's own manager thread joins the workers too; until it is done, a process it
    # has reaped can still read as alive here (its waitpid answers ECHILD)
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in workers:
        with contextlib.suppress(OSError, ValueError):  # gone already, or closed
            proc.terminate()
    deadline = time.monotonic() + timeout_s
    for proc in workers:
        with contextlib.suppress(OSError, ValueError):
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(timeout_s)
    if manager is not None:
        manager.join(timeout_s)


def tie_to_parent(parent: int) -> None:
    """A worker ends with the process that forked it (SIGTERM from the kernel when it dies,
    even by SIGKILL; the pool is made and used on that process's main thread). It ignores
    SIGINT: a terminal's Ctrl-C reaches the whole process group, and ending the work is
    the parent's call (:func:`stop_pool`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the line above
        os._exit(1)
