"""Is ONNX Runtime there, which execution providers run on a device, and one session opener.

The ONNX Runtime backend, a profile sweep and the app's runtime menu ask the same
questions; each "no" is one line (BackendError) naming the runtime, the device and
what to do. ONNX Runtime itself falls back to the CPU with only a log line when a GPU
provider does not load; :func:`open_session` refuses that instead.
"""

from __future__ import annotations

from typing import Any

from batchscope.device.checks import BackendError, check_device

#: The GPU providers in the order asked for; ONNX Runtime gives each node to the first
#: that runs it (and to the CPU provider a node no GPU provider has).
GPU_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider")
SHORT = {
    "CPUExecutionProvider": "CPU",
    "CUDAExecutionProvider": "CUDA",
    "TensorrtExecutionProvider": "TensorRT",
}


def import_onnxruntime() -> Any:
    """The onnxruntime module, or BackendError saying it is not installed."""
    try:
        import onnxruntime
    except ImportError as exc:
        raise BackendError(
            f"runtime onnxruntime: not installed ({exc}); "
            "pip install onnxruntime, or use --runtime torch"
        ) from None
    return onnxruntime


def providers_for(ort: Any, device: Any) -> list[str]:
    """The execution providers to ask for on ``device`` (a torch.device); BackendError if none."""
    if device.type == "cpu":
        return ["CPUExecutionProvider"]
    available = ort.get_available_providers()
    chosen = [p for p in GPU_PROVIDERS if p in available]
    if not chosen:
        raise BackendError(
            f"runtime onnxruntime on {device}: this onnxruntime {ort.__version__} has no "
            f"GPU provider (it has {', '.join(available)}); install onnxruntime-gpu, or use "
            "--runtime torch"
        )
    return chosen


def provider_label(providers: list[str]) -> str:
    """``CPU``, ``TensorRT+CUDA``: the providers in short, for labels."""
    return "+".join(SHORT.get(p, p) for p in providers)


def runtime_availability(device: str) -> dict[str, str | None]:
    """runtime -> None if it can run the real model on ``device``, else why not (one line).

    For the app's runtime menu: a runtime with a reason is shown disabled, the reason as
    its tooltip. Asks only what is cheap (an import, the provider list); builds nothing.
    """
    out: dict[str, str | None] = {"torch": None, "onnxruntime": None}
    dev = None  # on the CPU: torch runs on any, so asked without importing it (≈ 1 s)
    if device != "cpu":
        try:
            dev = check_device(device)
        except BackendError as exc:
            return {"torch": str(exc), "onnxruntime": str(exc)}
    try:
        ort = import_onnxruntime()
        if dev is not None:
            providers_for(ort, dev)
    except BackendError as exc:
        out["onnxruntime"] = str(exc)
    return out


def open_session(
    data: bytes, device: Any, threads: int, spinning: bool, origin: str
) -> tuple[Any, list[str]]:
    """(session, the providers it runs on) for the model ``data`` on ``device``.

    ``threads`` intra-op threads (the cores the worker may use) and one inter-op
    thread. ``spinning`` False stops idle threads spin-waiting after each run, on cores
    that the post-processing, the feeder and the UI need next. BackendError, naming
    ``origin``, if the model does not load or a provider asked for did not.
    """
    ort = import_onnxruntime()
    providers = providers_for(ort, device)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3  # errors only: its warnings are not the user's
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    index = device.index or 0
    asked = [p if device.type == "cpu" else (p, {"device_id": index}) for p in providers]
    try:
        session = ort.InferenceSession(data, options, providers=asked)
    except Exception as exc:  # not an ONNX model, an operator it lacks, a provider failing
        line = (str(exc).strip().split("\n")[0] or type(exc).__name__)[:200]
        raise BackendError(f"{origin}: ONNX Runtime cannot load it ({line})") from None
    loaded = session.get_providers()
    missing = [p for p in providers if p not in loaded]
    if missing:
        raise BackendError(
            f"runtime onnxruntime on {device}: {', '.join(missing)} did not load "
            f"(ONNX Runtime would run on {', '.join(loaded)}); use --runtime torch"
        )
    return session, [p for p in loaded if p in providers]


def run_bound(session: Any, name_in: str, x: Any, name_out: str, out: Any) -> None:
    """Run ``session`` on the GPU with torch tensors ``x`` in and ``out`` out, bound in place.

    Waits for torch's stream first (the input's copies) and for the outputs after, so
    the call's wall time is the model's.
    """
    import numpy as np
    import torch

    index = x.device.index or 0
    types = {torch.uint8: np.uint8, torch.float32: np.float32, torch.float16: np.float16}
    binding = session.io_binding()
    binding.bind_input(name_in, "cuda", index, types[x.dtype], tuple(x.shape), x.data_ptr())
    binding.bind_output(name_out, "cuda", index, types[out.dtype], tuple(out.shape), out.data_ptr())
    torch.cuda.synchronize(x.device)
    session.run_with_iobinding(binding)
    binding.synchronize_outputs()
