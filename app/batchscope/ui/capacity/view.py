"""The Capacity tab: how many sessions fit the budget, per policy, with the live run on it.

A dumb view of :class:`~batchscope.ui.capacity.presenter.CapacityPresenter`: the
budget fields, a progress bar while the planner's thread works, the two panels of
``plan --plot`` (slowest session's fps and p99 against sessions; same colours, the
budget dashed, each policy's maximum ringed, p99 clipped at 3× the budget) drawn
with pyqtgraph so the live operating point moves on them, the result table, and
the buttons. It plans only while shown (the search takes a CPU core for seconds).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QFont, QFontDatabase, QHideEvent, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from batchscope.config import KNOBS, POLICIES, format_resolution
from batchscope.engine.serving.engines import ENGINE_LABELS, engine_availability
from batchscope.engine.snapshot import Snapshot
from batchscope.profiles.profile import MIG_SLICES
from batchscope.render.plan_plot import P99_CLIP, POLICY_COLOURS
from batchscope.sim.planner import VERIFY_S, Series
from batchscope.sim.planner.devices import DEVICES_MAX
from batchscope.ui.capacity.presenter import (
    CapacityPresenter,
    OperatingPoint,
    PlanResult,
    operating_point,
    setting_changes,
)
from batchscope.ui.plain_text import ElidedLabel, add_item, plain_label
from batchscope.ui.plots import PlotCard, pen
from batchscope.ui.theme import Look

COLUMNS = ("setting", "max sessions", "slowest fps", "p99 at max (ms)")
POINT_HZ = 2.0  # how often the live point re-reads a segment snapshot off another scope
#: While shown, the tab takes this share of each splitter it sits in (a plot, a table
#: and a budget do not read in a third of the bottom row); the old sizes come back on hide.
SHARE = {Qt.Orientation.Horizontal: 0.62, Qt.Orientation.Vertical: 0.6}


class CapacityPlot(PlotCard):
    """One panel: per policy a line over sessions, the budget, the maxima, the live point."""

    def __init__(self, title: str, y_label: str, look: Look) -> None:
        self._name = title
        super().__init__(title, look, "sessions", y_label)
        self.curves = {p: pg.PlotDataItem() for p in POLICIES}
        for curve in self.curves.values():
            self.plot.addItem(curve)
        self.rings = pg.ScatterPlotItem(pxMode=True)
        self.plot.addItem(self.rings)
        self.budget = pg.InfiniteLine(angle=0, movable=False)
        self.plot.addItem(self.budget, ignoreBounds=True)
        self.live = pg.ScatterPlotItem(pxMode=True)
        self.plot.addItem(self.live)
        self.n_max = 1
        self.y_top = 1.0
        self.planned = False  # a plan's lines are drawn (else the axes fit the live point)
        self.restyle()

    def show_series(
        self, series: Sequence[Series], values: Sequence[Sequence[float]], budget: float, top: float
    ) -> None:
        """Each policy's line (values above ``top`` drawn on it), the budget, the maxima."""
        self.y_top = top
        k = len(series)
        rings = []
        for j, (s, ys) in enumerate(zip(series, values, strict=True)):
            dx = (j - (k - 1) / 2) * 0.06  # sideways, so equal values stay visible
            x = np.asarray(s.sessions, float) + dx
            y = np.minimum(np.asarray(ys, float), top)
            self.curves[s.policy].setData(x, y)
            if s.max_sessions and s.max_sessions in s.sessions:
                i = s.sessions.index(s.max_sessions)
                rings.append(
                    {"pos": (x[i], y[i]), "pen": pg.mkPen(POLICY_COLOURS[s.policy], width=3)}
                )
        shown = {s.policy for s in series}
        for policy, curve in self.curves.items():
            curve.setVisible(policy in shown)
        self.rings.setData(rings, symbol="o", size=26, brush=None)
        self.budget.setPos(budget)
        self.budget.show()
        self.planned = True
        self.n_max = max((max(s.sessions) for s in series), default=1)
        self.plot.setXRange(0.5, self.n_max + 0.5, padding=0)
        self.plot.setYRange(0, top, padding=0.02)

    def set_budget_text(self, text: str) -> None:
        """The budget, in the title (a label on the dashed line would cover the curves)."""
        self.set_title(f"{self._name} — budget {text}")

    def clear_series(self) -> None:
        for curve in self.curves.values():
            curve.setData([], [])
        self.rings.setData([])
        self.budget.hide()
        self.planned = False

    def show_point(self, sessions: int | None, value: float | None) -> None:
        """The live run at (sessions, value), or nothing; a value past the top sits on it."""
        if sessions is None or value is None or not np.isfinite(value):
            self.live.setData([])
            return
        if not self.planned:  # no plan drawn yet: the axes fit the live point, not y = 1
            self.plot.setXRange(sessions - 1, sessions + 1, padding=0)
            self.plot.setYRange(0, value * 1.25 if value > 0 else 1.0, padding=0)
            self.live.setData([{"pos": (sessions, value)}])
            return
        self.live.setData([{"pos": (sessions, min(value, self.y_top))}])

    def restyle(self) -> None:
        if not hasattr(self, "curves"):
            return  # PlotCard's constructor styles before the items exist
        look, t = self.look, self.look.theme
        width = look.line_width
        for policy, curve in self.curves.items():
            colour = POLICY_COLOURS[policy]
            curve.setPen(pg.mkPen(colour, width=width))
            curve.setSymbol("o")
            curve.setSymbolSize(5 + width)
            curve.setSymbolPen(pg.mkPen(colour))
            curve.setSymbolBrush(pg.mkBrush(colour))
        self.budget.setPen(pen(t.text, max(1.5, width * 0.8), dashed=True))
        self.live.setSymbol("star")
        self.live.setSize(22 + 4 * width)
        self.live.setPen(pg.mkPen(t.plot, width=2))
        self.live.setBrush(pg.mkBrush(t.text))


