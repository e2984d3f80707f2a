"""The planner past one device: sessions for N devices, and the fewest devices for S sessions.

Both start from the one-device plan (:func:`~batchscope.sim.planner.search.plan`): its
recommended setting (policy and knobs) and the most sessions ``M`` one device carries
with it, judged over the phase seeds. Then, on ``N`` devices of the same profile, each
with that setting (:mod:`batchscope.sim.devices`):

- ``pinned`` is a partition: each device plays its ``⌈S/N⌉`` or ``⌊S/N⌋`` sessions as a
  one-device run does, so ``N`` devices carry ``N × M`` sessions and ``S`` sessions need
  ``⌈S/M⌉`` devices. Feasibility is not monotone in the session count (``fixed`` waits
  out its delay below its batch), so both counts are judged over the seeds by the
  one-device planner's evaluator (its runs reused), and one more device is tried when
  one fails. (Played together, the devices give the same figures up to the phase draws:
  ``tests/test_devices_sim.py``.)
- ``least-loaded`` (the power of two choices) spreads every window where it waits least,
  so it may carry a few sessions more than ``N × M`` (or ``S`` on a device fewer): tried
  upwards from ``N × M + 1`` sessions (``--devices N``) or downwards from the pinned
  answer's device count (``--sessions S``) until a count fails.

Least-loaded's seeds are independent runs: with ``workers`` > 1 (Linux) they play in that
many forked processes, as the one-device planner's cells do, and the first seed that
fails cancels the others.

A count *fits* when, for every seed ``0 … seeds-1``, the slowest session gets at least
``min_fps_ratio × fps`` and the overall p99 stays within the budget — the one-device
planner's rule, on the devices' report (figures by their definitions in ``run``). The
answer prefers fewer devices, then (at the same count) ``pinned``, the simpler router.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from batchscope.config import KNOBS, ConfigError, RunConfig
from batchscope.profiles.profile import DeviceProfile
from batchscope.sim.devices import Device, load_devices, simulate_devices
from batchscope.sim.host_jitter import HostJitter
from batchscope.sim.planner.present import POLL_S, stop_pool, tie_to_parent
from batchscope.sim.planner.results import Plan, PlanCancelled
from batchscope.sim.simulator import DEFAULT_WARMUP_S

DEVICES_MAX = int(KNOBS["devices"].hi)  # the most devices `plan --sessions` considers
#: (devices, router, sessions, fits) of each count tried, for the report
Tried = list[tuple[int, str, int, bool]]
#: a seed's figures on the devices: the slowest session's fps, p99 ms, each device's busy
Figures = tuple[float, float, list[float]]


def seed_figures(
    config: RunConfig,
    on: list[Device],
    router: str,
    warmup_s: float,
    jitter: HostJitter | None = None,
) -> Figures:
    """One seed's run on the devices (``config`` has the seed), as the search judges it."""
    report = simulate_devices(config, on, router, warmup_s, jitter)
    o = report["overall"]
    return o["min_fps"], o["latency_ms"]["p99"], [d["busy"] for d in report["devices"]]


@dataclass(frozen=True)
class DevicesPlan:
    """The answer on several devices: how many, which router, and the figures there."""

    devices: int
    router: str
    sessions: int  # the sessions checked to fit on ``devices`` devices
    per_device: int  # M: what one device carries with the setting (the one-device plan)
    min_fps_worst: float  # the slowest session's fps on the worst seed, on the devices
    p99_worst: float  # the worst seed's p99 (ms), on the devices
    busy: list[float]  # each device's busy share on the worst seed
    tried: Tried = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "devices": self.devices,
            "router": self.router,
            "max_sessions": self.sessions,
            "per_device": self.per_device,
            "min_fps_worst": self.min_fps_worst,
            "p99_worst": self.p99_worst,
            "busy": self.busy,
            "tried": [
                {"devices": d, "router": r, "sessions": s, "fits": f} for d, r, s, f in self.tried
            ],
        }


