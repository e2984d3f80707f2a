"""Accuracy and freshness: scoring one result, the summary figures, label files, reports."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from tests.contract import SMALL_EMULATED, wait_for

from batchscope.config import RunConfig
from batchscope.engine.accuracy import HIT_RADIUS_PX, UNSCORED, score
from batchscope.engine.engine import Engine
from batchscope.engine.sources import LabelError, VideoFileSource, read_labels
from batchscope.engine.stats import accuracy_summary, item_records
from batchscope.experiment import Fault
from batchscope.models.postprocess import Detection
from batchscope.paths import sample_videos
from batchscope.scene.synthetic import NO_BALL, BallTruth

BALL = BallTruth(True, 100.0, 50.0, 6.0, 30.0)
LATER = BallTruth(True, 112.0, 55.0, 6.0, 30.0)  # 13 px on: (12, 5)


def det(x: float, y: float) -> Detection:
    return Detection(x, y, score=4.0, blur_length=6.0, blur_length_heatmap=3.0, blur_angle=30.0)


def test_a_detection_within_the_radius_is_a_hit_and_its_freshness_is_to_the_ball_now() -> None:
    result = score(det(103.0, 54.0), BALL, LATER, positions=True)
    assert result[:4] == (True, True, True, True)  # scored, visible, detected, hit
    assert result.error_px == pytest.approx(5.0)  # (3, 4): on the radius counts
    assert result.fresh_px == pytest.approx(math.hypot(9.0, 1.0))


def test_a_detection_beyond_the_radius_or_none_is_a_miss() -> None:
    far = score(det(100.0, 50.0 + HIT_RADIUS_PX + 0.1), BALL, BALL, True)
    assert far[:4] == (True, True, True, False)
    assert far.error_px == pytest.approx(5.1)
    none = score(None, BALL, BALL, True)
    assert none[:4] == (True, True, False, False)
    assert math.isnan(none.error_px) and math.isnan(none.fresh_px)


def test_a_no_ball_window_is_no_hit_and_a_detection_there_is_a_false_one() -> None:
    # a rightly empty answer is not a hit: the hit rate is over the windows with the ball
    assert score(None, NO_BALL, BALL, True)[:4] == (True, False, False, False)
    false = score(det(10.0, 10.0), NO_BALL, BALL, True)
    assert false[:4] == (True, False, True, False)
    assert math.isnan(false.error_px) and math.isnan(false.fresh_px)  # nothing to be fresh about


def test_without_positions_freshness_is_the_balls_travel_during_the_latency() -> None:
    result = score(None, BALL, LATER, positions=False)
    assert result[:4] == (False, True, False, False)
    assert math.isnan(result.error_px)
    assert result.fresh_px == pytest.approx(13.0)
    assert math.isnan(score(None, BALL, NO_BALL, positions=False).fresh_px)  # ball gone by then


def test_a_source_without_truth_is_not_scored() -> None:
    assert score(det(1.0, 1.0), None, None, True) == UNSCORED


def test_accuracy_summary_takes_the_ball_windows_and_the_no_ball_windows_apart() -> None:
    items = item_records(9)
    # ball in view: hits at 1 and 3 px, a miss without detection, a miss at 9 px;
    # no ball: two rightly empty, one false detection; two unscored (one "visible")
    items["scored"][:7] = True
    items["visible"][[0, 1, 2, 3, 8]] = True
    items["detected"][[0, 1, 3, 6, 8]] = True
    items["hit"][[0, 1, 8]] = True
    items["error_px"][[0, 1, 3]] = [1.0, 3.0, 9.0]
    items["fresh_px"][[0, 1, 7]] = [2.0, 4.0, 30.0]
    assert accuracy_summary(items) == {
        "scored": 7,
        "visible": 4,
        "hit_rate": 0.5,
        "median_error_px": 3.0,
        "no_ball": 3,
        "false_detection_rate": 0.3333,
        "median_freshness_px": 4.0,
    }
    assert accuracy_summary(item_records(3)) == {
        "scored": 0,
        "visible": 0,
        "hit_rate": None,
        "median_error_px": None,
        "no_ball": 0,
        "false_detection_rate": None,
        "median_freshness_px": None,
    }


def test_a_model_that_never_answers_scores_no_hit_on_a_clip_with_pauses() -> None:
    """Issue 29: 16 of the 160 validation windows have no ball, and a model that found
    nothing "validated" at 1.0 on a check whose one window had none."""
    scores = [score(None, NO_BALL, None, True)] + [score(None, BALL, None, True)] * 3
    items = item_records(len(scores))
    for field in scores[0]._fields:
        items[field] = [getattr(s, field) for s in scores]
    summary = accuracy_summary(items)
    assert (summary["hit_rate"], summary["false_detection_rate"]) == (0.0, 0.0)
    only_no_ball = accuracy_summary(items[:1])
    assert (only_no_ball["hit_rate"], only_no_ball["false_detection_rate"]) == (None, 0.0)


# -- label files ----------------------------------------------------------------------------

HEADER = "Frame,Visibility,X,Y,l,theta\n"


def labels(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "clip.csv"
    path.write_text(text)
    return path


def test_a_label_file_reads_in_degrees_and_source_pixels(tmp_path: Path) -> None:
    path = labels(tmp_path, HEADER + "0,0,0,0,0,0\n1,1,320.5,180.25,4.5,-30.0\n")
    truths = read_labels(path, 2, (640, 360))
    assert truths == [NO_BALL, BallTruth(True, 320.5, 180.25, 4.5, -30.0)]
    assert read_labels(tmp_path / "none.csv", 2, (640, 360)) == []


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("frame,vis,x,y\n0,0,0,0\n", "columns are not Frame,Visibility,X,Y,l,theta"),
        (HEADER + "0,1,ten,5,1,0\n1,0,0,0,0,0\n", "line 2 has a cell that is not a number"),
        (HEADER + "0,0,0,0,0,0\n", "1 label rows for 2 frames"),
        (HEADER + "0,0,0,0,0,0\n2,0,0,0,0,0\n", "line 3 is frame 2, expected 1"),
        (HEADER + "0,1,1200,700,3,0\n1,0,0,0,0,0\n", "outside the 640x360 clip"),
        (HEADER + "0,1,3,4\n1,0,0,0,0,0\n", "line 2 has 4 cells, not 6"),
    ],
)
def test_a_malformed_label_file_names_itself_and_why(tmp_path: Path, text, reason) -> None:
    with pytest.raises(LabelError, match=reason) as caught:
        read_labels(labels(tmp_path, text), 2, (640, 360))
    assert str(caught.value).startswith("clip.csv: ")


def test_a_clip_with_bad_labels_plays_without_accuracy_and_says_why(tmp_path: Path) -> None:
    clip = tmp_path / "rally.mp4"
    shutil.copy(sample_videos()[0], clip)
    (tmp_path / "rally.csv").write_text(HEADER + "0,0,0,0,0,0\n")
    source = VideoFileSource(clip, (128, 72))
    assert not source.has_truth
    assert source.truth(0) is None
    assert "no accuracy: rally.csv: 1 label rows for" in source.note
    good = VideoFileSource(sample_videos()[0], (128, 72))
    assert good.has_truth and good.note == ""


# -- end to end --------------------------------------------------------------------------------


def test_reports_carry_accuracy_for_sources_with_truth_only(tmp_path: Path) -> None:
    """The emulated device gives no positions: nothing is scored for accuracy, and freshness
    is the ball's own travel during the latency. A clip without labels has no block."""
    clip = tmp_path / "unlabelled.mp4"
    shutil.copy(sample_videos()[0], clip)
    config = RunConfig(**{**SMALL_EMULATED, "sources": ("synthetic", str(clip))}, sessions=2)
    engine = Engine(config)
    engine.open()
    engine.start()
    try:
        assert wait_for(lambda: engine.report()["sessions"][0]["delivered"] >= 60)
        report = engine.report()
    finally:
        engine.stop()
    synthetic, unlabelled = report["sessions"]
    assert "accuracy" not in unlabelled
    assert synthetic["accuracy"]["scored"] == 0
    assert synthetic["accuracy"]["hit_rate"] is None
    # 4.7 ms a window on a 30 fps source: answers arrive before the next frame
    assert synthetic["accuracy"]["median_freshness_px"] == 0.0
    assert report["overall"]["accuracy"] == synthetic["accuracy"]
    view = engine.snapshot().sessions[0]
    assert view.accuracy is not None and view.accuracy["scored"] == 0
    assert view.truth is not None  # the tile's truth marker: the shown frame's truth
    assert view.truth == engine.roster.sessions()[0].source.truth(view.latest.frame_index)


