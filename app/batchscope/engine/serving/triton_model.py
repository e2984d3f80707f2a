"""BlurBall as a model of Triton's Python backend: the ``model.py`` of a model repository.

Triton copies nothing of BatchScope: this file is written into the repository as
``blurball/1/model.py`` and runs in Triton's Python-backend process, in Triton's own
environment (``.venv-triton``: numpy < 2, onnxruntime), so it imports nothing but the
standard library, numpy, onnxruntime and Triton's ``triton_python_backend_utils``.

It runs each batch Triton's dynamic batcher formed, as one call:

- ``runner`` ``onnxruntime`` (the default): ``model.onnx`` beside this file (BlurBall's
  ONNX export: uint8 ``frames [batch, 9, H, W]`` in, ``heatmaps [batch, 3, H, W]`` logits
  out) through ONNX Runtime on the CPU, with the threading ``batchscope sweep`` measures
  its curves with: ``intra_op_threads`` (default: the machine's cores), ``inter_op_threads``
  (default 1), operators run one after another, idle threads not spinning. ONNX Runtime's
  own default (spinning threads, one per physical core) fights Triton's and the clients'
  threads for the cores: 77-132 ms a request under load against 38-55 ms (issue 46);
- ``runner`` ``emulated``: a device profile's batch curve replayed as a timed wait
  (``curve_ms``: the ms of a batch of 1, 2, … as BatchScope's curve gives them), so a
  laptop can serve a GPU's timing; heatmaps, if asked for, are zeros.

Both are parameters of the model configuration. When the configuration declares the
output ``served`` (BatchScope's own runs do; an exported repository does not), each
response also carries its batch as Triton ran it: ``[batch id, batch size, start,
prep end, compute end, post end, pid]``, the times on this machine's monotonic clock
(``time.perf_counter``), which the client on the same machine shares.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np

#: The layout of the ``served`` output (BatchScope's client reads it by these names).
SERVED_FIELDS = ("batch_id", "batch_size", "start", "prep_end", "compute_end", "post_end", "pid")
FRAMES, HEATMAPS, SERVED = "frames", "heatmaps", "served"


class TritonPythonModel:
    """Triton's Python-backend model: ``initialize`` once, ``execute`` per batch."""

    def initialize(self, args: dict[str, Any]) -> None:
        import triton_python_backend_utils as pb_utils

        self.pb = pb_utils
        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        outputs = {o["name"]: o for o in config["output"]}
        self.dtype = pb_utils.triton_string_to_numpy(outputs[HEATMAPS]["data_type"])
        self.timed = SERVED in outputs
        self.runner = params.get("runner", "onnxruntime")
        self.batches = 0
        self.session: Any = None
        if self.runner == "emulated":
            self.curve_ms = [float(ms) for ms in json.loads(params["curve_ms"])]
            return
        import onnxruntime as ort

        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        self.session = ort.InferenceSession(
            path, session_options(ort, params), providers=["CPUExecutionProvider"]
        )

    def execute(self, requests: list[Any]) -> list[Any]:
        pb = self.pb
        start = time.perf_counter()
        frames = [pb.get_input_tensor_by_name(r, FRAMES).as_numpy() for r in requests]
        sizes = [f.shape[0] for f in frames]
        x = frames[0] if len(frames) == 1 else np.concatenate(frames)
        n = x.shape[0]
        self.batches += 1
        prep_end = time.perf_counter()
        if self.session is not None:
            heatmaps = self.session.run([HEATMAPS], {FRAMES: x})[0]
        else:
            ms = self.curve_ms[min(n, len(self.curve_ms)) - 1]
            sleep_until(prep_end + ms / 1000.0)
            heatmaps = None
        compute_end = time.perf_counter()
        responses = []
        offset = 0
        for request, size in zip(requests, sizes, strict=True):
            wanted = set(request.requested_output_names())
            tensors = []
            if HEATMAPS in wanted or not wanted:
                if heatmaps is None:
                    h, w = x.shape[2], x.shape[3]
                    part = np.zeros((size, 3, h, w), self.dtype)
                else:
                    part = heatmaps[offset : offset + size]
                tensors.append(pb.Tensor(HEATMAPS, np.ascontiguousarray(part)))
            if self.timed and (SERVED in wanted or not wanted):
                row = [
                    self.batches,
                    n,
                    start,
                    prep_end,
                    compute_end,
                    time.perf_counter(),
                    os.getpid(),
                ]
                tensors.append(pb.Tensor(SERVED, np.tile(np.array(row, np.float64), (size, 1))))
            responses.append(pb.InferenceResponse(output_tensors=tensors))
            offset += size
        return responses


def session_options(ort: Any, params: dict[str, str]) -> Any:
    """ONNX Runtime's options with the sweep's threading (see the module doc)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(params.get("intra_op_threads") or os.cpu_count() or 1)
    options.inter_op_num_threads = int(params.get("inter_op_threads") or 1)
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def sleep_until(deadline: float) -> None:
    """Sleep to ``deadline`` (perf_counter s)."""
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            return
        time.sleep(left)
