"""A procedural table-tennis scene: a video source that needs no files and knows its ground truth.

BatchScope needs a source that always exists (for demos, tests and headless runs) and whose
ball positions are known exactly, so detections can be scored. The scene is a side view of a
table: rallies fly left <-> right in parabolic arcs, bounce on the table, and pause between
points, when the ball is out of view. The ball is rendered with motion blur over an exposure,
and its truth follows the BlurBall label convention (centre, half streak length, blur angle).

Everything is a pure function of ``(seed, index)``: the trajectory of one period is simulated
once per scene (by ``rally``, which models the ball's flight) and looped, so frames can be
rendered in any order and a looping source has no seam. Rendering one 640x360 frame takes well
under a millisecond: the static scene is drawn once, and per frame only the ball's small region
is composited and sensor noise is added.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from batchscope.scene.rally import (
    NET_HALF_WIDTH_M,
    NET_HEIGHT_M,
    SURROUND_Y_M,
    TABLE_HALF_LENGTH_M,
    TABLE_HALF_WIDTH_M,
    TABLE_HEIGHT_M,
    simulate,
)

# Drawn 1.75x its real size so the ball reads as a ball, not a speck, at 640x360.
DRAWN_BALL_RADIUS_M = 0.035
# Exposure time as a fraction of the frame interval; sets the length of the blur streaks.
EXPOSURE_FRACTION = 0.5
MIN_BLUR_SAMPLES = 8
MAX_BLUR_SAMPLES = 64
# Noise field margin (px): each frame takes the field at a random offset within it.
NOISE_MARGIN_PX = 48
_SHIFT = 4  # fractional bits for cv2 drawing at sub-pixel precision

Rgb = tuple[int, int, int]


@dataclass(frozen=True)
class BallTruth:
    """Where the ball is in one frame, in the BlurBall label convention.

    ``x``, ``y``: centre of the blur streak in pixels of the rendered frame (pixel centres at
    integer coordinates). ``length``: half the streak length in pixels. ``theta``: angle of the
    streak in degrees, in (-90, 90], from +x towards +y (image axes: x right, y down), as in the
    label files' ``theta`` and a detection's ``blur_angle``. All zero when the ball is not visible.
    """

    visible: bool
    x: float
    y: float
    length: float
    theta: float


NO_BALL = BallTruth(False, 0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class SceneStyle:
    """What varies between looks of the scene: colours, camera framing and noise.

    The camera sits on the near side of the table, ``camera_distance_m`` from the table's long
    centre line, ``camera_offset_m`` along it from the net (so the net is seen at an angle, not
    edge-on) and ``camera_height_m`` above the floor, looking at the middle of the net.
    """

    table_rgb: Rgb = (22, 74, 150)
    ball_rgb: Rgb = (250, 250, 244)
    camera_distance_m: float = 4.6
    camera_offset_m: float = 1.2
    camera_height_m: float = 2.3
    horizontal_fov_deg: float = 62.0
    noise_sigma: float = 2.5  # gray levels


DEFAULT_STYLE = SceneStyle()


class _Camera:
    """A pinhole camera on the near side of the table, looking at the net; world axes: x along
    the table, y away from the camera, z up (m); image axes: x right, y down (px)."""

    def __init__(self, width: int, height: int, style: SceneStyle) -> None:
        self.position = np.array(
            [style.camera_offset_m, -style.camera_distance_m, style.camera_height_m]
        )
        forward = np.array([0.0, 0.0, TABLE_HEIGHT_M + 0.1]) - self.position
        forward /= np.linalg.norm(forward)
        right = np.cross(forward, [0.0, 0.0, 1.0])
        right /= np.linalg.norm(right)
        self.rotation = np.stack([right, np.cross(forward, right), forward])
        self.focal_px = 0.5 * width / math.tan(math.radians(style.horizontal_fov_deg) / 2)
        self.centre_px = np.array([(width - 1) / 2, (height - 1) / 2])

    def project(self, points_m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pixel coordinates (n, 2) and depths (n,) in metres of world points (n, 3)."""
        cam = (np.atleast_2d(points_m) - self.position) @ self.rotation.T
        depth = cam[:, 2]
        return self.centre_px + self.focal_px * cam[:, :2] / depth[:, None], depth

    def scale(self, point_m: np.ndarray) -> float:
        """Pixels per metre at a world point."""
        return self.focal_px / float(self.project(point_m)[1][0])


def _fixed(points_px: np.ndarray) -> np.ndarray:
    """Pixel coordinates as the fixed-point int32 polygon cv2 draws with ``shift=_SHIFT``."""
    return np.round(np.asarray(points_px) * (1 << _SHIFT)).astype(np.int32)


