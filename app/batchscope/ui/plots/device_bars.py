"""The Devices view: what each device did when several serve the sessions.

One bar per device, its busy share over the scope (the same figures as the report's
``devices`` list: :func:`~batchscope.engine.stats.device_entries`), and above the bar its
sessions and mean batch (and its name, when the devices differ); the title says the mean
busy share, how many devices of each kind and the router. With one device it says how to
get several (the Devices control), under the one device's bar.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QFont

from batchscope.config import EMULATED
from batchscope.engine.snapshot import Snapshot
from batchscope.ui.plots.distributions import SETTLING, ScopedCard
from batchscope.ui.theme import Look

ONE_DEVICE_TIP = (
    "One device serves the sessions. Set Devices above 1 in the controls (run --devices N) "
    "to serve them on several devices (emulated ones, or instances of the real model), each "
    "with its own worker and policy, the router placing the windows"
)
#: Above this many devices the bars carry no text (the tooltip has every device).
LABELLED_MAX = 8


def mean_batch(entry: dict[str, Any]) -> float:
    """The mean batch size of a ``devices`` entry (0 without batches)."""
    sizes = {int(k): n for k, n in entry["batch_sizes"].items()}
    batches = sum(sizes.values())
    return sum(k * n for k, n in sizes.items()) / batches if batches else 0.0


def fleet(devices: list[dict[str, Any]]) -> str:
    """The devices by kind, in order: ``3 × cpu``, ``2 × laptop-8gb + laptop-8gb@3g``
    (emulated profiles by name alone when every device is one: a title must fit a third of
    a 1280-pixel window; the status line says "emulated")."""
    names = [d["device"] for d in devices]
    emulated = all(name.startswith(EMULATED) for name in names)
    kinds = Counter(name.removeprefix(EMULATED) if emulated else name for name in names)
    return " + ".join(f"{n} × {name}" if n > 1 else name for name, n in kinds.items())


def one_device(snap: Snapshot) -> dict[str, Any]:
    """The one device of a run on one, as a ``devices`` entry: its busy share, sessions
    and batches over the snapshot's scope."""
    return {
        "device": snap.device,
        "sessions": len(snap.sessions),
        "busy": snap.busy,
        "batch_sizes": {str(k): n for k, n in snap.batch_sizes.items()},
    }


def device_line(d: int, entry: dict[str, Any]) -> str:
    """One device in words: busy share, sessions, mean batch."""
    return (
        f"device {d} ({entry['device']}): busy {100 * entry['busy']:.0f}%, "
        f"{entry['sessions']} sessions, mean batch {mean_batch(entry):.2f}"
    )


class DeviceBars(ScopedCard):
    """Busy share of each device over the scope, with its sessions and mean batch."""

    def __init__(self, look: Look) -> None:
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.6)
        self._texts: list[pg.TextItem] = []  # each bar's sessions and mean batch
        super().__init__("Devices", look, "device", "busy (% of wall time)")
        self.plot.addItem(self.bars)
        self.plot.setYRange(0, 100, padding=0.05)

    def restyle(self) -> None:
        super().restyle()
        self.bars.setOpts(brush=pg.mkBrush(self.look.theme.accent), pen=pg.mkPen(None))
        for text in self._texts:
            self._style(text)

    def _style(self, text: pg.TextItem) -> None:
        font = QFont("DejaVu Sans")
        font.setPointSize(self.look.axis_pt)
        text.setFont(font)
        text.setColor(self.look.theme.text)

    def update_from(self, snap: Snapshot) -> None:
        devices = snap.devices
        if not devices:  # one device: its bar from the snapshot's own figures (an empty
            # card read as broken); the title says how to get more
            one = one_device(snap)
            self._show([one])
            state = SETTLING if snap.settling else f"busy {100 * snap.busy:.0f}%"
            self.set_scoped_title(
                f"Devices — {state} · one device · set Devices > 1 for more",
                snap.scope_label,
                keep=2,
            )
            self.title.setToolTip(f"{device_line(0, one)}\n{ONE_DEVICE_TIP}")
            return
        self._show(devices)
        if snap.settling:
            state = SETTLING
        else:
            mean = 100 * sum(d["busy"] for d in devices) / len(devices)
            state = f"busy {mean:.0f}% mean"
        self.set_scoped_title(
            f"Devices — {state} · {fleet(devices)} · router {snap.config.router}",
            snap.scope_label,
            keep=2,  # the router (also in the controls) goes whole on a narrow card
        )
        self.title.setToolTip("\n".join(device_line(d, e) for d, e in enumerate(devices)))

    def _show(self, devices: list[dict[str, Any]]) -> None:
        n = len(devices)
        x = np.arange(n, dtype=float)
        busy = np.array([100.0 * d["busy"] for d in devices], float)
        self.bars.setOpts(x=x, height=busy, width=0.6)
        self.plot.setXRange(-0.6, max(n, 1) - 0.4, padding=0)
        step = max(1, int(np.ceil(n / 16)))
        self.plot.getAxis("bottom").setTicks([[(float(i), str(i)) for i in range(0, n, step)]])
        labelled = devices if n <= LABELLED_MAX else []
        while len(self._texts) < len(labelled):
            text = pg.TextItem(anchor=(0.5, 1.0))
            self._style(text)
            self.plot.addItem(text)
            self._texts.append(text)
        mixed = len({d["device"] for d in devices}) > 1  # each bar then names its device
        # a plot too short for a label above its bar (1280x800 presentation: 85 px for two
        # lines of 20) shows none: the title's tooltip has every device's figures
        lines = 3 if mixed else 2
        height_px = self.plot.getViewBox().height()
        room = height_px >= 2.5 * lines * self.fontMetrics().height()
        for i, text in enumerate(self._texts):
            if i < len(labelled) and room:
                entry = labelled[i]
                name = f"{entry['device'].removeprefix(EMULATED)}\n" if mixed else ""
                text.setText(f"{name}{entry['sessions']} sessions\nbatch {mean_batch(entry):.2f}")
                # above its bar, or as high as the plot leaves it room (its height in %
                # of the 0-100 axis: 2 lines took 54 of 189 px in presentation mode)
                tall = 100.0 * text.boundingRect().height() / max(1.0, height_px)
                text.setPos(float(i), min(busy[i] + 2.0, 98.0 - tall))
                text.show()
            else:
                text.hide()
