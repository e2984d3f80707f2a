"""The video wall: each session's latest processed frame, its fps and its detection.

One widget paints every tile (up to 16; with more sessions, the slowest first),
so a tick costs one paint event rather than sixteen. Frames are shrunk to the
tile size with OpenCV before they become QImages, so painting never rescales
full frames (bilinear: 0.06 ms a tile, where area averaging costs 0.6 ms).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QImage, QPainter, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from batchscope.engine.snapshot import SINGLED_OUT, Snapshot, slowest_sessions
from batchscope.engine.sources import Placement
from batchscope.render.palette import session_colour
from batchscope.ui.plain_text import plain_tip
from batchscope.ui.theme import Look

MAX_TILES = SINGLED_OUT  # past it, the slowest (engine/snapshot.py)
TRUTH_COLOUR = "#39FF14"  # the ground-truth marker (dashed diamond): a neon green, brighter
# than any session colour
GAP = 6
FOOTER_MIN_PT = 6.5  # the smallest footer type, pt: below it the footer is cut instead


@dataclass
class _Tile:
    sid: int
    seq: int = -1
    pixels: np.ndarray | None = None  # kept alive: the QImage points into it
    image: QImage | None = None
    frame_size: tuple[int, int] = (16, 9)  # (w, h) of the shown frame: the source's content
    detection: object | None = None
    truth: object | None = None  # BallTruth of the shown frame, when the source has one
    accuracy: dict | None = None
    to_frame: tuple[float, float] = (1.0, 1.0)  # source pixels -> frame pixels
    fps: float = 0.0
    state: str = "running"
    error: str | None = None


def grid_shape(n: int, width: float, height: float, aspect: float) -> tuple[int, int]:
    """(columns, rows) that make ``n`` tiles of ``aspect`` (w/h) as large as possible."""
    best, best_w = (1, max(1, n)), 0.0
    for cols in range(1, max(1, n) + 1):
        rows = math.ceil(n / cols)
        tile_w = min((width - GAP * (cols - 1)) / cols, (height - GAP * (rows - 1)) / rows * aspect)
        if tile_w > best_w:
            best, best_w = (cols, rows), tile_w
    return best


class VideoWall(QWidget):
    def __init__(self, look: Look, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._look = look
        self._tiles: list[_Tile] = []
        self._message = ""  # shown on every tile when detections are not drawn
        self._total = 0
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setMinimumSize(240, 140)

    def set_look(self, look: Look) -> None:
        self._look = look
        self.update()

    def update_from(self, snap: Snapshot, placements: dict[str, Placement]) -> None:
        """Show ``snap``'s sessions; ``placements`` (by source name): where each source's
        content lies in its model frames, so a tile shows the content at its true aspect
        (no letterbox bars) and maps source pixels onto it."""
        sessions = slowest_sessions(snap.sessions, MAX_TILES)
        self._total = len(snap.sessions)
        message = "" if snap.draws_detections else snap.weights
        if message != self._message:
            self._message = message
            self.setToolTip(plain_tip(message))  # the footer may be cut on small tiles: whole here
        by_id = {t.sid: t for t in self._tiles}
        self._tiles = [by_id.get(s.id) or _Tile(s.id) for s in sessions]
        rects = self._rects(len(sessions))
        for tile, view, rect in zip(self._tiles, sessions, rects, strict=True):
            tile.fps, tile.state, tile.error = view.fps, view.state, view.error
            tile.accuracy = view.accuracy
            latest = view.latest
            if latest is None or (latest.seq == tile.seq and tile.image is not None):
                continue
            frame = latest.frame
            where = placements.get(view.source)
            if where is not None and where.size != (frame.shape[1], frame.shape[0]):
                (x, y), (cw, ch) = where.offset, where.size
                frame = frame[y : y + ch, x : x + cw]
            h, w = frame.shape[:2]
            tile.seq, tile.frame_size = latest.seq, (w, h)
            sx, sy = where.scale if where is not None else (1.0, 1.0)
            tile.to_frame = (1 / sx, 1 / sy)
            tile.detection = latest.detection if snap.draws_detections else None
            tile.truth = view.truth
            target = _fit(rect, w / h)
            tw, th = max(1, int(target.width())), max(1, int(target.height()))
            small = np.ascontiguousarray(
                cv2.resize(frame, (tw, th), interpolation=cv2.INTER_LINEAR)
                if (tw, th) != (w, h)
                else frame
            )
            tile.pixels = small
            tile.image = QImage(small.data, tw, th, 3 * tw, QImage.Format.Format_RGB888)
        self.update()

    # -- painting --------------------------------------------------------------------------

    def _aspect(self) -> float:
        for t in self._tiles:
            if t.image is not None:
                return t.frame_size[0] / t.frame_size[1]
        return 16 / 9

    def _note_height(self) -> int:
        """The strip under the tiles that says only some sessions have one (0: all do)."""
        return self.fontMetrics().height() + 2 if self._total > len(self._tiles) else 0

    def _rects(self, n: int) -> list[QRectF]:
        if n == 0:
            return []
        w, h = self.width(), self.height() - self._note_height()
        cols, rows = grid_shape(n, w, h, self._aspect())
        cw = (w - GAP * (cols - 1)) / cols
        ch = (h - GAP * (rows - 1)) / rows
        return [QRectF((i % cols) * (cw + GAP), (i // cols) * (ch + GAP), cw, ch) for i in range(n)]

    def paintEvent(self, event: object) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        t = self._look.theme
        if not self._tiles:
            p.setPen(QColor(t.muted))
            p.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "Starting the sessions…")
            return
        for tile, rect in zip(self._tiles, self._rects(len(self._tiles)), strict=True):
            self._paint_tile(p, tile, rect)
        if self._total > len(self._tiles):  # in its own strip, under the tiles
            p.setPen(QColor(t.muted))
            p.drawText(
                self.rect().adjusted(0, 0, -6, 0),
                Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignBottom,
                f"showing the {len(self._tiles)} slowest of {self._total} sessions",
            )

    def _paint_tile(self, p: QPainter, tile: _Tile, rect: QRectF) -> None:
        look, t = self._look, self._look.theme
        colour = QColor(session_colour(tile.sid))
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QColor("#000000"))
        p.drawRoundedRect(rect, 4, 4)
        target = _fit(rect, tile.frame_size[0] / tile.frame_size[1])
        if tile.image is not None:
            p.drawImage(target, tile.image)
        if tile.state == "running":
            if tile.truth is not None and tile.truth.visible:
                self._paint_truth(p, tile, target)
            if tile.detection is not None:
                self._paint_detection(p, tile, target, colour)
        font = QFont(p.font())
        font.setBold(True)
        label, size = badge_label(tile.sid, tile.fps, font, rect)
        font.setPointSizeF(size)
        p.setFont(font)
        fm = p.fontMetrics()
        pill = QRectF(rect.left() + 5, rect.top() + 5, _pill_width(fm, label), fm.height() + 6)
        p.setPen(Qt.PenStyle.NoPen)  # the overlays above left their pens set
        p.setBrush(QColor(0, 0, 0, 170))
        p.drawRoundedRect(pill, 4, 4)
        p.setBrush(colour)
        d = fm.height() * 0.6
        p.drawEllipse(QRectF(pill.left() + 6, pill.center().y() - d / 2, d, d))
        p.setPen(QColor("#FFFFFF"))
        p.drawText(pill.adjusted(12 + d, 0, 0, 0), Qt.AlignmentFlag.AlignVCenter, label)
        p.setPen(QPen(colour, 3 if look.presentation else 2))
        p.setBrush(Qt.BrushStyle.NoBrush)
        p.drawRoundedRect(rect.adjusted(1, 1, -1, -1), 4, 4)
        font.setBold(False)
        font.setPointSizeF(min(max(6.5, rect.height() / 16), 13.0))
        p.setFont(font)
        inner = rect.adjusted(8, 0, -8, -5)
        if tile.state == "error":
            _plated_text(p, rect.adjusted(10, 30, -10, -10), f"error: {tile.error}", t.error)
        elif tile.state != "running":
            _plated_text(p, rect.adjusted(10, 30, -10, -10), tile.state, STATE_TEXT)
        else:
            # bottom line: why there are no detections; above it, the tile's accuracy
            bottom = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignBottom
            line = inner
            if self._message:
                p.setPen(QColor(255, 255, 255, 170))
                p.drawText(line, bottom, footer_text(p, self._message, line.width()))
                line = line.adjusted(0, 0, 0, -p.fontMetrics().height())
            scores = accuracy_text(tile.accuracy)
            if scores:
                p.setPen(QColor(TRUTH_COLOUR))
                p.drawText(line, bottom, footer_text(p, scores, line.width()))

    def _paint_truth(self, p: QPainter, tile: _Tile, target: QRectF) -> None:
        """Where the ball truly is: a diamond and its streak (dashed), in the truth colour."""
        truth = tile.truth
        centre, (dx, dy) = _streak(tile, target, truth.x, truth.y, truth.length, truth.theta)
        width = 2.5 if self._look.presentation else 1.5
        pen = QPen(QColor(TRUTH_COLOUR), width, Qt.PenStyle.DashLine, Qt.PenCapStyle.RoundCap)
        p.setPen(pen)
        p.setBrush(Qt.BrushStyle.NoBrush)
        p.drawLine(centre - QPointF(dx, dy), centre + QPointF(dx, dy))
        r = max(4.0, target.width() * 0.016)
        p.setPen(QPen(QColor(TRUTH_COLOUR), width))
        p.drawPolygon(
            [
                centre + QPointF(0, -r),
                centre + QPointF(r, 0),
                centre + QPointF(0, r),
                centre + QPointF(-r, 0),
            ]
        )

    def _paint_detection(self, p: QPainter, tile: _Tile, target: QRectF, colour: QColor) -> None:
        det = tile.detection
        centre, (dx, dy) = _streak(tile, target, det.x, det.y, det.blur_length, det.blur_angle)
        width = 4 if self._look.presentation else 3
        p.setPen(QPen(QColor("#FFFFFF"), width, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap))
        p.drawLine(centre - QPointF(dx, dy), centre + QPointF(dx, dy))
        r = max(6.0, target.width() * 0.025)
        p.setPen(QPen(colour, width))
        p.setBrush(Qt.BrushStyle.NoBrush)
        p.drawEllipse(centre, r, r)
        p.setPen(QColor("#FFFFFF"))
        p.drawText(
            centre + QPointF(r + 4, -r),
            f"{det.blur_length:.0f} px · {det.blur_angle:.0f}°",
        )


#: A tile's state ("reconnecting (2)", "stalled") on its plate: the last frame stays under
#: it, and a stream's last frame is often colour bars (light grey text there was unreadable)
STATE_TEXT = "#EEEEEE"
PLATE = QColor(0, 0, 0, 200)  # the dark plate under a tile's state or error
PLATE_PAD = (10.0, 4.0)  # its margin around the text (px)


def _plated_text(p: QPainter, rect: QRectF, text: str, colour: str) -> None:
    """``text`` centred (wrapped) in ``rect``, on a dark plate as large as the text."""
    flags = Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap
    bound = p.boundingRect(rect, flags, text)
    dx, dy = PLATE_PAD
    plate = bound.adjusted(-dx, -dy, dx, dy).intersected(rect.adjusted(-6, -6, 6, 6))
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(PLATE)
    p.drawRoundedRect(plate, 4, 4)
    p.setPen(QColor(colour))
    p.drawText(rect, flags, text)


def _streak(
    tile: _Tile, target: QRectF, x: float, y: float, half_length: float, angle_deg: float
) -> tuple[QPointF, tuple[float, float]]:
    """A source-pixel position and half streak as the tile's centre point and half vector."""
    kx = tile.to_frame[0] * target.width() / tile.frame_size[0]
    ky = tile.to_frame[1] * target.height() / tile.frame_size[1]
    centre = QPointF(target.left() + x * kx, target.top() + y * ky)
    dx = math.cos(math.radians(angle_deg)) * half_length * kx
    dy = math.sin(math.radians(angle_deg)) * half_length * ky
    return centre, (dx, dy)


