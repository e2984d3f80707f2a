"""Where everything of the bus view goes: the device's recent batches as plain arrays.

One layout for the live view (``ui/plots/bus.py``, pyqtgraph) and the report's
still picture (``render/bus_chart.py``, QPainter), so both draw the same thing.
No Qt here: numbers in, numbers out.

The picture, top to bottom: the *device* band, where each batch is a bar from its
start to its end, stacked from cells, one per window it carried, in the colour of
that window's session (a full bus reaches the top of the band: its height is
"sessions"), so idle time is empty band — on several devices one band per device,
device 0 at the bottom, so where the router sent each window shows; then one *lane*
per session, on which
each window's wait is a line from its arrival to its batch's start, and each
window overwritten in the mailbox before the worker took it is a ×.
Times are s since the run started (the time axes of every other plot).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

import numpy as np

from batchscope.engine.rules import REASONS
from batchscope.engine.snapshot import BUS_S, BusRecords

LANE = 1.0  # a session lane's height (y units)
GAP = 0.6  # between the device band and the first lane


@dataclass(frozen=True)
class BusLayout:
    """The bus view of ``[t_min, t_max]`` (s since start), as arrays to draw."""

    t_min: float
    t_max: float
    lanes: tuple[int, ...]  # session ids, top lane first
    band: tuple[float, float]  # the device band's bottom and top (y)
    cell_h: float  # one window's height in the band
    #: session id -> (x0, x1, y0) of each of its cells (height cell_h)
    cells: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    #: session id -> (arrival, start) of each of its windows' waits, on its lane
    waits: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    #: each overwritten window: (t, y just above its lane, its session)
    overwrites: tuple[np.ndarray, ...] = (np.empty(0), np.empty(0), np.empty(0, int))
    #: the batches in view (start, end in s since start; size; reason; cap; oldest wait ms)
    batches: np.ndarray = field(default_factory=lambda: np.empty(0, BATCH_VIEW))
    #: batch index -> the session ids it carried (for the tooltip)
    members: tuple[tuple[int, ...], ...] = ()
    #: each window dropped for waiting past drop_after_ms: (t, y just below its lane, session)
    expiries: tuple[np.ndarray, ...] = (np.empty(0), np.empty(0), np.empty(0, int))
    devices: int = 1  # bands in the device band, one per device, device 0 at the bottom

    @property
    def device_h(self) -> float:
        """One device's band height (y units)."""
        return (self.band[1] - self.band[0]) / self.devices

    def device_at(self, y: float) -> int:
        """The device whose band holds ``y`` (clamped to the bands)."""
        d = int((y - self.band[0]) // self.device_h)
        return min(max(d, 0), self.devices - 1)

    def lane_y(self, sid: int) -> float:
        return -GAP - LANE * (self.lanes.index(sid) + 0.5)

    @property
    def y_range(self) -> tuple[float, float]:
        return (-GAP - LANE * len(self.lanes), self.band[1])

    def reason_counts(self) -> dict[str, int]:
        """How many batches in view left for each reason, most first."""
        reasons, counts = np.unique(self.batches["reason"], return_counts=True)
        named = {
            REASONS[int(r)] or "not said": int(c) for r, c in zip(reasons, counts, strict=True)
        }
        return dict(sorted(named.items(), key=lambda kv: -kv[1]))

    def busy(self) -> float:
        """Share of the span the device spent in batches (1 − idle); on several devices,
        their mean."""
        span = self.t_max - self.t_min
        if span <= 0 or not len(self.batches):
            return 0.0
        lo = np.clip(self.batches["start"], self.t_min, self.t_max)
        hi = np.clip(self.batches["end"], self.t_min, self.t_max)
        return float((hi - lo).sum() / span / self.devices)

    def batch_at(self, t: float, device: int = 0) -> int | None:
        """The index of the batch running at ``t`` (s since start) on ``device``, or None
        (idle)."""
        b = self.batches
        for i in np.flatnonzero((b["device"] == device) & (b["start"] <= t) & (b["end"] >= t)):
            return int(i)
        return None

    def describe(self, i: int) -> str:
        """One batch in one line: when, who, how long, and why it left."""
        b = self.batches[i]
        who = " ".join(f"S{s}" for s in self.members[i]) or "–"
        cap = f" (cap {int(b['cap'])})" if b["cap"] else ""
        reason = REASONS[int(b["reason"])] or "not said"
        on = f" on device {int(b['device'])}" if self.devices > 1 else ""
        return (
            f"batch at {b['start']:.3f} s{on}: {int(b['size'])} window(s) {who} · "
            f"{(b['end'] - b['start']) * 1000:.1f} ms · oldest waited {b['wait_ms']:.1f} ms · "
            f"left: {reason}{cap}"
        )


#: The batches as the view keeps them (times in s since start).
BATCH_VIEW: np.dtype = np.dtype(  # annotated: the dataclass above reads it before it is defined
    [
        ("start", np.float64),
        ("end", np.float64),
        ("size", np.int32),
        ("reason", np.int8),
        ("cap", np.int32),
        ("wait_ms", np.float64),  # the longest its windows waited (arrival → start)
        ("device", np.int16),  # the device that ran it
    ]
)


def reasons_text(counts: dict[str, int]) -> str:
    """ "full 62%, deadline 38%" (shares of the batches counted)."""
    total = sum(counts.values())
    if not total:
        return "no batches"
    return ", ".join(f"{name} {100 * n / total:.0f}%" for name, n in counts.items())


def bus_layout(
    bus: BusRecords,
    now: float,
    sessions: Iterable[int] = (),
    span: float = BUS_S,
    until: float | None = None,
    lanes_for: Collection[int] | None = None,
    devices: int = 1,
) -> BusLayout:
    """Lay out ``bus`` over the ``span`` seconds up to ``until`` (default ``now``), s since start.

    ``sessions``: the lanes to show even if they had no window in view (the run's
    sessions now); sessions seen in the records get lanes too. ``lanes_for``: only these
    sessions get a lane (a view singling out a few of many); every window still fills
    its cell in the device band, whose full height stays "all sessions". ``devices``:
    one band each (the records say which device ran each batch), the same height each.
    """
    t1 = now if until is None else until
    t_min, t_max = t1 - span, t1
    t0 = bus.t0
    b = bus.batches
    b = b[np.lexsort((b["start"], b["device"]))]  # by device, then start (match below)
    start, end = b["start"] - t0, b["end"] - t0
    keep = (end >= t_min) & (start <= t_max)
    b, start, end = b[keep], start[keep], end[keep]
    devices = max(devices, int(b["device"].max()) + 1 if len(b) else 1)
    items = bus.items
    i_start = items["start"] - t0
    items = items[i_start <= t_max]  # a window shows where its batch does (matched below)
    over = bus.overwrites
    over = over[(over["t"] - t0 >= t_min) & (over["t"] - t0 <= t_max)]
    gone = bus.expiries
    gone = gone[(gone["t"] - t0 >= t_min) & (gone["t"] - t0 <= t_max)]
    every = (
        set(sessions)
        | {int(s) for s in items["session"]}
        | {int(s) for s in over["session"]}
        | {int(s) for s in gone["session"]}
    )
    lanes = tuple(sorted(every if lanes_for is None else set(lanes_for)))
    over = over[np.isin(over["session"], lanes)]
    gone = gone[np.isin(gone["session"], lanes)]
    device_h = max(3.0, 0.5 * max(1, len(lanes))) * LANE
    band_h = device_h * devices
    cell_h = device_h / max(len(every), int(b["size"].max()) if len(b) else 1, 1)
    layout_lanes = {sid: -GAP - LANE * (k + 0.5) for k, sid in enumerate(lanes)}

    items, batch_of, rank = _match_batches(b, items)
    view, members = _batch_view(b, start, end, items, batch_of)

    cells, waits = {}, {}
    x0 = items["start"] - t0
    x1 = end[batch_of] if len(b) else x0
    y0 = rank * cell_h + (b["device"][batch_of] * device_h if len(b) else 0.0)
    arrival = items["arrival"] - t0
    for sid in sorted(every):
        mine = items["session"] == sid
        if mine.any():
            cells[sid] = (x0[mine], x1[mine], y0[mine])
            if sid in layout_lanes:
                waits[sid] = (arrival[mine], x0[mine])
    # a × sits just above its lane's wait line, so the two never hide each other
    over_y = np.array([layout_lanes[int(s)] + 0.28 * LANE for s in over["session"]], float)
    gone_y = np.array([layout_lanes[int(s)] - 0.28 * LANE for s in gone["session"]], float)
    return BusLayout(
        t_min,
        t_max,
        lanes,
        (0.0, band_h),
        cell_h,
        cells,
        waits,
        (over["t"] - t0, over_y, over["session"].astype(int)),
        view,
        tuple(tuple(m) for m in members),
        (gone["t"] - t0, gone_y, gone["session"].astype(int)),
        devices,
    )


def _match_batches(b: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each window's batch in ``b``, by its device and its shared start time, and the
    window's place in it by session: (the windows that ran in one of ``b``, sorted by
    device, start and session; the index of each one's batch; its rank in that batch)."""
    # batches sorted by device then start: one search over both keys
    order = np.lexsort((items["session"], items["start"], items["device"]))
    items = items[order]
    if len(b):
        span = max(1.0, float(np.abs(b["start"]).max()) * 4.0)
        key_b = b["device"] * span + b["start"]
        key_i = items["device"] * span + items["start"]
        batch_of = np.clip(np.searchsorted(key_b, key_i), 0, len(b) - 1)
        ok = (b["start"][batch_of] == items["start"]) & (b["device"][batch_of] == items["device"])
    else:
        batch_of, ok = np.zeros(len(items), np.intp), np.zeros(len(items), bool)
    items, batch_of = items[ok], batch_of[ok]
    first = np.r_[True, batch_of[1:] != batch_of[:-1]] if len(items) else np.zeros(0, bool)
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(items)), 0))
    rank = np.arange(len(items)) - group_start
    return items, batch_of, rank


def _batch_view(
    b: np.ndarray, start: np.ndarray, end: np.ndarray, items: np.ndarray, batch_of: np.ndarray
) -> tuple[np.ndarray, list[list[int]]]:
    """The batches in view as :data:`BATCH_VIEW` rows (``start`` and ``end`` in s since
    start; each one's longest wait over its windows), and the sessions each carried."""
    waits_ms = (items["start"] - items["arrival"]) * 1000.0
    view = np.zeros(len(b), BATCH_VIEW)
    view["start"], view["end"] = start, end
    view["size"], view["reason"], view["cap"] = b["size"], b["reason"], b["cap"]
    view["device"] = b["device"]
    if len(items):
        np.maximum.at(view["wait_ms"], batch_of, waits_ms)
    members: list[list[int]] = [[] for _ in range(len(b))]
    for k, sid in zip(batch_of.tolist(), items["session"].tolist(), strict=True):
        members[k].append(sid)
    return view, members
