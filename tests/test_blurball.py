"""BlurBall matches the checkpoint layout and runs at the resolutions and dtypes we use."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from batchscope.models.blurball import PARAMETER_COUNT, BlurBall

LAYOUT = Path(__file__).parent / "data" / "blurball_state_dict.tsv"
SHARED_LAYOUT = Path(__file__).parents[2] / "shared" / "design" / "blurball_state_dict.tsv"


@pytest.fixture(scope="module")
def model() -> BlurBall:
    torch.manual_seed(0)
    return BlurBall().eval()


def _window(batch: int, height: int, width: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, 9, height, width, generator=torch.Generator().manual_seed(seed))


def test_parameter_count(model: BlurBall) -> None:
    assert sum(p.numel() for p in model.parameters()) == PARAMETER_COUNT == 1_488_531


def test_state_dict_matches_checkpoint_layout(model: BlurBall) -> None:
    rows = [line.split("\t") for line in LAYOUT.read_text().splitlines()]
    expected = [(name, shape) for name, shape in rows]
    actual = [(name, str(tuple(t.shape))) for name, t in model.state_dict().items()]
    assert len(expected) == 464
    assert actual == expected


@pytest.mark.skipif(not SHARED_LAYOUT.exists(), reason="shared design folder not present")
def test_layout_copy_is_current() -> None:
    assert LAYOUT.read_text() == SHARED_LAYOUT.read_text()


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize(("width", "height"), [(128, 72), (256, 144)])
def test_output_shape(model: BlurBall, batch: int, width: int, height: int) -> None:
    with torch.inference_mode():
        out = model(_window(batch, height, width))
    assert out.shape == (batch, 3, height, width)
    assert out.dtype == torch.float32


def test_lean_gives_the_same_output(model: BlurBall) -> None:
    x = _window(2, 72, 128)
    lean = BlurBall(lean=True).eval()
    lean.load_state_dict(model.state_dict())
    with torch.inference_mode():
        torch.testing.assert_close(lean(x), model(x), rtol=0, atol=0)


@pytest.mark.parametrize("lean", [False, True])
def test_the_int8_arrangement_is_the_same_function(model: BlurBall, lean: bool) -> None:
    """BlurBall(for_int8=True) (the graph the int8 model is quantized from) gives the plain
    model's output up to float rounding, with the same parameters; every fuse of every
    branch is exercised when not lean."""
    x = _window(2, 72, 128)
    plain, arranged = BlurBall(lean=lean).eval(), BlurBall(lean=lean, for_int8=True).eval()
    plain.load_state_dict(model.state_dict())
    arranged.load_state_dict(model.state_dict())
    assert list(arranged.state_dict()) == list(model.state_dict())
    with torch.inference_mode():
        want, got = plain(x), arranged(x)
        branches = [torch.randn(1, c, 72 >> k, 128 >> k) for k, c in enumerate((16, 32, 64, 128))]
        fused_plain = plain.stage4[0](branches)
        fused_arranged = arranged.stage4[0](branches)
    scale = float(want.abs().max())
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5 * scale)
    for a, b in zip(fused_arranged, fused_plain, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5 * float(b.abs().max()))


def test_batch_items_are_independent(model: BlurBall) -> None:
    x = _window(2, 72, 128)
    with torch.inference_mode():
        together = model(x)[0]
        alone = model(x[:1])[0]
    torch.testing.assert_close(together, alone, rtol=1e-4, atol=1e-4)


def test_runs_in_bfloat16_on_cpu(model: BlurBall) -> None:
    bf16 = BlurBall().eval().to(torch.bfloat16)
    bf16.load_state_dict(model.state_dict())
    with torch.inference_mode():
        out = bf16(_window(1, 72, 128).to(torch.bfloat16))
    assert out.dtype == torch.bfloat16
    assert out.shape == (1, 3, 72, 128)
    assert torch.isfinite(out).all()


def test_rejects_sizes_the_branches_cannot_fuse(model: BlurBall) -> None:
    with pytest.raises(ValueError, match="130x72"):
        model(_window(1, 72, 130))


def test_arithmetic_matches_the_design_card() -> None:
    from benchmarks.arithmetic import macs

    full = macs((512, 288))
    assert 27.5e9 < full < 28.5e9  # BLURBALL.md: ≈28 GMAC per window at 512×288
    # every layer is a convolution over the image (or a tiny SE layer): cost ∝ pixels
    assert macs((128, 72)) == pytest.approx(full / 16, rel=0.01)


def test_elements_moved_counts_reads_and_writes_not_views() -> None:
    from benchmarks.arithmetic import _ElementCounter

    x, y = torch.ones(10, 4), torch.ones(10, 4)
    with _ElementCounter() as counter:
        x.view(4, 10)
        x.permute(1, 0)
    assert counter.elements == 0
    with _ElementCounter() as counter:
        _ = x + y  # reads 2 × 40, writes 40
    assert counter.elements == 120
