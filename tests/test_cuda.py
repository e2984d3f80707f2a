"""CUDA-only checks (skipped without a GPU; run by benchmarks/gpu_check.sh on a GPU machine)."""

from __future__ import annotations

import time

import pytest
import torch

from batchscope.config import RunConfig
from batchscope.engine.backends import TorchBackend, supported_precisions
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


def test_live_engine_on_cuda_delivers_and_reports_memory():
    cfg = RunConfig(
        sources=("synthetic",),
        sessions=4,
        backend="torch",
        device="cuda:0",
        profile=None,
        precision="fp16",
        resolution=(512, 288),
    )
    engine = Engine(cfg)
    engine.open()
    engine.start()
    try:
        time.sleep(2.0)
        report = engine.report()
    finally:
        engine.stop()
    assert report["overall"]["mean_fps"] > 25  # 4 × 30 fps is light for any CUDA GPU
    assert report["memory"]["peak_allocated_mb"] > 0
    assert engine.threads_alive() == []
