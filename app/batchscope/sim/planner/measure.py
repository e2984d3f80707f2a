"""The capacity planner's measurements: a setting simulated at a count and seed, and a
plan's recommendation run on the live emulated worker (``verify``)."""

from __future__ import annotations

import math
import statistics
import threading
from collections.abc import Collection
from typing import Any

import numpy as np

from batchscope.config import DEFAULT_ROUTER, RunConfig
from batchscope.engine.policies import make_policy
from batchscope.engine.stats import fps_figures, latency_summary
from batchscope.policy_kinds import KINDS
from batchscope.profiles.profile import BatchCurve, DeviceProfile
from batchscope.sim.devices import DevicesPlayed
from batchscope.sim.fast_loop import Delivered, Measured
from batchscope.sim.host_jitter import HostJitter
from batchscope.sim.planner.results import Budget, Cancelled, Plan, PlanCancelled, Point, knobs
from batchscope.sim.planner.verdict import verdict
from batchscope.sim.simulator import (
    DEFAULT_WARMUP_S,
    ProfileCurves,
    Trace,
    one_step,
    play,
    play_records,
    simulated_report,
    trace_of,
)

#: (slowest session's fps, mean fps, p99 ms) of one simulated run, by the report's rules
Figures = tuple[float, float, float]

#: An early rejection needs the p99 this far (ms) over its limit: the report rounds the
#: interpolated percentile to 3 decimals, so a 99th-percentile window 0.001 ms over the
#: limit is over it whatever the rounding and the interpolation's last bit.
P99_MARGIN_MS = 0.001


class Tally:
    """A run's figures, tallied as it plays; as a :data:`~batchscope.sim.fast_loop.Stop`, the
    reject-only rules that end it early once it cannot meet the budget.

    ``need``: the fewest windows a session must deliver over the measured interval
    (0: no fps rule); ``p99_limit``: the p99 (ms) the run must not exceed (inf: no p99
    rule). At a batch's end ``now`` (the device free), with ``left`` = the most frames a
    session can still publish by the end (its period is 1/fps):

    - **fps**: a session's windows delivered so far, plus its waiting one, plus ``left``,
      is the most it can deliver; fewer than ``need`` and its fps, as the report rounds
      it, misses the budget (the slowest session's fps is at most its own);
    - **p99**: the report's p99 is ``np.percentile(latencies, 99)`` (linear, between the
      ``f``-th and ``f+1``-th smallest, ``f = ⌊0.99 (N−1)⌋``), rounded to 3 decimals.
      ``N`` is at most ``N_max`` = the windows delivered so far + the fewer of (the
      windows waiting + ``left`` per session) and (the device's best windows/s × the time
      left); if at least ``N_max − ⌊0.99 (N_max−1)⌋ + 1`` delivered windows already took
      ``p99_limit + P99_MARGIN_MS`` or more, the ``f``-th smallest of the final ``N`` does
      too (that count grows with ``N``, one more for numpy's float index), so the p99 is
      over the limit.

    Neither rule can accept: a run that is not stopped plays to its end and is judged on
    its figures.
    """

    def __init__(
        self,
        sessions: int,
        fps: float,
        t_end: float,
        need: int = 0,
        p99_limit: float = math.inf,
        windows_per_s: float = math.inf,
    ) -> None:
        self.sessions = sessions
        self.fps = fps
        self.t_end = t_end
        self.need = need
        self.p99_limit = p99_limit
        self.threshold = p99_limit + P99_MARGIN_MS
        self.windows_per_s = windows_per_s
        self.counts = np.zeros(sessions, np.int64)
        self.over = 0  # windows delivered so far that took threshold ms or more
        self._latencies: list[np.ndarray] = []
        self._batches = 0  # measured batches tallied
        self._items = 0  # and their windows

    def _tally(self, measured: Measured, delivered: Delivered) -> None:
        m = len(measured) - self._batches
        if not m:
            return
        arrivals = np.array(delivered.arrivals[self._items :], np.float64)
        sessions = np.array(delivered.sessions[self._items :], np.int64)
        _, sizes, ends, *_ = measured.columns(self._batches)
        latencies = (np.repeat(ends, sizes) - arrivals) * 1000.0  # latencies_ms's floats
        self._latencies.append(latencies)
        self.counts += np.bincount(sessions, minlength=self.sessions)[: self.sessions]
        if self.threshold < math.inf:
            self.over += int(np.count_nonzero(latencies >= self.threshold))
        self._batches += m
        self._items += len(arrivals)

    def __call__(
        self,
        now: float,
        waiting: Collection[int],
        measured: Measured,
        delivered: Delivered,
    ) -> bool:
        """Whether the run can no longer meet the budget (see the class doc)."""
        self._tally(measured, delivered)
        if self.need and int(self.most_windows(now, waiting).min()) < self.need:
            return True
        if self.over:
            n_max = self.most_items(now, waiting)
            if self.over >= n_max - math.floor(0.99 * (n_max - 1)) + 1:
                return True
        return False

    def _left(self, now: float) -> int:
        """The most frames a session publishes in (now, t_end] (its period is 1/fps), +1."""
        return int((self.t_end - now) * self.fps) + 2

    def most_windows(self, now: float, waiting: Collection[int]) -> np.ndarray:
        """Each session's most windows delivered by the end, at a batch's end ``now``."""
        most = self.counts + self._left(now)
        if waiting:
            most[list(waiting)] += 1
        return most

    def most_items(self, now: float, waiting: Collection[int]) -> int:
        """The most windows delivered by the end, all sessions, at a batch's end ``now``:
        what is waiting and will be published, and what the device can run in the time
        left (every later batch starts at ``now`` or after, and ends by ``t_end``)."""
        by_frames = len(waiting) + self.sessions * self._left(now)
        by_device = int((self.t_end - now) * self.windows_per_s) + 2
        return self._items + min(by_frames, by_device)

    def figures(self, played: DevicesPlayed) -> Figures:
        """The run's figures by the report's definitions (``fps_figures``, ``latency_summary``)."""
        self._tally(played.measured, played.delivered)
        duration = played.t_end - played.t0
        fps = fps_figures(("running", d / duration) for d in self.counts.tolist())
        latencies = np.concatenate(self._latencies) if self._latencies else np.zeros(0)
        p99 = latency_summary(latencies)["p99"]
        # a planned run always serves its sessions: its fps figures are never None
        return fps["min_fps"] or 0.0, fps["mean_fps"] or 0.0, p99