def _fill(img: np.ndarray, cam: _Camera, corners_m: Sequence[tuple[float, ...]], rgb: Rgb) -> None:
    points, _ = cam.project(np.array(corners_m))
    cv2.fillPoly(img, [_fixed(points)], rgb, cv2.LINE_AA, _SHIFT)


def _line(
    img: np.ndarray, cam: _Camera, a_m: tuple[float, ...], b_m: tuple[float, ...], rgb: Rgb, px: int
) -> None:
    (a, b), _ = cam.project(np.array([a_m, b_m]))
    cv2.line(img, tuple(_fixed(a)), tuple(_fixed(b)), rgb, px, cv2.LINE_AA, _SHIFT)


def _blob(
    img: np.ndarray,
    cam: _Camera,
    centre_m: tuple[float, ...],
    half_m: tuple[float, float],
    rgb: Rgb,
) -> None:
    """A filled upright ellipse facing the camera, sized in metres at its depth."""
    centre = np.array(centre_m)
    scale = cam.scale(centre)
    axes = (round(half_m[0] * scale * (1 << _SHIFT)), round(half_m[1] * scale * (1 << _SHIFT)))
    xy = tuple(_fixed(cam.project(centre)[0][0]))
    cv2.ellipse(img, xy, axes, 0, 0, 360, rgb, -1, cv2.LINE_AA, _SHIFT)


def _floor_and_wall(width: int, height: int, cam: _Camera) -> np.ndarray:
    """A floor that darkens with distance, meeting a dim back wall at the surrounds.

    Each pixel's viewing ray is intersected with the floor, so the split follows the camera
    whatever its framing.
    """
    us, vs = np.meshgrid(np.arange(width), np.arange(height))
    rays = np.stack(
        [(us - cam.centre_px[0]) / cam.focal_px, (vs - cam.centre_px[1]) / cam.focal_px],
        axis=-1,
    )
    rays = np.concatenate([rays, np.ones((height, width, 1))], axis=-1) @ cam.rotation
    with np.errstate(divide="ignore"):
        reach_m = np.where(rays[..., 2] < 0, -cam.position[2] / rays[..., 2], np.inf)
    is_floor = cam.position[1] + reach_m * rays[..., 1] < SURROUND_Y_M
    fade = np.clip(reach_m / 12.0, 0.0, 1.0)[..., None]
    floor = (1 - fade) * np.array([88, 48, 38]) + fade * np.array([36, 20, 18])
    ramp = np.linspace(0.0, 1.0, height)[:, None, None]
    wall = (1 - ramp) * np.array([40, 44, 58]) + ramp * np.array([18, 20, 28])
    img = np.where(is_floor[..., None], floor, np.broadcast_to(wall, floor.shape))
    return np.ascontiguousarray(img.round().astype(np.uint8))


def _player(img: np.ndarray, cam: _Camera, x: float, shirt: Rgb) -> None:
    """A simple figure standing at an end of the table, facing along the table."""
    side = math.copysign(1.0, x)
    y = 0.25
    for leg in (-0.1, 0.1):
        _line(img, cam, (x + leg, y, 0.05), (x + leg * 0.6, y, 0.8), (30, 30, 38), 7)
    _blob(img, cam, (x, y, 0.85), (0.2, 0.13), (28, 28, 36))
    _blob(img, cam, (x, y, 1.2), (0.21, 0.33), shirt)
    _blob(img, cam, (x, y, 1.66), (0.1, 0.12), (214, 170, 140))
    hand = (x - side * 0.45, y - 0.1, 1.05)
    _line(img, cam, (x - side * 0.15, y, 1.35), hand, shirt, 6)
    _blob(img, cam, (hand[0] - side * 0.05, hand[1], hand[2] + 0.05), (0.075, 0.085), (170, 25, 30))


