"""CUDA-only checks (skipped without a GPU; run by benchmarks/gpu_check.sh on a GPU machine)."""

from __future__ import annotations

import time

import pytest
import torch

from batchscope.config import RunConfig
from batchscope.device.checks import supported_precisions
from batchscope.engine.backends import TorchBackend
from batchscope.engine.engine import Engine
from batchscope.engine.session import Window
from batchscope.models.blurball import BlurBall

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_backend_runs_each_supported_precision(precision):
    if supported_precisions("cuda:0")[precision]:
        pytest.skip(supported_precisions("cuda:0")[precision])
    backend = TorchBackend("cuda:0", precision, (512, 288))
    frame = torch.randint(0, 255, (288, 512, 3), dtype=torch.uint8).numpy()
    result = backend.run([Window(i, 3, 3, (frame,) * 3, 0.0) for i in range(4)])
    assert len(result.detections) == 4
    assert result.prep_end <= result.compute_end <= result.post_end
    mem = backend.memory()
    assert mem["allocated_mb"] > 0 and mem["device_total_mb"] > 1000
    backend.close()


def test_fp16_matches_fp32_on_device():
    torch.manual_seed(0)
    model = BlurBall().eval().cuda()
    x = torch.randn(2, 9, 288, 512, device="cuda")
    with torch.inference_mode():
        ref = model(x)
        half = model.half()(x.half()).float()
    assert torch.allclose(ref.sigmoid(), half.sigmoid(), atol=2e-2)


def run_live(seconds: float = 2.0, **changes) -> tuple[dict, Engine]:
    """Four synthetic sessions on cuda:0, fp16 512x288, for ``seconds``; (report, engine)."""
    cfg = RunConfig(
        sources=("synthetic",),
        sessions=4,
        backend="torch",
        device="cuda:0",
        profile=None,
        precision="fp16",
        resolution=(512, 288),
        **changes,
    )
    engine = Engine(cfg)
    engine.open()
    engine.start()
    try:
        time.sleep(seconds)
        return engine.report(), engine
    finally:
        engine.stop()


def test_live_engine_on_cuda_delivers_and_reports_memory():
    report, engine = run_live()
    assert report["overall"]["mean_fps"] > 25  # 4 × 30 fps is light for any CUDA GPU
    assert report["memory"]["peak_allocated_mb"] > 0
    assert engine.threads_alive() == []


def test_cuda_graph_replay_matches_eager_and_follows_new_input():
    backend = TorchBackend("cuda:0", "fp32", (256, 144), cuda_graphs=True)
    assert backend.label.endswith("graphs")
    torch.manual_seed(1)
    with torch.inference_mode():
        for x in (
            torch.randn(3, 9, 144, 256, device="cuda"),
            torch.randn(3, 9, 144, 256, device="cuda"),
        ):
            eager = backend.model(x)[:, 2].clone()
            graphed = backend._replay(x).clone()
            assert torch.allclose(eager, graphed, atol=1e-3), (eager - graphed).abs().max()
    # batch 1 captured by the warm-up, 3 on first use
    assert [size for size, _ in backend.captured] == [1, 3]
    backend.close()


def test_live_engine_with_cuda_graphs_delivers_every_batch_size():
    report, engine = run_live(cuda_graphs=True)
    assert report["overall"]["mean_fps"] > 25
    captured = {size for size, _ in engine.backend.captured}
    assert {int(b) for b in report["overall"]["batch_sizes"]} <= captured
    assert engine.threads_alive() == []
