"""BlurBall: the WASB-SBDT HRNet with Squeeze-and-Excitation in every BasicBlock.

Built from ``shared/design/BLURBALL.md``. Module names follow the reference HRNet so that the
official checkpoint (``blurball_best``) loads with ``strict=True``: the state dict has the
464 entries of ``blurball_state_dict.tsv`` and the model has exactly :data:`PARAMETER_COUNT`
parameters. Weights keep PyTorch's default initialisation; untrained outputs are meaningful
only for timing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from torch import Tensor, nn

PARAMETER_COUNT = 1_488_531
"""Trainable parameters of BlurBall (buffers such as BN running statistics excluded)."""

BN_MOMENTUM = 0.1
SE_REDUCTION = 16
STEM_CHANNELS = 64
BRANCH_CHANNELS = (16, 32, 64, 128)
"""Channels of the four resolution branches (full, 1/2, 1/4 and 1/8 of the input size)."""

SIZE_MULTIPLE = 8
"""Input height and width must be multiples of this: three stride-2 levels, then upsampling
must land back on the same sizes."""


def _conv3x3(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, momentum=BN_MOMENTUM)


def _module_list(modules: Iterable[nn.Module | None]) -> nn.ModuleList:
    """A ModuleList whose None entries keep the checkpoint's indices free.

    ModuleList stores None (``add_module`` takes it); its constructor's annotation
    says Module only.
    """
    return nn.ModuleList(modules)  # type: ignore[arg-type]


class SqueezeExcitation(nn.Module):
    """Channel gating: global average pool, bottleneck MLP, sigmoid, rescale."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        hidden = max(channels // SE_REDUCTION, 1)
        self.fc = nn.Sequential(
            nn.Linear(channels, hidden, bias=False),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, channels, bias=False),
            nn.Sigmoid(),
        )

    #: the int8 arrangement (:class:`BlurBall` ``for_int8``): the same gating in operators
    #: with fast uint8 kernels in ONNX Runtime (module doc)
    for_int8 = False

    def forward(self, x: Tensor) -> Tensor:
        if not self.for_int8:
            gate = self.fc(x.mean(dim=(2, 3)))
            return x * gate[:, :, None, None]
        pooled = nn.functional.avg_pool2d(x, tuple(x.shape[-2:])).flatten(1)
        gate = self.fc(pooled)[:, None, None, :]  # channels last: [N, 1, 1, C]
        rows = x.permute(0, 2, 3, 1)
        return (rows * gate.expand_as(rows)).permute(0, 3, 1, 2)


class BasicBlock(nn.Module):
    """Two 3×3 convolutions with SE before the residual sum; channels and size unchanged."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = _conv3x3(channels, channels)
        self.bn1 = _bn(channels)
        self.conv2 = _conv3x3(channels, channels)
        self.bn2 = _bn(channels)
        self.se = SqueezeExcitation(channels)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.se(self.bn2(self.conv2(out)))
        return self.relu(out + x)


class Bottleneck(nn.Module):
    """The single layer1 block: 1×1 → 3×3 → 1×1 (×4 expansion) with a projected shortcut."""

    expansion = 4

    def __init__(self, in_channels: int, width: int) -> None:
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = _bn(width)
        self.conv2 = _conv3x3(width, width)
        self.bn2 = _bn(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = _bn(out_channels)
        self.downsample = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 1, bias=False), _bn(out_channels)
        )
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + self.downsample(x))


def _fuse_layer(channels: tuple[int, ...], i: int, j: int) -> nn.Module | None:
    """Map branch ``j`` onto branch ``i``'s resolution and channels (None when i == j)."""
    if j == i:
        return None
    if j > i:
        return nn.Sequential(
            nn.Conv2d(channels[j], channels[i], 1, bias=False),
            _bn(channels[i]),
            nn.Upsample(scale_factor=2 ** (j - i), mode="nearest"),
        )
    steps = []
    for k in range(i - j):
        if k == i - j - 1:
            steps.append(nn.Sequential(_conv3x3(channels[j], channels[i], 2), _bn(channels[i])))
        else:
            steps.append(
                nn.Sequential(
                    _conv3x3(channels[j], channels[j], 2), _bn(channels[j]), nn.ReLU(inplace=True)
                )
            )
    return nn.Sequential(*steps)


def _up2(x: Tensor) -> Tensor:
    return nn.functional.interpolate(x, scale_factor=2, mode="nearest")