class Evaluator:
    """Simulates (setting, sessions, seed) once each and judges it against the budget.

    :meth:`fits` may stop a run early (:class:`Tally`'s reject-only rules); such a run is
    remembered as rejected under its p99 limit, and played again in full if its figures
    are asked for (:meth:`run`: the plot's series, a closest point). The records of the
    worst seed of the last (setting, count)s played are kept for :meth:`point`'s report
    (a run's ~20 000 small lists, kept, would slow every pass of the garbage collector).
    """

    KEEP = 2  # (setting, count)s whose worst seed's records are kept for a report

    def __init__(
        self,
        profile: DeviceProfile,
        base: RunConfig,
        budget: Budget,
        duration_s: float,
        warmup_s: float,
        cancelled: Cancelled | None,
        jitter: HostJitter | None = None,
    ) -> None:
        self.base = base
        self.jitter = jitter
        self.budget = budget
        self.duration_s = duration_s
        self.warmup_s = warmup_s
        self.curves = ProfileCurves(profile, base)
        self.cancelled = cancelled
        self.runs = 0
        self._memo: dict[tuple, Figures] = {}
        self._rejected: dict[tuple, float] = {}  # key -> the p99 limit it was stopped under
        self._played: dict[tuple, tuple[tuple[float, float, int], DevicesPlayed]] = {}
        # the measured interval as the trace has it: [warmup, warmup + duration]
        t_end = warmup_s + duration_s
        self._need = _windows_needed(budget, t_end - warmup_s)

    def config(self, policy: str, params: dict[str, Any], sessions: int, seed: int) -> RunConfig:
        return self.base.with_changes(
            policy=policy, sessions=sessions, seed=seed, **knobs(policy, params)
        )

    def _key(self, policy: str, params: dict[str, Any], sessions: int, seed: int) -> tuple:
        return (policy, tuple(sorted(params.items())), sessions, seed)

    def _play(
        self,
        key: tuple,
        policy: str,
        params: dict[str, Any],
        sessions: int,
        seed: int,
        p99_limit: float | None,
    ) -> Figures | None:
        """Simulate once; None when stopped early under ``p99_limit`` (None: play it all)."""
        if self.cancelled is not None and self.cancelled():
            raise PlanCancelled()
        config = self.config(policy, params, sessions, seed)
        fps = config.fps
        assert fps is not None, "the budget has a frame rate"
        t_end = self.warmup_s + self.duration_s
        if p99_limit is None:
            tally = Tally(sessions, fps, t_end)
        else:
            curve = self.curves(config)
            tally = Tally(
                sessions, fps, t_end, self._need, p99_limit, _windows_per_s(curve, config)
            )
        stop = None if p99_limit is None else tally  # a full run: tallied once, at its end
        played = play_records(one_step(config), self.curves, self.warmup_s, stop, self.jitter)
        self.runs += 1
        if played is None:
            self._rejected[key] = p99_limit if p99_limit is not None else math.inf
            return None
        figures = self._memo[key] = tally.figures(played)
        # keep the records of the worst seed so far of (setting, count): point()'s report
        group, rank = key[:3], (figures[0], -figures[2], seed)
        kept = self._played.get(group)
        if kept is None or rank < kept[0]:
            self._played[group] = (rank, played)
            while len(self._played) > self.KEEP:
                del self._played[next(iter(self._played))]
        return figures

    def run(self, policy: str, params: dict[str, Any], sessions: int, seed: int) -> Figures:
        """(slowest-session fps, mean fps, p99 ms) of one simulated run, played in full."""
        key = self._key(policy, params, sessions, seed)
        figures = self._memo.get(key)
        if figures is None:
            figures = self._play(key, policy, params, sessions, seed, None)
            assert figures is not None
        return figures

    def passes(
        self,
        policy: str,
        params: dict[str, Any],
        n: int,
        seed: int,
        p99_below: float | None = None,
    ) -> bool:
        """Whether one run meets the budget (and, with ``p99_below``, has a p99 under it)."""
        key = self._key(policy, params, n, seed)
        limit = self.budget.p99_ms if p99_below is None else min(self.budget.p99_ms, p99_below)
        figures = self._memo.get(key)
        if figures is None:
            if key in self._rejected and limit <= self._rejected[key]:
                return False  # stopped under a looser limit: over this one too
            figures = self._play(key, policy, params, n, seed, limit)
            if figures is None:
                return False
        min_fps, _, p99 = figures
        return self.budget.meets(min_fps, p99) and (p99_below is None or p99 < p99_below)

    def fits(
        self,
        policy: str,
        params: dict[str, Any],
        n: int,
        order: list[int],
        p99_below: float | None = None,
    ) -> bool:
        """Whether every seed meets the budget (and, with ``p99_below``, has a p99 under it);
        the failing seed moves to the front."""
        for seed in list(order):
            if not self.passes(policy, params, n, seed, p99_below):
                order.remove(seed)
                order.insert(0, seed)
                return False
        return True

    def trace(self, policy: str, params: dict[str, Any], n: int, seed: int) -> Trace:
        """The trace of a run: from its kept records (then forgotten), or played again (it is
        the same run)."""
        kept = self._played.pop(self._key(policy, params, n, seed)[:3], None)
        if kept is None or kept[0][2] != seed:
            config = self.config(policy, params, n, seed)
            return play(one_step(config), self.curves, self.warmup_s, self.jitter)
        return trace_of(kept[1])

    def point(self, policy: str, params: dict[str, Any], n: int, seeds: int) -> Point:
        """Every seed at ``n``, with the worst seed's full report figures."""
        runs = [self.run(policy, params, n, seed) for seed in range(seeds)]
        worst = min(range(seeds), key=lambda s: (runs[s][0], -runs[s][2]))
        trace = self.trace(policy, params, n, worst)
        report = simulated_report(trace, self.curves, self.warmup_s)
        overall = report["overall"]
        settled = None
        if KINDS[policy].learns_cap and overall["batch_sizes"]:
            sizes = overall["batch_sizes"]
            settled = int(max(sizes, key=lambda k: (sizes[k], int(k))))
        return Point(
            sessions=n,
            seeds=seeds,
            min_fps_worst=min(r[0] for r in runs),
            min_fps_median=float(statistics.median(r[0] for r in runs)),
            p99_worst=max(r[2] for r in runs),
            p99_best=min(r[2] for r in runs),
            mean_fps=min(r[1] for r in runs),
            fits=all(self.budget.meets(r[0], r[2]) for r in runs),
            overall={**overall, "seed": worst},
            settled_cap=settled,
        )