class DevicesSearch:
    """Judges (devices, router, sessions) over the plan's seeds with its setting."""

    def __init__(
        self,
        result: Plan,
        profile: DeviceProfile,
        warmup_s: float = DEFAULT_WARMUP_S,
        cancelled: Callable[[], bool] | None = None,
        workers: int = 1,
    ) -> None:
        self.result = result
        self.profile = profile
        self.warmup_s = warmup_s
        self.cancelled = cancelled
        forks = workers > 1 and result.seeds > 1 and sys.platform == "linux"
        self._pool: ProcessPoolExecutor | None = None
        if forks:  # made on this (the caller's main) thread, each worker tied to it
            self._pool = ProcessPoolExecutor(
                workers,
                mp_context=mp.get_context("fork"),
                initializer=tie_to_parent,
                initargs=(os.getpid(),),
            )
        self.base = result.config()
        self.jitter = result.runs.jitter  # a measured host's lateness, as the plan replayed
        self.tried: Tried = []
        self.figures: dict[tuple[int, str, int], tuple[float, float, list[float]]] = {}

    def fits(self, devices: int, router: str, sessions: int) -> bool:
        """Whether every seed meets the budget; the worst seed's figures are kept."""
        ok = (
            self._pinned(devices, sessions)
            if router == "pinned"
            else self._played(devices, router, sessions)
        )
        self.tried.append((devices, router, sessions, ok))
        return ok

    def _pinned(self, devices: int, sessions: int) -> bool:
        """A partition: each device a one-device run of its ⌈S/N⌉ or ⌊S/N⌋ sessions, judged
        by the one-device planner's evaluator (its runs reused; a device's sessions draw
        their phases as a one-device run of them does)."""
        rec, evaluator = self.result.recommended, self.result.runs
        counts = sorted({c for c in (-(-sessions // devices), sessions // devices) if c > 0})
        order = list(range(self.result.seeds))
        ok = all(evaluator.fits(rec.policy, rec.params, c, order) for c in counts)
        points = [evaluator.point(rec.policy, rec.params, c, self.result.seeds) for c in counts]
        worst = min(points, key=lambda p: (p.min_fps_worst, -p.p99_worst))
        p99 = max(p.p99_worst for p in points)
        busy = {c: p.overall.get("busy", 0.0) for c, p in zip(counts, points, strict=True)}
        spread = [busy[-(-sessions // devices)]] * (sessions % devices)
        spread += [busy.get(sessions // devices, 0.0)] * (devices - sessions % devices)
        self.figures[(devices, "pinned", sessions)] = (worst.min_fps_worst, p99, spread)
        return ok

    def close(self, now: bool = False) -> None:
        """Stop the forked workers (if any); ``now``: without waiting for the seeds in play
        (Ctrl-C, a cancel: their figures are not wanted)."""
        if self._pool is not None:
            if now:
                stop_pool(self._pool)
            else:
                self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _played(self, devices: int, router: str, sessions: int) -> bool:
        """The devices played together (:mod:`batchscope.sim.devices`), every seed (in the
        forked workers when there are some); the first failing seed rejects the count."""
        budget = self.result.budget
        on: list[Device] = load_devices([self.profile.name] * devices, self.profile)
        configs = [
            self.base.with_changes(sessions=sessions, seed=seed)
            for seed in range(self.result.seeds)
        ]
        worst: Figures | None = None
        ok = True
        for figures in self._seeds(configs, on, router):
            if worst is None or (figures[0], -figures[1]) < (worst[0], -worst[1]):
                worst = figures
            if not budget.meets(figures[0], figures[1]):
                ok = False
                break  # the first failing seed rejects it (the others are cancelled)
        assert worst is not None
        self.figures[(devices, router, sessions)] = worst
        return ok

    def _seeds(self, configs: list[RunConfig], on: list[Device], router: str) -> Iterator[Figures]:
        """Each seed's figures, in order here or as they finish in the workers."""
        if self._pool is None:
            for config in configs:
                if self.cancelled is not None and self.cancelled():
                    raise PlanCancelled()
                yield seed_figures(config, on, router, self.warmup_s, self.jitter)
            return
        running: set[Future] = {
            self._pool.submit(seed_figures, c, on, router, self.warmup_s, self.jitter)
            for c in configs
        }
        try:
            while running:
                finished, running = wait(running, POLL_S, FIRST_COMPLETED)
                for done in finished:
                    yield done.result()
                if self.cancelled is not None and self.cancelled():
                    raise PlanCancelled()
        finally:  # a failing seed (or a cancel) leaves the rest unplayed
            for future in running:
                future.cancel()

    def answer(self, devices: int, router: str, sessions: int) -> DevicesPlan:
        min_fps, p99, busy = self.figures[(devices, router, sessions)]
        return DevicesPlan(
            devices=devices,
            router=router,
            sessions=sessions,
            per_device=self.result.recommended.max_sessions,
            min_fps_worst=min_fps,
            p99_worst=p99,
            busy=busy,
            tried=list(self.tried),
        )


def _one_device(result: Plan) -> int:
    m = result.recommended.max_sessions
    if m == 0:
        raise ConfigError(
            "p99_ms",
            result.budget.p99_ms,
            f"no setting meets the budget at 1 session on {result.profile}, so no count of "
            "devices does",
        )
    return m


def sessions_for_devices(
    result: Plan,
    profile: DeviceProfile,
    devices: int,
    warmup_s: float = DEFAULT_WARMUP_S,
    cancelled: Callable[[], bool] | None = None,
    workers: int = 1,
) -> DevicesPlan:
    """The most sessions ``devices`` devices carry with the plan's setting (module doc);
    ``workers`` > 1: least-loaded's seeds in that many forked processes."""
    if not 1 <= devices <= DEVICES_MAX:
        raise ConfigError("devices", devices, f"must be 1 to {DEVICES_MAX} devices")
    m = _one_device(result)
    search = DevicesSearch(result, profile, warmup_s, cancelled, workers)
    try:
        answer = _sessions_for(search, devices, m)
    except BaseException:  # Ctrl-C, a cancel, an error: the seeds in play are dropped
        search.close(now=True)
        raise
    search.close()
    return answer


def _sessions_for(search: DevicesSearch, devices: int, m: int) -> DevicesPlan:
    most = devices * m
    if not search.fits(devices, "pinned", most):  # the partition's runs, on N devices
        raise ConfigError(
            "devices",
            devices,
            f"{most} sessions pinned {m} per device did not fit for every seed on the "
            "devices, though one device carries them: please report this",
        )
    best = (most, "pinned")
    limit = int(KNOBS["sessions"].hi)
    n = most + 1
    while devices > 1 and n <= limit and search.fits(devices, "least-loaded", n):
        best = (n, "least-loaded")
        n += 1
    return search.answer(devices, best[1], best[0])


def fewest_devices(
    result: Plan,
    profile: DeviceProfile,
    sessions: int,
    devices_max: int = DEVICES_MAX,
    warmup_s: float = DEFAULT_WARMUP_S,
    cancelled: Callable[[], bool] | None = None,
    workers: int = 1,
) -> DevicesPlan | None:
    """The fewest devices that carry ``sessions`` (None: not within ``devices_max``);
    ``workers`` > 1: least-loaded's seeds in that many forked processes."""
    KNOBS["sessions"].check(sessions)
    if not 1 <= devices_max <= DEVICES_MAX:
        raise ConfigError("devices_max", devices_max, f"must be 1 to {DEVICES_MAX} devices")
    m = _one_device(result)
    search = DevicesSearch(result, profile, warmup_s, cancelled, workers)
    try:
        answer = _fewest(search, sessions, devices_max, m)
    except BaseException:  # Ctrl-C, a cancel, an error: the seeds in play are dropped
        search.close(now=True)
        raise
    search.close()
    return answer


def _fewest(search: DevicesSearch, sessions: int, devices_max: int, m: int) -> DevicesPlan | None:
    n = math.ceil(sessions / m)
    while n <= devices_max and not search.fits(n, "pinned", sessions):
        n += 1  # a partition of ⌊S/N⌋ may not fit where M does (not monotone)
    found = (n, "pinned") if n <= devices_max else None
    k = min(n, devices_max + 1) - 1
    while k >= 1 and search.fits(k, "least-loaded", sessions):
        found = (k, "least-loaded")
        k -= 1
    if found is None:
        return None
    return search.answer(found[0], found[1], sessions)