BADGE_MIN_PT = 6.5


def _pill_width(fm: QFontMetrics, label: str) -> float:
    """The badge's width: its colour dot, the label, and their margins."""
    return fm.horizontalAdvance(label) + fm.height() * 0.6 + 24


def badge_label(sid: int, fps: float, font: QFont, rect: QRectF) -> tuple[str, float]:
    """A tile's badge, "S11  7.0 fps", and its point size: as large as the tile's height
    suggests, made smaller to fit the tile's width, then without "fps" (at 64 sessions on
    a 1280x800 screen the badge ran past the tile: "7.0 fp")."""
    probe = QFont(font)
    room = rect.width() - 10
    size = min(max(7.0, rect.height() / 11), 20.0)
    for label in (f"S{sid}  {fps:4.1f} fps", f"S{sid} {fps:.1f}"):
        size_now = size
        while True:
            probe.setPointSizeF(size_now)
            if _pill_width(QFontMetrics(probe), label) <= room or size_now <= BADGE_MIN_PT:
                break
            size_now = max(BADGE_MIN_PT, size_now - 0.5)
        if _pill_width(QFontMetrics(probe), label) <= room:
            return label, size_now
    return label, BADGE_MIN_PT


def accuracy_text(accuracy: dict | None) -> str:
    """A tile's accuracy line over the scope (``""``: none): the hit rate (ball in view),
    the false detections (no ball in view), error and freshness."""
    if not accuracy:
        return ""
    parts = []
    if accuracy["hit_rate"] is not None:
        parts.append(f"hit {accuracy['hit_rate']:.0%}")
    if accuracy.get("false_detection_rate") is not None:
        parts.append(f"false {accuracy['false_detection_rate']:.0%}")
    if accuracy["median_error_px"] is not None:
        parts.append(f"err {accuracy['median_error_px']:.1f} px")
    if accuracy["median_freshness_px"] is not None:
        parts.append(f"fresh {accuracy['median_freshness_px']:.1f} px")
    return " · ".join(parts)


def footer_text(p: QPainter, text: str, width: float) -> str:
    """``text`` in the painter's font, made smaller (to ``FOOTER_MIN_PT``) to fit ``width`` px;
    cut with "…" only where even that does not fit."""

    def fitted() -> str:
        return p.fontMetrics().elidedText(text, Qt.TextElideMode.ElideRight, int(width))

    font = QFont(p.font())
    size = font.pointSizeF()
    need = p.fontMetrics().horizontalAdvance(text)
    if need > width and size > FOOTER_MIN_PT:
        size = max(FOOTER_MIN_PT, size * width / need)
        font.setPointSizeF(size)
        p.setFont(font)
        while fitted() != text and size > FOOTER_MIN_PT:
            size = max(FOOTER_MIN_PT, size - 0.25)  # metrics are not quite proportional
            font.setPointSizeF(size)
            p.setFont(font)
    return fitted()


def _fit(rect: QRectF, aspect: float) -> QRectF:
    """The largest rectangle of ``aspect`` centred in ``rect``."""
    w = min(rect.width(), rect.height() * aspect)
    h = w / aspect
    return QRectF(rect.center().x() - w / 2, rect.center().y() - h / 2, w, h)
