"""Rally physics for the synthetic scene: where the ball is, as a pure function of a seed.

Models the points of a table-tennis match on a regulation table: a toss and serve, shots aimed
to clear the net and land on the far half, bounces on the table and the floor (restitution and
a loss of horizontal speed), and a final miss that flies out, with pauses between points when
no ball is in play. Flight is drag- and spin-free: parabolic arcs under gravity, so the path is
exact piecewise-parabolic segments that can be evaluated at any time.

Units are SI: metres, seconds, metres per second. World axes: x along the table (net at x = 0),
y across it (away from the camera in the scene), z up from the floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

GRAVITY_M_S2 = np.array([0.0, 0.0, -9.81])
TABLE_HALF_LENGTH_M = 1.37
TABLE_HALF_WIDTH_M = 0.7625
TABLE_HEIGHT_M = 0.76
NET_HALF_WIDTH_M = 0.915
NET_HEIGHT_M = 0.1525
BALL_RADIUS_M = 0.02
# The surround boards behind the table (m from the table's centre line); a ball that flies
# out of play leaves view before it would reach them.
SURROUND_Y_M = 3.4
TABLE_RESTITUTION = 0.88
FLOOR_RESTITUTION = 0.6
# Horizontal speed kept through a bounce (friction and spin losses).
BOUNCE_SPEED_KEPT = 0.92
# The shortest simulated period (s); it ends at the end of a pause so the loop has no seam.
MIN_PERIOD_S = 20.0
_TOP_Z_M = TABLE_HEIGHT_M + BALL_RADIUS_M  # ball centre height when it touches the table


@dataclass(frozen=True)
class BallPath:
    """A piecewise-parabolic ball path: segment k starts at ``t0[k]`` (s) at ``p0[k]`` (m)
    with velocity ``v0[k]`` (m/s) under gravity; segments with ``in_play[k]`` False are pauses
    with no ball."""

    t0: np.ndarray
    p0: np.ndarray
    v0: np.ndarray
    in_play: np.ndarray

    def at(self, times_s: np.ndarray) -> tuple[np.ndarray, bool]:
        """Ball centres (n, 3) in metres at ``times_s``, and whether all of them are in play."""
        k = np.clip(np.searchsorted(self.t0, times_s, side="right") - 1, 0, None)
        dt = (times_s - self.t0[k])[:, None]
        points = self.p0[k] + self.v0[k] * dt + 0.5 * GRAVITY_M_S2 * dt**2
        return points, bool(self.in_play[k].all())


class _PathBuilder:
    """Collects the segments of a ``BallPath`` in time order while a point is simulated."""

    def __init__(self) -> None:
        self._segments: list[tuple[float, np.ndarray, np.ndarray, bool]] = []

    def add(self, t0: float, p0: np.ndarray, v0: np.ndarray, in_play: bool = True) -> None:
        self._segments.append((t0, p0.copy(), v0.copy(), in_play))

    def build(self) -> BallPath:
        t0, p0, v0, in_play = zip(*self._segments, strict=True)
        return BallPath(np.array(t0), np.array(p0), np.array(v0), np.array(in_play))


def _contact_time(z: float, vz: float, plane_z: float) -> float | None:
    """Time (s) until the ball's centre, at height ``z`` (m) rising at ``vz`` (m/s), next
    crosses ``plane_z`` (m) going down; None if it never gets that high."""
    g = -GRAVITY_M_S2[2]
    disc = vz * vz + 2.0 * g * (z - plane_z)
    if disc < 0.0:
        return None
    return (vz + math.sqrt(disc)) / g


def _state(p: np.ndarray, v: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
    return p + v * dt + 0.5 * GRAVITY_M_S2 * dt * dt, v + GRAVITY_M_S2 * dt


def _bounce(v: np.ndarray, restitution: float) -> np.ndarray:
    return np.array(
        [v[0] * BOUNCE_SPEED_KEPT, v[1] * BOUNCE_SPEED_KEPT, -v[2] * restitution],
    )


def _fly(
    path: _PathBuilder, t: float, p: np.ndarray, v: np.ndarray, duration_s: float
) -> tuple[float, np.ndarray]:
    """Free flight for ``duration_s`` with bounces on the table and the floor.

    Returns the time and position at the end of the flight.
    """
    end = t + duration_s
    while True:
        contact = None
        dt = _contact_time(p[2], v[2], _TOP_Z_M)
        if dt is not None:
            q, _ = _state(p, v, dt)
            if abs(q[0]) <= TABLE_HALF_LENGTH_M and abs(q[1]) <= TABLE_HALF_WIDTH_M:
                contact = (dt, _TOP_Z_M, TABLE_RESTITUTION)
        if contact is None:
            dt = _contact_time(p[2], v[2], BALL_RADIUS_M)
            contact = (dt if dt is not None else math.inf, BALL_RADIUS_M, FLOOR_RESTITUTION)
        dt, plane_z, restitution = contact
        path.add(t, p, v)
        if t + dt >= end:
            return end, _state(p, v, end - t)[0]
        p, v = _state(p, v, dt)
        p[2] = plane_z
        v = _bounce(v, restitution)
        t += dt


def _aim(rng: np.random.Generator, p: np.ndarray, towards: int) -> tuple[np.ndarray, float]:
    """A shot from ``p`` that lands on the half of the table at sign ``towards`` of x.

    Returns the launch velocity (m/s) and the flight time (s) to the bounce; a shot too flat to
    clear the net is flown higher and slower until it does.
    """
    target = np.array(
        [towards * rng.uniform(0.35, 1.2), rng.uniform(-0.6, 0.6), _TOP_Z_M],
    )
    flight_s = abs(target[0] - p[0]) / rng.uniform(5.0, 13.0)
    clearance_z = TABLE_HEIGHT_M + NET_HEIGHT_M + BALL_RADIUS_M + 0.03
    while True:
        v = (target - p - 0.5 * GRAVITY_M_S2 * flight_s**2) / flight_s
        t_net = -p[0] / v[0]
        if _state(p, v, t_net)[0][2] > clearance_z:
            return v, flight_s
        flight_s *= 1.1


def _rally(path: _PathBuilder, rng: np.random.Generator, t: float) -> float:
    """Simulate one point: a toss, a serve, returns, and a miss that flies out. Returns its end."""
    hitter = int(rng.choice([-1, 1]))
    p = np.array([hitter * (TABLE_HALF_LENGTH_M + 0.2), rng.uniform(-0.4, 0.4), _TOP_Z_M + 0.1])
    t, p = _fly(path, t, p, np.array([0.0, 0.0, 2.2]), rng.uniform(0.32, 0.42))
    shots = int(rng.integers(3, 10))
    for shot in range(shots):
        v, flight_s = _aim(rng, p, -hitter)
        path.add(t, p, v)
        p, v = _state(p, v, flight_s)
        p[2] = _TOP_Z_M
        v = _bounce(v, TABLE_RESTITUTION)
        t += flight_s
        if shot == shots - 1:
            tail_s = rng.uniform(0.4, 0.7)
            if v[1] > 0:
                tail_s = min(tail_s, (SURROUND_Y_M - 0.3 - p[1]) / v[1])
            t, _ = _fly(path, t, p, v, tail_s)
            return t
        reach_x = -hitter * (TABLE_HALF_LENGTH_M + rng.uniform(0.15, 0.5))
        hit_s = (reach_x - p[0]) / v[0]
        # A ball that has dropped too low by then is taken earlier, on its way down.
        lowest_hit_z = _TOP_Z_M + 0.1
        at_reach, v_at_reach = _state(p, v, hit_s)
        if at_reach[2] < lowest_hit_z and v_at_reach[2] < 0:
            hit_s = _contact_time(p[2], v[2], lowest_hit_z) or hit_s
        path.add(t, p, v)
        p, _ = _state(p, v, hit_s)
        t += hit_s
        hitter = -hitter
    return t


def simulate(seed: int, fps: float) -> tuple[BallPath, int]:
    """Rallies separated by pauses, for at least ``MIN_PERIOD_S``; returns the path and the
    period in frames. The period starts and ends inside a pause, so looping it is seamless."""
    rng = np.random.default_rng(seed)
    path = _PathBuilder()
    t = 0.0
    origin = np.zeros(3)
    path.add(t, origin, origin, in_play=False)
    t += rng.uniform(0.2, 0.4)
    while t < MIN_PERIOD_S:
        t = _rally(path, rng, t)
        path.add(t, origin, origin, in_play=False)
        t += rng.uniform(0.2, 0.4)
    return path.build(), math.ceil(t * fps)