class CapacityView(QWidget):
    """The tab. ``update_from(snap)`` from the UI timer while shown (plans, moves the point)."""

    def __init__(self, presenter: CapacityPresenter, look: Look) -> None:
        super().__init__()
        self.presenter = presenter
        self.look = look
        self._point_at = 0.0
        self._point: OperatingPoint | None = None
        self._given_back: list[tuple[QSplitter, list[int]]] = []

        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 6)
        lay.setSpacing(4)
        self.title = plain_label("Capacity: how many sessions fit the budget?")  # a profile name
        self.title.setObjectName("cardTitle")
        lay.addWidget(self.title)

        self._add_budget_row(lay)
        self._add_devices_row(lay)
        self._add_status_lines(lay)
        self._add_plots_and_table(lay)
        self._add_actions(lay)

        presenter.computing.connect(self._on_computing)
        presenter.planned.connect(self._on_planned)
        presenter.note.connect(self._on_note)
        presenter.verifying.connect(self._on_verifying)
        presenter.verified.connect(self._on_verified)

    def _add_budget_row(self, lay: QVBoxLayout) -> None:
        """The budget: the p99 (ms) and the share of the frame rate every session gets."""
        budget = QHBoxLayout()
        self.p99 = QLineEdit(f"{self.presenter.p99_ms:g}")
        self.ratio = QLineEdit(f"{self.presenter.min_fps_ratio:g}")
        for field, tip in (
            (self.p99, "p99 end-to-end latency budget (ms), over every phase seed"),
            (self.ratio, "share of the frame rate every session must get, in (0, 1]"),
        ):
            field.setToolTip(tip)
            field.setMaximumWidth(90)
            field.editingFinished.connect(self._budget_edited)
        budget.addWidget(QLabel("p99 ≤"))
        budget.addWidget(self.p99)
        budget.addWidget(QLabel("ms   every session ≥"))
        budget.addWidget(self.ratio)
        self.fps_text = QLabel("× fps")
        budget.addWidget(self.fps_text)
        budget.addStretch(1)
        lay.addLayout(budget)

    def _add_devices_row(self, lay: QVBoxLayout) -> None:
        """Answers for several devices: how many, a MIG slice, the fewest for S sessions."""
        fleet = QHBoxLayout()
        self.devices = QSpinBox()
        self.devices.setRange(1, DEVICES_MAX)
        self.devices.setToolTip(
            "Also answer for this many devices of the profile: the most sessions they "
            "carry, and the router (pinned or least-loaded) that does it"
        )
        self.carry = QSpinBox()
        self.carry.setRange(0, int(KNOBS["sessions"].hi))
        self.carry.setSpecialValueText("off")
        self.carry.setToolTip(
            "Also answer the fewest devices of the profile that carry this many sessions "
            "within the budget, for every phase seed (off: not asked)"
        )
        for box in (self.devices, self.carry):
            box.setKeyboardTracking(False)  # plan once the number is typed, not per digit
            box.valueChanged.connect(self._devices_edited)
        self.slice = QComboBox()
        self.slice.setObjectName("capacitySlice")
        self.slice.addItem("whole GPU", 0)
        for k in MIG_SLICES:
            self.slice.addItem(f"MIG {k}g", k)
        self.slice.setToolTip(
            "Plan each device as a MIG slice of the profile's GPU (of 7 compute slices): "
            "emulated, not measured — a batch of n on a Kg slice takes what the whole GPU "
            "takes for n × 7/K windows (the per-batch cost kept, no interference). Compare "
            "7 × MIG 1g with 1 × whole GPU"
        )
        self.slice.currentIndexChanged.connect(self._devices_edited)
        fleet.addWidget(QLabel("Devices"))
        fleet.addWidget(self.devices)
        fleet.addWidget(self.slice)
        fleet.addWidget(QLabel("   fewest devices for"))
        fleet.addWidget(self.carry)
        fleet.addWidget(QLabel("sessions"))
        fleet.addStretch(1)
        lay.addLayout(fleet)

    def _add_status_lines(self, lay: QVBoxLayout) -> None:
        """What was typed wrong, the live run's point, the search's progress and notes."""
        self.budget_error = plain_label()  # quotes what was typed
        self.budget_error.setObjectName("controlError")
        self.budget_error.setWordWrap(True)
        self.budget_error.hide()
        lay.addWidget(self.budget_error)

        self.live_text = ElidedLabel(
            "★ now: –", tip="The live run's current segment: the star on both plots"
        )
        self.live_text.setObjectName("cardTitle")
        lay.addWidget(self.live_text)

        self.progress = QProgressBar()
        self.progress.setTextVisible(True)
        self.progress.hide()
        lay.addWidget(self.progress)
        self.note = plain_label()  # errors: drawn as they are
        self.note.setWordWrap(True)
        self.note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.note.hide()
        lay.addWidget(self.note)

    def _add_plots_and_table(self, lay: QVBoxLayout) -> None:
        """The two plots, the policies' table and the answers on several devices."""
        plots = QHBoxLayout()
        self.fps_plot = CapacityPlot("slowest session", "fps", self.look)
        self.p99_plot = CapacityPlot("p99 latency", "ms", self.look)
        plots.addWidget(self.fps_plot)
        plots.addWidget(self.p99_plot)
        lay.addLayout(plots, 3)

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for c in range(1, len(COLUMNS)):
            header.setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        lay.addWidget(self.table, 2)

        self.devices_text = plain_label()  # the answers on several devices
        self.devices_text.setObjectName("cardTitle")
        self.devices_text.setWordWrap(True)
        self.devices_text.hide()
        lay.addWidget(self.devices_text)

    def _add_actions(self, lay: QVBoxLayout) -> None:
        """The verdict, Apply and Export, and Verify on an engine with its table."""
        buttons = QHBoxLayout()
        self.verdict = QLabel()
        self.verdict.setWordWrap(True)
        buttons.addWidget(self.verdict, 1)
        self.apply_button = QPushButton("Apply recommended")
        self.apply_button.setToolTip("Put the live run on the recommendation: one change")
        self.apply_button.clicked.connect(self.presenter.apply_recommended)
        self.export_button = QPushButton("Export recommended…")
        self.export_button.setToolTip("Write its policy.json and Triton config.pbtxt to a folder")
        self.export_button.clicked.connect(self.choose_export_recommended)
        for b in (self.apply_button, self.export_button):
            b.setEnabled(False)
            buttons.addWidget(b)
        lay.addLayout(buttons)

        # verify on an engine: the recommendation served live beside its plan
        verify_row = QHBoxLayout()
        verify_row.addWidget(QLabel("Verify on"))
        self.verify_engine = QComboBox()
        for on, why in engine_availability().items():
            add_item(self.verify_engine, ENGINE_LABELS[on], on, why)
        verify_row.addWidget(self.verify_engine)
        self.verify_button = QPushButton("Verify")
        self.verify_button.setToolTip(
            "Serve the recommendation live on this engine (the emulated curve, "
            f"{VERIFY_S:g} s, the live run paused meanwhile) and show planned vs served"
        )
        self.verify_button.setEnabled(False)
        self.verify_button.clicked.connect(
            lambda: self.presenter.verify_on(self.verify_engine.currentData())
        )
        verify_row.addWidget(self.verify_button)
        verify_row.addStretch(1)
        lay.addLayout(verify_row)
        self.verify_text = plain_label()  # an error may quote a path
        self.verify_text.setObjectName("verifyTable")
        self.verify_text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.verify_text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.verify_text.setWordWrap(True)
        self.verify_text.hide()
        lay.addWidget(self.verify_text)

    # -- from the window ---------------------------------------------------------------------

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self._claim_space()
        self.presenter.refresh()

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        for splitter, sizes in self._given_back:
            splitter.setSizes(sizes)
        self._given_back = []

    def _claim_space(self) -> None:
        """Take ``SHARE`` of every splitter above this tab (the sizes before are kept)."""
        if self._given_back:
            return
        child: QWidget = self
        parent = child.parentWidget()
        while parent is not None and parent is not self.window():
            if isinstance(parent, QSplitter):
                index, sizes = parent.indexOf(child), parent.sizes()
                total, share = sum(sizes), SHARE[parent.orientation()]
                if index >= 0 and total and sizes[index] < share * total:
                    rest = (1 - share) * total / max(1, len(sizes) - 1)
                    new = [round(share * total if i == index else rest) for i in range(len(sizes))]
                    self._given_back.append((parent, sizes))
                    parent.setSizes(new)
            child, parent = parent, parent.parentWidget()

    def update_from(self, snap: Snapshot) -> None:
        """Plan for the running config if it changed; draw the current segment's point."""
        self.presenter.refresh(snap.config)
        now = time.monotonic()
        if snap.scope == "segment":
            self._point = operating_point(snap)
        elif now - self._point_at >= 1 / POINT_HZ:  # the views follow another scope
            self._point_at = now
            self._point = operating_point(self.presenter.dashboard.engine.snapshot("segment"))
        p = self._point
        self.fps_plot.show_point(p and p.sessions, p and p.min_fps)
        self.p99_plot.show_point(p and p.sessions, p and p.p99_ms)
        text = (
            f"★ now ({p.label}): {p.sessions} sessions · slowest {p.min_fps:.1f} fps · "
            f"p99 {p.p99_ms:.0f} ms"
            if p
            else "★ now: settling…"
        )
        if self.live_text.text() != text:
            self.live_text.setText(text)

    def choose_export_folder(self) -> None:
        """File → Export setting…: the setting in force, into a chosen folder."""
        folder = QFileDialog.getExistingDirectory(
            self, "Export setting into folder", str(Path.home())
        )
        if folder:
            self.presenter.export_current(folder)

    def choose_export_recommended(self) -> None:
        folder = QFileDialog.getExistingDirectory(
            self, "Export the recommended setting into folder", str(Path.home())
        )
        if folder:
            self.presenter.export_recommended(folder)

    def choose_setting_file(self) -> None:
        """File → Open settings…: a policy.json, applied live."""
        path, _ = QFileDialog.getOpenFileName(
            self, "Open settings", str(Path.home()), "Settings (*.json);;All files (*)"
        )
        if path:
            self.presenter.open_setting(path)

    # -- from the presenter --------------------------------------------------------------------

    def _on_verifying(self, what: str) -> None:
        if what:
            self.verify_text.setText(what)
            self.verify_text.show()
        self.verify_button.setEnabled(not what and self.apply_button.isEnabled())

    def _on_verified(self, text: str, ok: bool) -> None:
        self.verify_text.setText(text)
        self.verify_text.setProperty("error", not ok)
        self.verify_text.show()

    def _budget_edited(self) -> None:
        error = self.presenter.set_budget(self.p99.text(), self.ratio.text())
        self.budget_error.setText(f"Budget not changed: {error}" if error else "")
        self.budget_error.setVisible(bool(error))

    def _devices_edited(self) -> None:
        self.presenter.set_devices(
            self.devices.value(), self.carry.value(), int(self.slice.currentData())
        )

    def _show_devices(self, result: PlanResult) -> None:
        """The answers on several devices (asked in the row above), or why there are none."""
        inputs = result.inputs
        if inputs.devices <= 1 and inputs.carry <= 0:
            self.devices_text.hide()
            return
        lines = []
        if result.partial:
            lines.append("Several devices: working it out after the one-device answer…")
        elif result.devices_error:
            lines.append(f"Several devices: {result.devices_error}")
        else:
            each = f"{result.profile}@{inputs.mig}g" if inputs.mig else result.profile
            if result.across is not None:
                a = result.across
                lines.append(
                    f"{a.devices} × {each} carry {a.sessions} sessions, router "
                    f"{a.router} (one carries {a.per_device}): slowest "
                    f"{a.min_fps_worst:.1f} fps, p99 {a.p99_worst:.0f} ms"
                )
            if inputs.carry > 0:
                f = result.fewest
                lines.append(
                    f"{inputs.carry} sessions need {f.devices} × {each}, router "
                    f"{f.router}: slowest {f.min_fps_worst:.1f} fps, p99 {f.p99_worst:.0f} ms"
                    if f is not None
                    else f"No count of devices up to {DEVICES_MAX} carries {inputs.carry} "
                    "sessions within the budget"
                )
        if inputs.mig and not result.partial:  # what the slices rest on, every time
            lines.append(
                f"(MIG {inputs.mig}g: emulated, the whole GPU's curve scaled, not measured; "
                "the table above is the whole GPU)"
            )
        self.devices_text.setText("\n".join(lines))
        self.devices_text.show()

    def _on_computing(self, done: int, total: int, what: str) -> None:
        self.progress.setRange(0, total)
        self.progress.setValue(done)
        answered = self._show_progress(what)
        if answered:
            return  # the answer is shown (and can be applied): its curves are on their way
        for b in (self.apply_button, self.export_button, self.verify_button):
            b.setEnabled(False)
        inputs = self.presenter.inputs
        if inputs is not None:
            self._show_inputs(inputs.profile or "this device's sweep profile")

    def _show_progress(self, what: str) -> bool:
        """The bar's text; whether the answer is already shown (its curves on their way)."""
        result = self.presenter.result
        answered = result is not None and result.partial
        doing = "answered · drawing the curves…" if answered else "planning…"
        # the plan takes a CPU core: the live figures of this segment are disturbed meanwhile
        text = " ".join(part for part in (doing, what) if part)
        self.progress.setFormat(f"{text} (%v/%m) · shares the CPU with the run")
        self.progress.show()
        return answered

    def _on_note(self, text: str) -> None:
        self.note.setText(text)
        self.note.setVisible(bool(text))
        if text:
            self.progress.hide()
            self._clear()

    def _show_inputs(self, profile: str) -> None:
        inputs = self.presenter.inputs
        b, s = inputs.budget, inputs.search
        self.title.setText(
            f"Capacity: {profile} · {inputs.precision} "
            f"{format_resolution(inputs.resolution)} · {b.fps:g} fps"
        )
        self.title.setToolTip(
            f"simulated: worst of {s.seeds} phase seeds × {s.duration_s:g} s per setting"
        )
        self.fps_text.setText(f"× {b.fps:g} fps = {b.min_fps:g} fps")
        self.fps_plot.set_budget_text(f"≥ {b.min_fps:g} fps")
        self.p99_plot.set_budget_text(f"≤ {b.p99_ms:g} ms")

    def _clear(self) -> None:
        self.devices_text.hide()
        self.table.setRowCount(0)
        self.fps_plot.clear_series()
        self.p99_plot.clear_series()
        self.verdict.setText("")

    def _on_planned(self, result: PlanResult) -> None:
        """A plan: first its answer alone (``partial``: the table, the verdict, the buttons;
        the progress bar stays for the curves), then again with its curves."""
        if not result.partial:
            self.progress.hide()
        if result.error or result.plan is None:
            self._on_note(result.error or "no plan")
            return
        self.note.hide()
        plan = result.plan
        self._show_inputs(result.profile)
        self._show_devices(result)
        b = plan.budget
        if result.partial:
            self.fps_plot.clear_series()
            self.p99_plot.clear_series()
            self._show_progress("")
        else:
            self.fps_plot.show_series(
                result.series, [s.min_fps for s in result.series], b.min_fps, b.fps * 1.1
            )
            top = b.p99_ms * P99_CLIP
            self.p99_plot.show_series(
                result.series, [s.p99_ms for s in result.series], b.p99_ms, top
            )
        self._fill_table(result)
        rec = plan.recommended
        fits = bool(rec.max_sessions)
        if fits:
            config = self.presenter.config.with_changes(
                **setting_changes(plan, rec, self.presenter.config)
            )
            self.verdict.setText(
                f"Recommended: {config.policy_label()} for {rec.max_sessions} sessions"
            )
        else:
            self.verdict.setText("Nothing meets this budget: the table shows the closest points")
        for button in (self.apply_button, self.export_button):
            button.setEnabled(fits)
        self.verify_button.setEnabled(fits and not self.presenter.verifying_now)

    def _fill_table(self, result: PlanResult) -> None:
        plan = result.plan
        base = self.presenter.config
        self.table.setRowCount(len(plan.policies))
        bold = QFont()
        bold.setBold(True)
        for row, p in enumerate(plan.policies):
            config = base.with_changes(**setting_changes(plan, p, base))
            recommended = p is plan.recommended
            a = p.at_max
            cells = (
                ("★ " if recommended else "") + config.policy_label(),
                str(p.max_sessions) if p.max_sessions else "0 (closest: 1)",
                f"{a.min_fps_worst:.1f}",
                f"{a.p99_worst:.1f}",
            )
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if col:
                    item.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )
                else:
                    item.setForeground(QBrush(POLICY_COLOURS[p.policy]))
                if recommended:
                    item.setFont(bold)
                self.table.setItem(row, col, item)
        self.table.resizeRowsToContents()
        # every policy in view: the table never scrolls, the plots take what is left
        rows = sum(self.table.rowHeight(r) for r in range(self.table.rowCount()))
        frame = 2 * self.table.frameWidth()
        self.table.setFixedHeight(self.table.horizontalHeader().height() + rows + frame)
