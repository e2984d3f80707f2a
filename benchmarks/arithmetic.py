"""What one forward pass of BlurBall costs in arithmetic and memory traffic.

``macs`` counts multiply-accumulates of every convolution and linear layer
(``torch.utils.flop_counter``: FLOPs ÷ 2). ``elements_moved`` counts the tensor
elements every aten op reads and writes as eager PyTorch runs them — the traffic
the device sees if no two ops are fused and nothing stays in cache; multiply by
the element size of the precision for bytes. Both run the model once on the CPU.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from batchscope.models.blurball import BlurBall

ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


class _ElementCounter(TorchDispatchMode):
    """Counts tensor elements read (inputs) and written (outputs) by every aten op."""

    # ops that only reinterpret memory move nothing
    FREE: ClassVar[frozenset[str]] = frozenset(
        [
            "view",
            "_unsafe_view",
            "reshape",
            "expand",
            "permute",
            "t",
            "transpose",
            "unsqueeze",
            "squeeze",
            "alias",
            "detach",
            "slice",
            "select",
            "as_strided",
        ]
    )

    def __init__(self) -> None:
        super().__init__()
        self.elements = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket.__name__ not in self.FREE:
            flat = tree_flatten((args, kwargs, out))[0]
            self.elements += sum(t.numel() for t in flat if torch.is_tensor(t))
        return out


def _input(resolution: tuple[int, int]) -> tuple[torch.nn.Module, torch.Tensor]:
    w, h = resolution
    return BlurBall().eval(), torch.zeros(1, 9, h, w)


def macs(resolution: tuple[int, int]) -> float:
    """Multiply-accumulates for one window at ``resolution`` (width, height)."""
    model, x = _input(resolution)
    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), counter:
        model(x)
    return counter.get_total_flops() / 2


def elements_moved(resolution: tuple[int, int]) -> float:
    """Tensor elements read + written by the eager ops of one window at ``resolution``."""
    model, x = _input(resolution)
    counter = _ElementCounter()
    with torch.inference_mode(), counter:
        model(x)
    return float(counter.elements)