def _windows_needed(budget: Budget, duration: float) -> int:
    """The fewest windows whose fps over ``duration``, as the report rounds it, meets the
    budget's floor (``search.windows_needed``'s rule, on the trace's own duration)."""

    def enough(windows: int) -> bool:
        return (fps_figures([("running", windows / duration)])["min_fps"] or 0.0) >= budget.min_fps

    windows = math.ceil(budget.min_fps * duration)
    while windows > 0 and enough(windows - 1):
        windows -= 1
    while not enough(windows):
        windows += 1
    return windows


def _windows_per_s(curve: BatchCurve, config: RunConfig) -> float:
    """The most windows a second ``config``'s batches can deliver on ``curve``: the best
    batch size up to its largest (a fixed shape pads a smaller batch to its time)."""
    policy = make_policy(config)
    largest = config.max_batch if KINDS[config.policy].learns_cap else policy.cap
    largest = min(largest or config.sessions, config.sessions)
    shape = policy.shape or 0
    return max(b / (curve.ms(max(b, shape)) * 1.0 / 1000.0) for b in range(1, largest + 1))


#: How long ``verify`` serves the recommendation (s, after its warm-up).
VERIFY_S = 10.0


class VerifyCancelled(Exception):
    """A verification stopped before its end (the app closed, say)."""


