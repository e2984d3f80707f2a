"""Batch assembly: only the frames the device lacks travel, and the gathered windows are exact."""

from __future__ import annotations

import numpy as np
import pytest

from batchscope.engine.assembly import FramePool, Staging
from batchscope.engine.session import Session, Window
from batchscope.engine.sources import CachedSource

H, W = 8, 16


def frame(value: int, h: int = H, w: int = W) -> np.ndarray:
    return np.full((h, w, 3), value % 256, np.uint8)


class Client:
    """A real Session over its own frames: consecutive windows share frame objects, the
    property the frame pool relies on."""

    def __init__(self, sid: int, h: int = H, w: int = W) -> None:
        frames = np.stack([frame(sid * 50 + k, h, w) for k in range(1000)])
        source = CachedSource(f"test:{sid}", f"test {sid}", frames, 30.0, (w, h))
        self.session = Session(sid, source)

    def advance(self, steps: int = 1) -> Window:
        window = None
        for _ in range(steps):
            window = self.session.next_window(0.0)
        return window


def primed(sid: int, h: int = H, w: int = W) -> Client:
    """A client whose next step gives its first window (a window needs 3 frames)."""
    client = Client(sid, h, w)
    client.advance(2)
    return client


def apply(pool_frames: np.ndarray, plan) -> np.ndarray:
    """What the device does with a plan: write the uploads, gather the windows."""
    for f, at in zip(plan.uploads, plan.positions, strict=True):
        pool_frames[at] = f
    return pool_frames[plan.gather]


def test_uploads_only_what_the_pool_lacks():
    pool, a = FramePool(), primed(0)
    counts, win = [], None
    for steps in (1, 1, 2, 3, 5, 0):  # 0: the same window again
        win = a.advance(steps) if steps else win
        plan = pool.plan([win])
        counts.append(len(plan.uploads))
        pool.commit(plan)
    assert counts == [3, 1, 2, 3, 3, 0]


def test_gathered_windows_equal_the_stacked_frames_over_a_random_run():
    rng = np.random.default_rng(3)
    clients = [primed(s) for s in range(6)]
    pool, device = FramePool(), np.zeros((3 * 8, H, W, 3), np.uint8)
    shipped = total = 0
    for _ in range(200):
        chosen = rng.choice(6, size=rng.integers(1, 7), replace=False)
        windows = [clients[s].advance(int(rng.choice([1, 1, 1, 2, 4]))) for s in chosen]
        plan = pool.plan(windows)
        assert plan.slots_needed <= 6
        got = apply(device, plan)
        np.testing.assert_array_equal(got, np.stack([np.stack(w.frames) for w in windows]))
        pool.commit(plan)
        shipped, total = shipped + len(plan.uploads), total + 3 * len(windows)
    assert shipped < 0.6 * total  # mostly one new frame per window


def test_a_plan_not_committed_is_shipped_again():
    pool, a = FramePool(), primed(0)
    pool.commit(pool.plan([a.advance()]))
    win = a.advance()
    lost = pool.plan([win])  # e.g. the batch ran out of device memory: never committed
    assert len(lost.uploads) == 1
    assert len(pool.plan([win]).uploads) == 1
    pool.forget()  # a failed batch may have written half of it: start over
    assert len(pool.plan([win]).uploads) == 3


def test_a_new_source_on_the_same_session_id_ships_whole_windows():
    pool = FramePool()
    pool.commit(pool.plan([primed(0).advance()]))
    assert len(pool.plan([primed(0).advance()]).uploads) == 3  # equal values, other frames


def test_staging_grows_in_powers_of_two_and_keeps_its_buffer():
    staging = Staging((W, H))
    first = staging.put([frame(1)] * 3)
    assert first.shape == (4, H, W, 3)
    assert staging.put([frame(2)] * 4) is first
    assert staging.put([frame(3)] * 5).shape == (8, H, W, 3)
    assert (staging.host[4] == 3).all()


def test_torch_backend_assembles_the_same_windows_through_its_pool():
    torch = pytest.importorskip("torch")
    from batchscope.engine.backends import TorchBackend

    backend = TorchBackend("cpu", "fp32", (W * 8, H * 8))  # 128x64: the model's multiple
    clients = [primed(s, H * 8, W * 8) for s in range(3)]
    rng = np.random.default_rng(0)
    for _ in range(12):
        windows = [c.advance(int(rng.choice([1, 2]))) for c in clients]
        with torch.inference_mode():
            got = backend._assemble(windows).numpy()
        np.testing.assert_array_equal(got, np.stack([np.stack(w.frames) for w in windows]))