def _draw_background(width: int, height: int, style: SceneStyle, cam: _Camera) -> np.ndarray:
    """The static scene: back wall and surrounds, floor, players, table and net."""
    img = _floor_and_wall(width, height, cam)
    far = SURROUND_Y_M
    _fill(img, cam, [(-9, far, 0), (9, far, 0), (9, far, 0.75), (-9, far, 0.75)], (16, 34, 60))
    _line(img, cam, (-9, far, 0.75), (9, far, 0.75), (60, 80, 110), 1)

    _player(img, cam, -(TABLE_HALF_LENGTH_M + 0.75), (196, 48, 44))
    _player(img, cam, TABLE_HALF_LENGTH_M + 0.75, (46, 128, 76))

    top, x, y = TABLE_HEIGHT_M, TABLE_HALF_LENGTH_M, TABLE_HALF_WIDTH_M
    for leg_x in (-1.15, 1.15):
        for leg_y in (-0.6, 0.6):
            _line(img, cam, (leg_x, leg_y, 0.0), (leg_x, leg_y, top - 0.05), (28, 28, 30), 4)
    edge_rgb = (
        int(style.table_rgb[0] * 0.55),
        int(style.table_rgb[1] * 0.55),
        int(style.table_rgb[2] * 0.55),
    )
    _fill(
        img, cam, [(-x, -y, top), (x, -y, top), (x, -y, top - 0.05), (-x, -y, top - 0.05)], edge_rgb
    )
    corners = [(-x, -y, top), (x, -y, top), (x, y, top), (-x, y, top)]
    _fill(img, cam, corners, style.table_rgb)
    white = (236, 236, 236)
    for a, b in itertools.pairwise([*corners, corners[0]]):
        _line(img, cam, a, b, white, 2)
    _line(img, cam, (-x, 0, top), (x, 0, top), white, 1)

    net_y, net_top = NET_HALF_WIDTH_M, top + NET_HEIGHT_M
    mesh = img.copy()
    _fill(
        mesh,
        cam,
        [(0, -net_y, top), (0, net_y, top), (0, net_y, net_top), (0, -net_y, net_top)],
        (14, 16, 20),
    )
    img = cv2.addWeighted(mesh, 0.72, img, 0.28, 0.0)
    for post_y in (-net_y, net_y):
        _line(img, cam, (0, post_y, top - 0.02), (0, post_y, net_top), (20, 20, 24), 3)
    _line(img, cam, (0, -net_y, net_top), (0, net_y, net_top), white, 2)
    return img


def _splat(
    frame: np.ndarray, centres_px: np.ndarray, radius_px: float, rgb: Rgb, alpha: float
) -> None:
    """Composite the average of anti-aliased discs at ``centres_px`` onto ``frame`` in place.

    Averaging the discs of one exposure is what turns a fast ball into a faint streak.
    """
    height, width = frame.shape[:2]
    reach = radius_px + 1.0
    x0 = max(math.floor(centres_px[:, 0].min() - reach), 0)
    x1 = min(math.ceil(centres_px[:, 0].max() + reach) + 1, width)
    y0 = max(math.floor(centres_px[:, 1].min() - reach), 0)
    y1 = min(math.ceil(centres_px[:, 1].max() + reach) + 1, height)
    if x0 >= x1 or y0 >= y1:
        return
    xs = np.arange(x0, x1, dtype=np.float32)
    ys = np.arange(y0, y1, dtype=np.float32)
    dx = xs[None, None, :] - centres_px[:, 0, None, None].astype(np.float32)
    dy = ys[None, :, None] - centres_px[:, 1, None, None].astype(np.float32)
    coverage = np.clip(radius_px + 0.5 - np.sqrt(dx * dx + dy * dy), 0.0, 1.0).mean(axis=0)
    roi = frame[y0:y1, x0:x1].astype(np.float32)
    roi += (np.array(rgb, np.float32) - roi) * (alpha * coverage)[..., None]
    frame[y0:y1, x0:x1] = np.round(roi).astype(np.uint8)


def _fold_angle(theta: float) -> float:
    """An angle of a line (no direction), degrees, in (-90, 90]."""
    if theta > 90.0:
        return theta - 180.0
    if theta <= -90.0:
        return theta + 180.0
    return theta


#: The size the scene is rendered at (px), as a camera's would be: a source fits it into
#: the model's resolution (engine/sources.py), int8's calibration too (models/onnx_quantize.py)
SCENE_SIZE = (640, 360)