def verify(
    plan_: Plan,
    seconds: float = VERIFY_S,
    warmup_s: float = DEFAULT_WARMUP_S,
    on: str = "inprocess",
    cancel: threading.Event | None = None,
    devices: int = 1,
    sessions: int | None = None,
    router: str = DEFAULT_ROUTER,
    promised: tuple[float, float] | None = None,
) -> dict:
    """The recommended setting served live for ``seconds`` (after a warm-up), on the emulated
    curve: by BatchScope's own worker (``on="inprocess"``), a real Ray Serve (``"ray"``) or a
    real Triton server (``"triton"``). ``{"config", "planned", "live", "on", "budget"}``.

    ``planned`` is what the plan said of the setting, the numbers its table shows
    (:func:`planned_overall`: the worst of its seeds over its duration), not a second
    simulation: a seed-0 run of ``seconds`` gave the same setting a second "planned p99"
    (27.3 ms in Verify beside 29.9 in the table). Triton has no live AIMD cap: an
    ``adaptive`` recommendation is served as ``plan --export`` writes it for Triton,
    ``all`` capped at the cap it settled at. ``cancel`` set ends it early
    (VerifyCancelled), the engine stopped.

    ``devices`` > 1: that many devices serve ``sessions`` sessions (default: the plan's
    count): emulated devices in BatchScope's worker with ``router`` (the plan is on
    profiles: the real model is not what it verifies), or replicas of the Ray
    deployment, Ray's router placing the requests (``least-loaded``, its rule: any other
    is refused); the plan is the simulator's on as many devices with the same router.
    Triton serves one device. ``promised``: the (slowest fps, p99 ms) of the plan's answer
    on ``devices`` devices (``DevicesPlan``), then the planned ones; the other figures,
    which that answer does not keep, come from the devices' simulator at seed 0."""
    from batchscope.engine.engine import Engine  # the live worker: threads, and torch's import
    from batchscope.sim.devices import load_devices, simulate_devices

    config = plan_.config().with_changes(sources=("synthetic",), duration_s=seconds, seed=0)
    config = config.with_changes(devices=devices, router=router)  # the config says who can
    if sessions is not None:
        config = config.with_changes(sessions=sessions)
    if on == "triton" and KINDS[config.policy].learns_cap:  # Triton: all, at the settled cap
        cap = plan_.recommended.at_max.settled_cap or config.max_batch
        config = config.with_changes(policy="all", max_batch=cap)
    if on != "inprocess":
        config = config.with_changes(backend=on)
    cancel = cancel or threading.Event()
    engine = Engine(config)
    try:
        engine.open()
        engine.start()
        if cancel.wait(warmup_s):
            raise VerifyCancelled()
        engine.reset_stats(announce=False)
        if cancel.wait(seconds):
            raise VerifyCancelled()
        live = engine.report()
    finally:
        engine.stop()
    if devices > 1:
        emulated = config.with_changes(backend="emulated", duration_s=plan_.duration_s)
        on_devices = load_devices([emulated.profile or ""] * devices)
        overall = dict(simulate_devices(emulated, on_devices, router, warmup_s)["overall"])
        if promised is not None:
            overall["min_fps"] = promised[0]
            overall["latency_ms"] = {**overall["latency_ms"], "p99": promised[1]}
    else:
        overall = planned_overall(plan_)
    return {
        "config": config,
        "planned": {"overall": overall},
        "live": live,
        "on": on,
        "budget": plan_.budget,
    }


