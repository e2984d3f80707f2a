"""CUDA graphs: the model captured once per batch size and replayed, for the torch backend.

Replaying a captured graph removes eager PyTorch's per-kernel launch cost; the
price is a fixed input and output buffer per batch size, which this holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class CapturedBatch:
    """One CUDA graph of the model for one batch size, with its fixed input and output."""

    graph: Any
    input: Any
    output: Any

    @classmethod
    def capture(cls, torch: Any, model: Any, example: Any) -> CapturedBatch:
        static_in = example.clone()
        side = torch.cuda.Stream(example.device)
        side.wait_stream(torch.cuda.current_stream(example.device))
        with torch.cuda.stream(side):  # warm-up (and cuDNN autotuning) off the capture
            for _ in range(3):
                model(static_in)
        torch.cuda.current_stream(example.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = model(static_in)[:, 2]
        return cls(graph, static_in, static_out)