class SyntheticScene:
    """A looping, seeded table-tennis clip rendered on demand, with its ball truth.

    ``render(index)`` is a pure function of ``(seed, index % period_frames)``, so a video source
    can loop it seamlessly and start sessions at different phases.
    """

    def __init__(
        self,
        width: int = 640,
        height: int = 360,
        fps: float = 30.0,
        seed: int = 0,
        *,
        style: SceneStyle = DEFAULT_STYLE,
    ) -> None:
        if width < 16 or height < 16:
            raise ValueError(f"frame size must be at least 16x16 px, got {width}x{height}")
        if fps <= 0:
            raise ValueError(f"fps must be positive, got {fps}")
        self.width = width
        self.height = height
        self.fps = fps
        self.seed = seed
        self.style = style
        self._camera = _Camera(width, height, style)
        self._background = _draw_background(width, height, style, self._camera)
        self._path, self.period_frames = simulate(seed, fps)
        self._noise = self._noise_field() if style.noise_sigma > 0 else None

    @property
    def name(self) -> str:
        return f"synthetic:{self.seed}"

    def _noise_field(self) -> tuple[np.ndarray, np.ndarray]:
        """Gaussian sensor noise, split into what to add and what to subtract as uint8 so a
        frame takes it with two saturating cv2 calls instead of a float round trip."""
        rng = np.random.default_rng([self.seed, 1])
        shape = (self.height + NOISE_MARGIN_PX, self.width + NOISE_MARGIN_PX, 3)
        noise = np.round(rng.standard_normal(shape, np.float32) * self.style.noise_sigma)
        noise = np.clip(noise, -255, 255)
        return np.clip(noise, 0, None).astype(np.uint8), np.clip(-noise, 0, None).astype(np.uint8)

    def _exposure(self, frame_s: float, samples: int) -> np.ndarray:
        """Sample times (s) across the exposure, which is centred on the frame time."""
        exposure_s = EXPOSURE_FRACTION / self.fps
        return frame_s + (np.linspace(0.0, 1.0, samples) - 0.5) * exposure_s

    def render(self, index: int) -> tuple[np.ndarray, BallTruth]:
        """The RGB uint8 frame (height, width, 3) and the ball truth for frame ``index``."""
        index %= self.period_frames
        frame = self._background.copy()
        truth = self._ball(frame, index / self.fps)
        if self._noise is not None:
            self._add_noise(frame, index, self._noise)
        return frame, truth

    def frames(self, n: int) -> Iterator[tuple[np.ndarray, BallTruth]]:
        """The first ``n`` frames and truths, in order."""
        for index in range(n):
            yield self.render(index)

    def _ball(self, frame: np.ndarray, frame_s: float) -> BallTruth:
        """Draw the ball of the exposure around ``frame_s`` (s) in place, if it is in view.

        Only the exposure's ends are checked for play: pauses last far longer than an exposure.
        """
        ends_m, in_play = self._path.at(self._exposure(frame_s, 2))
        if not in_play:
            return NO_BALL
        ends_px, _ = self._camera.project(ends_m)
        x, y = ends_px.mean(axis=0)
        if not (0 <= x <= self.width - 1 and 0 <= y <= self.height - 1):
            return NO_BALL
        points_m, _ = self._path.at(self._exposure(frame_s, self._samples(ends_px)))
        self._draw_ball(frame, points_m)
        dx, dy = ends_px[1] - ends_px[0]
        length = 0.5 * math.hypot(dx, dy)
        theta = _fold_angle(math.degrees(math.atan2(dy, dx))) if length > 0 else 0.0
        return BallTruth(True, float(x), float(y), length, theta)

    def _samples(self, ends_px: np.ndarray) -> int:
        """Sub-frame positions per exposure: at least 8, and close enough that a long streak
        stays smooth rather than a row of beads (spacing <= 1 px)."""
        streak_px = float(np.hypot(*(ends_px[1] - ends_px[0])))
        return int(np.clip(math.ceil(streak_px) + 1, MIN_BLUR_SAMPLES, MAX_BLUR_SAMPLES))

    def _draw_ball(self, frame: np.ndarray, points_m: np.ndarray) -> None:
        """The ball's soft shadow on the table (where it is over the table), then the ball."""
        centres_px, depths = self._camera.project(points_m)
        radius_px = self._camera.focal_px * DRAWN_BALL_RADIUS_M / float(depths.mean())
        over_table = (np.abs(points_m[:, 0]) <= TABLE_HALF_LENGTH_M) & (
            np.abs(points_m[:, 1]) <= TABLE_HALF_WIDTH_M
        )
        if over_table.any():
            shadow_m = points_m[over_table].copy()
            height_m = float(shadow_m[:, 2].mean()) - TABLE_HEIGHT_M
            shadow_m[:, 2] = TABLE_HEIGHT_M
            shadow_px, _ = self._camera.project(shadow_m)
            darkness = 0.45 * over_table.mean() / (1.0 + 4.0 * max(height_m, 0.0))
            _splat(frame, shadow_px, radius_px * 1.1, (0, 0, 0), darkness)
        _splat(frame, centres_px, radius_px, self.style.ball_rgb, 1.0)

    def _add_noise(
        self, frame: np.ndarray, index: int, noise: tuple[np.ndarray, np.ndarray]
    ) -> None:
        """Add the noise field at an offset drawn from ``(seed, index)``, in place."""
        up, down = noise
        oy, ox = np.random.default_rng([self.seed, index, 2]).integers(0, NOISE_MARGIN_PX, 2)
        window = np.s_[oy : oy + self.height, ox : ox + self.width]
        cv2.add(frame, up[window], dst=frame)
        cv2.subtract(frame, down[window], dst=frame)
