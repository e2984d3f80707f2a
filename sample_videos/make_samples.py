"""Write the bundled sample clips and their ball ground truth.

The clips ship with BatchScope so that opening "a video file" works out of the box and the
file-source path is exercised with known answers. Each clip is a ``SyntheticScene`` with its
own seed and look, written as 640x360, 30 fps MPEG-4 Part 2 ('mp4v', which every OpenCV build
can write), with a CSV beside it in the BlurBall label format:
``Frame,Visibility,X,Y,l,theta`` (pixels, degrees; zeros when the ball is not visible).

Run ``python sample_videos/make_samples.py`` to regenerate them in this folder.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import cv2

try:
    from batchscope.scene.synthetic import SceneStyle, SyntheticScene
except ModuleNotFoundError:  # run from a checkout where the package is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))
    from batchscope.scene.synthetic import SceneStyle, SyntheticScene

WIDTH, HEIGHT, FPS = 640, 360, 30.0
CLIP_SECONDS = 7.0

# name -> (seed, look): the default hall; a green table with an orange ball; a tighter, higher
# camera from the other end of the table.
CLIPS: dict[str, tuple[int, SceneStyle]] = {
    "rally_a": (1, SceneStyle()),
    "rally_b": (2, SceneStyle(table_rgb=(24, 110, 72), ball_rgb=(255, 140, 26))),
    "rally_c": (
        3,
        SceneStyle(
            camera_distance_m=3.6,
            camera_offset_m=-0.8,
            camera_height_m=2.9,
            horizontal_fov_deg=66.0,
        ),
    ),
}
CSV_HEADER = ("Frame", "Visibility", "X", "Y", "l", "theta")


def write_clip(scene: SyntheticScene, video: Path, frames: int) -> None:
    """Write ``frames`` frames of ``scene`` to ``video`` and the truth to ``video``'s .csv."""
    writer = cv2.VideoWriter(
        str(video), cv2.VideoWriter.fourcc(*"mp4v"), scene.fps, (scene.width, scene.height)
    )
    if not writer.isOpened():
        raise RuntimeError(f"cv2.VideoWriter cannot write 'mp4v' to {video}")
    try:
        with video.with_suffix(".csv").open("w", newline="") as f:
            rows = csv.writer(f)
            rows.writerow(CSV_HEADER)
            for index, (frame, truth) in enumerate(scene.frames(frames)):
                writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
                rows.writerow(
                    (
                        index,
                        int(truth.visible),
                        f"{truth.x:.2f}",
                        f"{truth.y:.2f}",
                        f"{truth.length:.2f}",
                        f"{truth.theta:.2f}",
                    )
                )
    finally:
        writer.release()


def main(out_dir: Path, seconds: float = CLIP_SECONDS) -> list[Path]:
    """Write every clip of ``CLIPS`` (``seconds`` long) into ``out_dir``; returns the videos.

    Each video's truth is beside it, at ``video.with_suffix(".csv")``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    frames = round(seconds * FPS)
    videos = []
    for name, (seed, style) in CLIPS.items():
        video = out_dir / f"{name}.mp4"
        write_clip(SyntheticScene(WIDTH, HEIGHT, FPS, seed, style=style), video, frames)
        videos.append(video)
    return videos


if __name__ == "__main__":
    for path in main(Path(__file__).resolve().parent):
        print(f"{path.name}: {path.stat().st_size / 1e6:.2f} MB")
