"""BlurBall's input normalisation: uint8 RGB frames to ImageNet-normalised values.

One place for the statistics and the arithmetic, so that the torch backend (which
normalises on the device) and the ONNX export (which normalises inside the graph)
feed the network the same numbers by construction.
"""

from __future__ import annotations

from typing import Any

#: ImageNet statistics BlurBall's inputs are normalised with, per RGB channel (0–1 scale).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def normalisation(dtype: Any, device: Any = "cpu") -> tuple[Any, Any]:
    """(scale, shift) torch tensors, each (1, 9, 1, 1): ``uint8 * scale + shift`` is normalised.

    Nine channels: three frames of RGB. ``scale = 1 / (255 std)`` and ``shift = -mean / std``
    fold the division by 255 into one multiply-add per value. (torch is imported here, not
    at the top, so that importing the engine stays cheap for commands that never run it.)
    """
    import torch

    scale = [1.0 / (255.0 * s) for s in IMAGENET_STD] * 3
    shift = [-m / s for m, s in zip(IMAGENET_MEAN, IMAGENET_STD, strict=True)] * 3
    return (
        torch.tensor(scale, device=device, dtype=dtype).view(1, 9, 1, 1),
        torch.tensor(shift, device=device, dtype=dtype).view(1, 9, 1, 1),
    )
