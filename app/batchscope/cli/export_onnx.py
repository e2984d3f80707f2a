"""`batchscope export-onnx`: BlurBall as an ONNX model, checked in ONNX Runtime against torch.

The file is what ``run --runtime onnxruntime --checkpoint FILE.onnx`` and a Triton
model repository take: input ``frames`` uint8 [batch, 9, H, W], output ``heatmaps``
[batch, 3, H, W] logits (see ``models.onnx_export``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from batchscope.cli.args import CliError, resolution
from batchscope.config import (
    DEFAULT_RESOLUTION,
    EXPORT_PRECISIONS,
    UNTRAINED,
    format_resolution,
)


def add_export_onnx_command(sub: Any) -> None:
    p = sub.add_parser(
        "export-onnx",
        help="export BlurBall as an ONNX model (uint8 frames in, logits out)",
        description="Exports BlurBall with its input normalisation inside the graph: input "
        "'frames' uint8 [batch, 9, H, W] (three RGB frames, oldest first), output "
        "'heatmaps' [batch, 3, H, W] logits (float16 for fp16, else float32; int8 is the "
        "fp32 export statically quantized, calibrated on the synthetic scene). The "
        "batch axis is dynamic, the resolution fixed. Then runs it once in ONNX Runtime "
        "beside torch and prints the largest difference.",
    )
    p.add_argument("--out", required=True, metavar="MODEL.onnx", help="file to write")
    p.add_argument("--precision", choices=EXPORT_PRECISIONS, default="fp32")
    p.add_argument(
        "--resolution",
        type=resolution,
        default=DEFAULT_RESOLUTION,
        metavar="WxH",
        help=f"input width x height (default {format_resolution(DEFAULT_RESOLUTION)})",
    )
    p.add_argument("--checkpoint", help="BlurBall checkpoint to export (default: the demo weights)")
    p.add_argument("--no-weights", action="store_true", help="export the untrained initial weights")
    p.add_argument(
        "--lean",
        action="store_true",
        help="skip stage-4 outputs the head never uses (same result, less compute)",
    )
    p.set_defaults(handler=cmd_export_onnx)


def cmd_export_onnx(args: argparse.Namespace) -> int:
    from batchscope.models.onnx_export import (
        ExportError,
        check_writable,
        export_blurball,
        exportable,
        write_onnx,
    )
    from batchscope.models.onnx_quantize import QuantizeError
    from batchscope.models.weights import resolve_weights

    if args.checkpoint and args.no_weights:
        raise CliError("give --checkpoint or --no-weights, not both")
    path, weights = resolve_weights(UNTRAINED if args.no_weights else args.checkpoint)
    try:
        out = check_writable(args.out)  # before the export's seconds
        model = exportable(args.precision, path, args.lean)
        print(
            f"exporting BlurBall {args.precision} {format_resolution(args.resolution)}…",
            file=sys.stderr,
            flush=True,
        )
        data = export_blurball(args.precision, args.resolution, path, args.lean, say)
        write_onnx(data, out)
    except (ExportError, QuantizeError) as exc:
        raise CliError(str(exc)) from None
    w, h = args.resolution
    kind = "float16" if args.precision == "fp16" else "float32"
    print(f"wrote {out} ({len(data) / 2**20:.1f} MB, {weights})")
    print(f"  input  frames   uint8 [batch, 9, {h}, {w}]")
    print(f"  output heatmaps {kind} [batch, 3, {h}, {w}] (logits)")
    print(f"  {check_in_onnxruntime(model, data, args.resolution)}")
    return 0


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def check_in_onnxruntime(model: Any, data: bytes, res: tuple[int, int]) -> str:
    """One batch of 2 random windows through torch and ONNX Runtime: the largest difference."""
    import numpy as np
    import torch

    from batchscope.device.checks import BackendError
    from batchscope.device.onnx_runtime import open_session
    from batchscope.models.onnx_export import INPUT, OUTPUT

    w, h = res
    frames = torch.randint(0, 256, (2, 9, h, w), dtype=torch.uint8)
    try:
        session, _ = open_session(data, torch.device("cpu"), torch.get_num_threads(), False, "")
    except BackendError as exc:
        return f"not checked: {exc}"
    with torch.inference_mode():
        want = model(frames).float().numpy()
    got = session.run([OUTPUT], {INPUT: frames.numpy()})[0].astype(np.float32)
    return (
        f"checked in onnxruntime (CPU): max |onnxruntime - torch| = {np.abs(got - want).max():.2g}"
    )