def planned_overall(plan_: Plan) -> dict[str, Any]:
    """The plan's figures of its recommendation, ``overall``-shaped: the slowest session's
    fps and the p99 of the worst seed (the table's), the mean fps of the lowest seed, the
    p50 and throughput of the seed whose slowest session is slowest."""
    point = plan_.recommended.at_max
    overall = point.overall
    return {
        **overall,
        "mean_fps": point.mean_fps,
        "min_fps": point.min_fps_worst,
        "latency_ms": {**overall["latency_ms"], "p99": point.p99_worst},
    }


#: The figures planned vs served, as the verify object and table show them.
VERIFY_FIGURES = (
    ("mean_fps", "mean fps", lambda o: o["mean_fps"]),
    ("min_fps", "slowest fps", lambda o: o["min_fps"]),
    ("p50_ms", "p50 ms", lambda o: o["latency_ms"]["p50"]),
    ("p99_ms", "p99 ms", lambda o: o["latency_ms"]["p99"]),
    ("throughput_wps", "throughput w/s", lambda o: o["throughput_wps"]),
)
ENGINE_NAMES = {
    "inprocess": "BatchScope's own worker",
    "ray": "a real Ray Serve",
    "triton": "a real Triton server",
}


def verify_json(check: dict[str, Any]) -> dict[str, Any]:
    """The plan's ``verify`` object: ``on``, ``planned``, ``served`` and ``ratio``
    (served ÷ planned; None where the plan has 0), and ``verdict`` (the served run against
    the budget asked: ``pass``, its ``line``, both margins) where the check has a budget."""
    planned = {k: get(check["planned"]["overall"]) for k, _, get in VERIFY_FIGURES}
    served = {k: get(check["live"]["overall"]) for k, _, get in VERIFY_FIGURES}
    ratio = {k: round(served[k] / planned[k], 3) if planned[k] else None for k in planned}
    out = {"on": check["on"], "planned": planned, "served": served, "ratio": ratio}
    budget = check.get("budget")
    if budget is not None:  # the served run against the budget asked for
        passed = budget.meets(served["min_fps"], served["p99_ms"])
        out["verdict"] = {
            "pass": passed,
            "line": verdict(budget, served["min_fps"], served["p99_ms"]),
            "p99_margin_ms": round(budget.p99_ms - served["p99_ms"], 3),
            "min_fps_margin": round(served["min_fps"] - budget.min_fps, 3),
        }
    return out


def format_verify(check: dict[str, Any]) -> str:
    """Planned (simulated) vs served figures of the recommended setting, with ratios."""
    data = verify_json(check)
    config = check["config"]
    replicas = ""
    if config.devices > 1:
        kind = "replicas" if config.serving else "devices"
        replicas = f"{config.devices} {kind} (router {config.router}) of "
    lines = [
        f"verify: {config.policy_label()} × {config.sessions} sessions served by "
        f"{ENGINE_NAMES[data['on']]} on {replicas}the emulated {config.profile}, "
        f"{config.duration_s:g} s after a warm-up, seed {config.seed}; planned: the plan's "
        "figures (its worst seed)",
        f"{'':<16}{'planned':>9}{'served':>9}{'served/planned':>16}",
    ]
    for key, name, _ in VERIFY_FIGURES:
        a, b, ratio = data["planned"][key], data["served"][key], data["ratio"][key]
        lines.append(f"{name:<16}{a:>9.1f}{b:>9.1f}{'-' if ratio is None else f'{ratio:.3f}':>16}")
    budget = check.get("budget")
    if budget is not None:
        served = check["live"]["overall"]
        lines.append(f"served {verdict(budget, served['min_fps'], served['latency_ms']['p99'])}")
    return "\n".join(lines)