class HighResolutionModule(nn.Module):
    """Parallel branches of two BasicBlocks each, then every branch fused into every other."""

    for_int8 = False  # the int8 arrangement of the fuse (:meth:`_fuse_nested`)

    def __init__(self, channels: tuple[int, ...]) -> None:
        super().__init__()
        n = len(channels)
        self.branches = nn.ModuleList(nn.Sequential(BasicBlock(c), BasicBlock(c)) for c in channels)
        self.fuse_layers = nn.ModuleList(
            _module_list(_fuse_layer(channels, i, j) for j in range(n)) for i in range(n)
        )
        self.relu = nn.ReLU(inplace=True)

    def forward(self, xs: list[Tensor], outputs: int | None = None) -> list[Tensor]:
        """Run the branches, then fuse into the first ``outputs`` branches (all when None).

        Asking for fewer outputs skips their compute only; the result for the branches
        that are computed does not change.
        """
        xs = [branch(x) for branch, x in zip(self.branches, xs, strict=True)]
        fused = []
        for i, layers in enumerate(self.fuse_layers[: len(xs) if outputs is None else outputs]):
            y = xs[i]
            if self.for_int8:
                y = self._fuse_nested(xs, i, layers)
            else:
                for j, layer in enumerate(cast("Iterable[nn.Module | None]", layers)):
                    if layer is not None:  # None at j == i: the branch itself
                        y = y + layer(xs[j])
            fused.append(self.relu(y))
        return fused

    @staticmethod
    def _fuse_nested(xs: list[Tensor], i: int, layers: nn.Module) -> Tensor:
        """Branch ``i``'s fused sum with the lower resolutions upsampled ×2 one level at a
        time: up2(f(i+1) + up2(f(i+2) + …)) equals up2(f(i+1)) + up4(f(i+2)) + … (nearest
        upsampling is a copy, and a ×4 is two ×2), so only one upsampling a fuse reaches
        branch ``i``'s resolution; the sum differs from the plain one by rounding only."""
        steps = list(cast("Iterable[nn.Module | None]", layers))
        y = xs[i]
        for j in range(i):  # the higher resolutions, strided down
            y = y + cast(nn.Module, steps[j])(xs[j])
        lower = None
        for j in range(len(xs) - 1, i, -1):  # the lowest resolution first
            conv, bn, _ = cast(nn.Sequential, steps[j])  # the ×2^(j-i) upsampling left out
            mapped = bn(conv(xs[j]))
            lower = mapped if lower is None else mapped + _up2(lower)
        return y if lower is None else y + _up2(lower)


def _new_branch(in_channels: int, out_channels: int) -> nn.Sequential:
    """Transition to a new half-resolution branch (wrapped twice, as the checkpoint names it)."""
    return nn.Sequential(
        nn.Sequential(
            _conv3x3(in_channels, out_channels, 2), _bn(out_channels), nn.ReLU(inplace=True)
        )
    )


class BlurBall(nn.Module):
    """Ball heatmaps for 3 stacked RGB frames: [B, 9, H, W] → logits [B, 3, H, W].

    One heatmap per input frame at full input resolution; apply a sigmoid in
    post-processing. ``lean=True`` skips computing the stage-4 fused outputs of
    branches 1–3, which the head never reads (≈1 GMAC at 512×288); their parameters
    stay so that checkpoints still load, and the output is unchanged.

    ``for_int8=True`` is the same function arranged for ONNX Runtime's uint8 kernels (the
    graph ``models.onnx_quantize`` quantizes; measured in docs/BENCHMARKS.md): the SE
    gate is applied channels-last to a gate expanded to the whole tensor (a broadcast
    QLinearMul over 16 channels ran a loop turn per pixel, 2.5 ms a full-resolution block
    at batch 4), its pooling is an AveragePool (a quantized operator; a ReduceMean ran in
    float after a dequantization), and a fuse upsamples ×2 one level at a time
    (:meth:`HighResolutionModule._fuse_nested`). Outputs equal the plain arrangement's
    up to float rounding; the parameters are the same.
    """

    def __init__(self, lean: bool = False, for_int8: bool = False) -> None:
        super().__init__()
        self.lean = lean
        c = BRANCH_CHANNELS
        self.conv1 = _conv3x3(9, STEM_CHANNELS)
        self.bn1 = _bn(STEM_CHANNELS)
        self.conv2 = _conv3x3(STEM_CHANNELS, STEM_CHANNELS)
        self.bn2 = _bn(STEM_CHANNELS)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Sequential(Bottleneck(STEM_CHANNELS, 32))
        layer1_channels = 32 * Bottleneck.expansion
        self.transition1 = nn.ModuleList(
            [
                nn.Sequential(_conv3x3(layer1_channels, c[0]), _bn(c[0]), nn.ReLU(inplace=True)),
                _new_branch(layer1_channels, c[1]),
            ]
        )
        self.stage2 = nn.ModuleList([HighResolutionModule(c[:2])])
        # Existing branches pass through unchanged; None keeps the checkpoint's indices.
        self.transition2 = _module_list([None, None, _new_branch(c[1], c[2])])
        self.stage3 = nn.ModuleList([HighResolutionModule(c[:3])])
        self.transition3 = _module_list([None, None, None, _new_branch(c[2], c[3])])
        self.stage4 = nn.ModuleList([HighResolutionModule(c)])
        self.final_layers = nn.ModuleList([nn.Conv2d(c[0], 3, 1)])
        for module in self.modules():  # no parameter changes: the checkpoint loads as ever
            if isinstance(module, SqueezeExcitation | HighResolutionModule):
                module.for_int8 = for_int8

    def forward(self, x: Tensor) -> Tensor:
        height, width = x.shape[-2:]
        if height % SIZE_MULTIPLE or width % SIZE_MULTIPLE:
            raise ValueError(
                f"BlurBall input size {width}x{height} must be a multiple of {SIZE_MULTIPLE} "
                "in both width and height"
            )
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.relu(self.bn2(self.conv2(x)))
        x = self.layer1(x)
        xs = [transition(x) for transition in self.transition1]
        xs = self.stage2[0](xs)
        xs = [*xs, self.transition2[-1](xs[-1])]
        xs = self.stage3[0](xs)
        xs = [*xs, self.transition3[-1](xs[-1])]
        xs = self.stage4[0](xs, outputs=1 if self.lean else None)
        return self.final_layers[0](xs[0])
