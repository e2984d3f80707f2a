"""Where a window goes when several devices serve one roster: the routers' rules.

One copy for BatchScope's worker on several devices (:class:`Router`, which the
mailboxes ask when a session's mailbox opens: :meth:`Mailboxes.route
<batchscope.engine.session.Mailboxes.route>`) and for the simulator (sim/devices.py):

- ``pinned`` (:func:`pin`): a session stays on one device; the sessions, in id order, are
  dealt over the devices (the k-th on device ``k mod N``), so the counts differ by at most
  one, and they are dealt again when sessions join or leave.
- ``least-loaded`` (:func:`least_loaded`): the power of two choices, Ray Serve's rule: two
  devices drawn at random (distinct), the window goes to the one with fewer windows
  waiting; a tie goes to the one free first, then to the lower index. With two devices
  that is always the less loaded of the two. The simulator knows when a batch ends; the
  live worker does not, so there "free first" is idle, else the batch that started first.

A router places a window when its session's mailbox opens (no window of the session
waiting anywhere); a newer window overwrites the waiting one where it waits (latest-only
holds per session), and a placed window is never moved (nor is it in Ray).
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from batchscope.config import ROUTERS
from batchscope.engine.rules import less_loaded, two_choices

#: A device's key after its waiting windows: -1 while idle, else when it is free (the
#: simulator) or when its batch started (live): lower first.
IDLE = -1.0


def pin(sessions: Iterable[int], devices: int) -> dict[int, int]:
    """``pinned``: each session's device, the sessions in id order dealt over ``devices``."""
    return {sid: k % devices for k, sid in enumerate(sorted(sessions))}


def pinned_counts(pins: Iterable[int] | None, devices: int) -> list[int] | None:
    """Sessions pinned to each device, from each session's device (None: not pinned)."""
    if pins is None:
        return None
    counts = Counter(pins)
    return [counts.get(d, 0) for d in range(devices)]


def least_loaded(
    draws: random.Random, devices: int, key: Callable[[int], tuple[int, float]]
) -> int:
    """``least-loaded``: of two devices drawn from ``draws``, the one
    :func:`~batchscope.engine.rules.less_loaded` chooses; ``key(d)`` gives device ``d``'s
    waiting windows and its free key (:data:`IDLE`)."""
    if devices < 2:
        return 0
    if devices == 2:
        a, b = 0, 1
    else:  # two distinct devices, uniform (random.sample's cost was a third of a run's)
        first = draws.random()
        a, b = two_choices(devices, first, draws.random())
    (load_a, free_a), (load_b, free_b) = key(a), key(b)
    return less_loaded(a, b, load_a, load_b, free_a, free_b)


def router_draws(seed: int) -> random.Random:
    """The random draws of ``least-loaded``'s two choices for a run of ``seed``."""
    return random.Random(seed + 104_729)


class Router:
    """The live router of ``devices`` devices (``kind``: one of :data:`ROUTERS`).

    ``free_key(d)``: device ``d``'s key after its waiting windows (:data:`IDLE` when idle).
    The mailboxes call :meth:`place` under their lock; :meth:`repin` (the roster changed)
    may come from another thread.
    """

    def __init__(
        self, kind: str, devices: int, seed: int, free_key: Callable[[int], float]
    ) -> None:
        assert kind in ROUTERS, f"router {kind!r}: the config checks it"
        self.kind = kind
        self.devices = devices
        self._draws = router_draws(seed)
        self._free_key = free_key
        self._pins: dict[int, int] = {}
        self._lock = threading.Lock()

    def repin(self, sessions: Iterable[int]) -> None:
        """The sessions in the run now (``pinned`` deals them again)."""
        pins = pin(sessions, self.devices)
        with self._lock:
            self._pins = pins

    def pins(self) -> dict[int, int]:
        with self._lock:
            return dict(self._pins)

    def place(self, session: int, waiting: Sequence[int]) -> int:
        """The device for ``session``'s window, given each device's windows ``waiting``."""
        if self.kind == "pinned":
            with self._lock:
                return self._pins.get(session, session % self.devices)
        free = self._free_key
        return least_loaded(self._draws, self.devices, lambda d: (waiting[d], free(d)))


def devices_label(names: Sequence[str], router: str) -> str:
    """``3 devices (cpu, cuda:1), router pinned``: how a run on several devices is named
    (each kind of device once, in order), live, simulated and in the app's status line."""
    return f"{len(names)} devices ({', '.join(dict.fromkeys(names))}), router {router}"
