"""The simulator's clock: every session's frame times, in bulk, between two changes.

The live feeder paces each session at its fps from its own phase; the
simulator computes the same frame times for a whole stretch at once
(:meth:`Clock.schedule`). Faults change a session's pace here, by the live
feeder's and roster's rules.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from batchscope.config import RunConfig
from batchscope.engine.session import WINDOW, first_frame_delay
from batchscope.engine.stats import OVERWRITE_DTYPE
from batchscope.sim.host_jitter import HostJitter

NEVER = float("inf")


@dataclass
class Schedule:
    """The windows the sessions publish from one instant to the next change, in event order.

    ``times_array``/``sessions_array`` are the windows' times and sessions;
    ``times``/``sessions`` the same as lists (fast to index one by one, made when a
    Python loop first asks), ``times`` ending in a sentinel. ``opened`` collects the
    indices of the windows published into an empty mailbox and ``published`` counts
    those published before the next schedule took over: the others replaced an
    untaken window (recording the openings, about one per batch, is cheaper than
    recording every overwrite).
    """

    times_array: np.ndarray
    sessions_array: np.ndarray
    opened: list[int]
    published: int = 0

    @cached_property
    def times(self) -> list[float]:
        return [*self.times_array.tolist(), NEVER]

    @cached_property
    def sessions(self) -> list[int]:
        return self.sessions_array.tolist()


class Clock:
    """Every session's frame times.

    Session ``sid``'s k-th frame after its anchor is due at ``anchor[sid] + k *
    period`` (the live feeder's pacing; the anchor moves when the pace changes),
    and publishes a window from the 3rd frame of its run on (``run_start[sid]``:
    the k that opened the run; a new resolution or sources open a new run, as
    the live roster re-makes its sessions). Frames are computed in bulk for the
    stretch up to the next change (:meth:`schedule`) instead of one heap event
    per frame; the times are the same floats the per-frame loop computed.

    Faults change a session's pace here, by the live feeder's and roster's rules
    (``engine/fault_actions.py``): ``scale`` is :meth:`Feeder.scale`'s factor (K > 1: a
    burst at K × fps; 0: a stall, which keeps the session's schedule and sends
    nothing), ``failed`` the sessions whose source failed (no schedule at all
    until :meth:`recover` gives a fresh phase). A *muted* session (stalled or
    failed) is left out of the schedule, and its frames do not advance: its
    window keeps the frames it held (``held``) and goes on from there.
    """

    def __init__(
        self, config: RunConfig, n_ids: int, t_end: float, jitter: HostJitter | None = None
    ) -> None:
        fps = config.fps
        assert fps is not None, "play() checks the frame rate first (need_fps)"
        self.rng = random.Random(config.seed)
        self.fps = fps
        self.period = 1.0 / fps
        self.sessions = config.sessions
        self.t_end = t_end
        self.anchor = [0.0] * n_ids
        self.run_start = [0] * n_ids
        for sid in range(config.sessions):
            self.anchor[sid] = first_frame_delay(self.rng, fps)
        self.scale: dict[int, float] = {}  # session -> pace factor while a stall or burst lasts
        self.failed: set[int] = set()  # sessions whose source failed (a source_error fault)
        self.held: dict[int, int] = {}  # muted session -> frames in its window when muted
        self.schedules: list[Schedule] = []
        # a measured host's publish lateness, replayed (sim/host_jitter.py); None: none
        self.jitter = jitter
        self._delays = np.random.default_rng(config.seed + 90_210) if jitter else None

    def _period(self, sid: int) -> float:
        """s between ``sid``'s frames: a stalled session keeps the normal pace (as live)."""
        return self.period / (self.scale.get(sid, 1.0) or 1.0)

    def muted(self, sid: int) -> bool:
        return sid in self.failed or self.scale.get(sid) == 0.0

    def _due_before(self, sid: int, t: float) -> int:
        """How many of ``sid``'s frames (k = 0, 1, …) are due before ``t``."""
        anchor, period = self.anchor[sid], self._period(sid)
        k = max(0, math.ceil((t - anchor) / period))
        while k > 0 and anchor + (k - 1) * period >= t:
            k -= 1
        while anchor + k * period < t:
            k += 1
        return k

    def schedule(self, now: float, until: float) -> Schedule:
        """The windows published from ``now`` (inclusive) to the next change.

        ``until`` is that change's instant: every change makes a new schedule there,
        so frames from then on come from the next one (and none after the run's end).
        """
        until = min(until, self.t_end)
        ids = [sid for sid in range(self.sessions) if not self.muted(sid)]
        periods = np.array([self._period(sid) for sid in ids])[:, None]
        first = np.array([self._due_before(sid, now) for sid in ids], dtype=np.int64)
        span = int((until - now) / periods.min()) + 3 if ids else 0
        ks = first[:, None] + np.arange(span, dtype=np.int64)[None, :]
        times = np.array([self.anchor[sid] for sid in ids])[:, None] + ks * periods
        keep = times <= until  # frames due in the stretch (late ones too)
        if self.jitter is not None and self._delays is not None:  # each published late,
            late = times + self.jitter.publish_delays(self._delays, times.shape)
            times = np.maximum.accumulate(late, axis=1)  # a session's frames in order
        sids = np.broadcast_to(np.array(ids, dtype=np.int64)[:, None], ks.shape)[keep]
        times, ks = times[keep], ks[keep]
        order = np.argsort(times, kind="stable")  # (time, session): sids ascend, row-major
        times, sids, ks = times[order], sids[order], ks[order]
        publishes = ks >= np.array(self.run_start, dtype=np.int64)[sids] + (WINDOW - 1)
        times, sids = times[publishes], sids[publishes]
        frames = Schedule(times, sids, [])
        self.schedules.append(frames)
        return frames

    def _repace(self, sid: int, now: float, at_once: bool = False) -> None:
        """Re-anchor ``sid`` at its next frame (``at_once``: at ``now``), before a new pace.

        The live feeder's rule for a new fps or scale: the frame already due keeps its
        time and the next ones follow at the new period; a burst's first frame is now.
        """
        k = self._due_before(sid, now)
        self.anchor[sid] = now if at_once else self.anchor[sid] + k * self._period(sid)
        self.run_start[sid] -= k

    def _muting(self, sid: int, was_muted: bool, now: float) -> None:
        """Keep a session's window across a mute: it holds its frames, then goes on."""
        if self.muted(sid) and not was_muted:
            self.held[sid] = self._due_before(sid, now) - self.run_start[sid]
        elif was_muted and not self.muted(sid):
            self.run_start[sid] = self._due_before(sid, now) - self.held.pop(sid)

    def change(self, old: RunConfig, new: RunConfig, now: float, restart: bool) -> None:
        """Sessions after a step at ``now``: re-paced, runs restarted, joined (in that order)."""
        fps = new.fps
        assert fps is not None, "a step's config has its frame rate checked (need_fps)"
        kept = range(min(new.sessions, old.sessions))
        if fps != old.fps:  # kept sessions keep their next frame, then re-pace
            for sid in kept:
                self._repace(sid, now)
            self.fps, self.period = fps, 1.0 / fps
        if restart:
            for sid in kept:
                self.run_start[sid] = self._due_before(sid, now)
                if self.muted(sid):
                    self.held[sid] = 0
        for sid in range(old.sessions, new.sessions):
            self.anchor[sid] = now + first_frame_delay(self.rng, fps)
            self.run_start[sid] = 0
            self.failed.discard(sid)  # a new session: its source plays (a stall still holds)
            if self.muted(sid):
                self.held[sid] = 0
            else:
                self.held.pop(sid, None)
        self.sessions = new.sessions

    def set_scale(self, sid: int, factor: float, now: float) -> None:
        """``Feeder.scale``: pace ``sid`` at ``factor`` × fps (0 stalls it, 1 is normal)."""
        was_muted = self.muted(sid)
        if sid < self.sessions:
            self._repace(sid, now, at_once=factor > 1.0)
        if factor == 1.0:
            self.scale.pop(sid, None)
        else:
            self.scale[sid] = factor
        self._muting(sid, was_muted, now)

    def fail(self, sid: int, now: float) -> None:
        """The session's source failed: it publishes nothing (its pending window stays)."""
        was_muted = self.muted(sid)
        self.failed.add(sid)
        self._muting(sid, was_muted, now)

    def recover(self, sid: int, now: float) -> None:
        """``Roster.recover``: a failed session plays again from a fresh phase drawn now."""
        if sid not in self.failed or sid >= self.sessions:
            return
        self.anchor[sid] = now + first_frame_delay(self.rng, self.fps)
        self.failed.discard(sid)
        self._muting(sid, True, now)

    def overwrites(self) -> np.ndarray:
        """:data:`OVERWRITE_DTYPE` rows of every window replaced while untaken by the run's
        end, in time order (a late host publishes some frames past the end; the loops
        publish up to their first instant past it)."""
        index = []
        for f in self.schedules:
            over = np.ones(f.published, dtype=bool)
            over[f.opened] = False
            index.append(np.flatnonzero(over))
        out = np.empty(sum(len(x) for x in index), OVERWRITE_DTYPE)
        out["session"] = np.concatenate(
            [f.sessions_array[x] for f, x in zip(self.schedules, index, strict=True)]
        )
        out["t"] = np.concatenate(
            [f.times_array[x] for f, x in zip(self.schedules, index, strict=True)]
        )
        return out[out["t"] <= self.t_end]