def test_freshness_grows_with_latency_on_a_slow_device() -> None:
    """A device made 20x slower (~95 ms a window): a 30 fps ball has moved on by the time
    the answer arrives, so freshness is above 0 px; answers faster than a frame interval
    stay at 0 px (the frame current at delivery is still the window's own)."""
    engine = Engine(RunConfig(**SMALL_EMULATED, sessions=1))
    engine.open()
    engine.start()
    try:
        engine.inject(Fault("slow_device", for_s=60.0, factor=20.0))

        def slow_results() -> int:
            with engine.store.lock:
                items = engine.store.items.view()
            late = items["result"] - items["arrival"] > 2 / 30 + 0.003
            return int(np.sum(late & ~np.isnan(items["fresh_px"])))

        assert wait_for(lambda: slow_results() >= 6, 40)  # while the ball is in view
        with engine.store.lock:
            items = engine.store.items.view()
    finally:
        engine.stop()
    latency = items["result"] - items["arrival"]
    fresh = items["fresh_px"]
    quick = ~np.isnan(fresh) & (latency < 1 / 30 - 0.003)
    slow = ~np.isnan(fresh) & (latency > 2 / 30 + 0.003)
    assert np.all(fresh[quick] == 0.0)
    assert slow.sum() > 3 and np.median(fresh[slow]) > 0.0
