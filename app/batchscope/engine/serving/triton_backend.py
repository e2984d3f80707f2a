"""A real Triton Inference Server as BatchScope's backend: Triton's dynamic batcher forms
the batches.

:class:`TritonBackend` writes a model repository (BlurBall as a Python-backend model,
``triton_model.py``, running the ONNX export through ONNX Runtime on the CPU, or a
profile's curve), starts the server on loopback (``triton_server.py``), loads the model
with the run's batching as Triton's configuration (:func:`served_config`; the mapping is
``setting.triton_batching``, the one ``plan --export`` writes) and is a gRPC client of it
(tritonclient): one request per window, at most one in flight per session.

Live changes: the batching knobs go to Triton as a new configuration of the same model
(``load_model(config=…)``): Triton loads it beside the running one and switches when it is
ready, with no request lost; each reload's time is in the report. ``adaptive`` is refused
before the start (a moving cap would reload the model at every step).

The figures: each answer carries its batch as Triton ran it (``served``: id, size, stage
times on this machine's clock); the server's statistics endpoint gives the batches it
formed by size (the report's ``batch_sizes``) and its own queue and compute means
(``server_ms``). Triton does not hand a request's arrival to the model, so on the
client's side the way to the server and its queue are one stage
(``to_engine_and_queue``); ``server_ms.queue`` is the queue alone.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from batchscope.config import RunConfig
from batchscope.device.checks import BackendError
from batchscope.engine.policies import BatchPolicy, make_policy
from batchscope.engine.serving import triton_model
from batchscope.engine.serving.base import ServingBackend
from batchscope.engine.serving.triton_server import TritonServer
from batchscope.engine.serving.wire import MAX_BATCH_SIZE, Served
from batchscope.engine.session import Window
from batchscope.profiles.profile import BatchCurve, DeviceProfile, ProfileError, load_profile
from batchscope.setting import (
    MODEL_FILE,
    ONNX_ON_CPU,
    PYTHON_MODEL_FILE,
    TRITON_DTYPES,
    TRITON_INPUT,
    TRITON_OUTPUT,
    TritonRunner,
    export_precision,
    triton_batching,
    triton_config,
)

MODEL = "blurball"
CLOSE_WAIT_S = 5.0  # a closing backend waits this long for the answers in flight
#: Triton's own stages (its statistics endpoint), means per request in ``server_ms``.
SERVER_STAGES = ("queue", "compute_input", "compute_infer", "compute_output")

Knobs = tuple[int, int | None, int]  # max_batch_size, preferred_batch_size, delay (µs)


def knobs_of(policy: BatchPolicy) -> Knobs:
    """A live policy as Triton's dynamic batcher holds it (``setting.triton_batching``;
    no cap: :data:`MAX_BATCH_SIZE`, more than the sessions, as in the Ray replica)."""
    delay = getattr(policy, "max_delay_ms", 0.0)
    return triton_batching(policy.name, policy.cap, policy.cap or 1, delay, MAX_BATCH_SIZE)


def served_config(
    config: RunConfig, knobs: Knobs, runner: str, curve_ms: list[float] | None = None
) -> dict[str, Any]:
    """The model configuration BatchScope loads (Triton's JSON form of config.pbtxt): the
    export's tensors, ``knobs`` as the dynamic batcher, one CPU instance of the Python
    backend, and the ``served`` output with each answer's batch."""
    max_batch, preferred, delay_us = knobs
    w, h = config.resolution
    precision = export_precision(config.precision, cpu=True)
    batching: dict[str, Any] = {"max_queue_delay_microseconds": delay_us}
    if preferred:
        batching["preferred_batch_size"] = [preferred]
    parameters = {"runner": {"string_value": runner}}
    if curve_ms is not None:
        parameters["curve_ms"] = {"string_value": json.dumps(curve_ms)}
    return {
        "name": MODEL,
        "backend": "python",
        "max_batch_size": max_batch,
        "input": [{"name": TRITON_INPUT, "data_type": "TYPE_UINT8", "dims": [9, h, w]}],
        "output": [
            {"name": TRITON_OUTPUT, "data_type": TRITON_DTYPES[precision], "dims": [3, h, w]},
            {
                "name": triton_model.SERVED,
                "data_type": "TYPE_FP64",
                "dims": [len(triton_model.SERVED_FIELDS)],
            },
        ],
        "dynamic_batching": batching,
        "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
        "parameters": parameters,
    }


def write_repository(
    folder: Path,
    config: RunConfig,
    onnx: bytes | None,
    settled_cap: int | None = None,
    runner: TritonRunner = ONNX_ON_CPU,
) -> Path:
    """A model repository in ``folder``: ``blurball/config.pbtxt`` (the setting for the
    Python backend, its mapping and what ``runner`` serves in comments, the runner's
    parameters), ``blurball/1/model.py`` and, given its bytes, ``blurball/1/model.onnx``.
    Returns the model's folder."""
    model = folder / MODEL
    (model / "1").mkdir(parents=True, exist_ok=True)
    (model / "config.pbtxt").write_text(
        triton_config(config, settled_cap, MODEL, cpu=True, python_backend=True, runner=runner)
    )
    shutil.copyfile(triton_model.__file__, model / "1" / PYTHON_MODEL_FILE)
    if onnx is not None:
        (model / "1" / MODEL_FILE).write_bytes(onnx)
    return model


def export_runner(config: RunConfig, profile: DeviceProfile) -> TritonRunner:
    """What an exported repository serves for ``config``, planned on ``profile``'s curve.

    A profile measured on this kind of CPU (``sweep --device cpu``): the ONNX export on the
    CPU with the threading its curves were measured with (the intra-op threads the sweep
    recorded, one inter-op thread, no spinning); a plan on torch's curve says that its
    figures are not what is served. Any other profile (a GPU's, a built-in one): its curve
    replayed as timed waits, the ``runner=emulated`` mode BatchScope's own Triton runs use,
    so that Triton's batcher can be tried on the plan's timing on any machine (perf_analyzer).
    """
    if profile.on_cpu:
        threads = profile.meta.get("threads")
        parameters = {"inter_op_threads": "1"}
        if isinstance(threads, int) and threads > 0:
            parameters["intra_op_threads"] = str(threads)
        measured = (
            f"{threads} intra-op threads" if "intra_op_threads" in parameters else "the cores"
        )
        says = (
            "the ONNX export through ONNX Runtime on the CPU, with the threading "
            f"{profile.name}'s curves were measured with ({measured}, one inter-op thread, "
            "idle threads not spinning)"
        )
        if config.runtime != "onnxruntime":
            says += (
                f". The plan's figures are {config.runtime}'s curve, not ONNX Runtime's: "
                "sweep --runtime onnxruntime and plan --runtime onnxruntime for figures of "
                "what is served"
            )
        return TritonRunner("onnxruntime", says, parameters)
    try:
        curve = profile.curve(config.precision, config.resolution, config.runtime)
    except ProfileError as exc:
        raise BackendError(str(exc)) from None
    curve_ms = curve_table(curve)
    says = (
        f"no model: the curve of {profile.name} ({profile.device}, {curve.label}) replayed "
        "as a timed wait per batch, heatmaps all zeros (runner emulated, curve_ms the ms of "
        "a batch of 1, 2, ...): Triton's batcher on the plan's timing, on any machine (e.g. "
        "with perf_analyzer). To serve the real model on this CPU instead (at the CPU's "
        "speed, not the plan's), set runner to onnxruntime, remove curve_ms and add "
        f"1/{MODEL_FILE}"
    )
    return TritonRunner("emulated", says, {"curve_ms": json.dumps(curve_ms)})


def frames_tensor(window: Window) -> np.ndarray:
    """A window as the export's input: uint8 ``[1, 9, H, W]``, oldest frame first."""
    x = np.stack(window.frames)  # (3, h, w, 3)
    _, h, w, _ = x.shape
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2).reshape(1, 9, h, w))


class TritonRequestError(RuntimeError):
    """Triton refused or failed a request (its message)."""


class TritonBackend(ServingBackend):
    """The client's side of BlurBall on a Triton server BatchScope started."""

    engine = "triton"
    knows_arrival = False

    def __init__(self, config: RunConfig, progress: Callable[[str], None]) -> None:
        import tritonclient.grpc as grpcclient

        self._grpc = grpcclient
        self.config = config
        self.resolution = config.resolution
        self.real = config.runner != "emulated"
        curve_ms = None if self.real else _curve_ms(config)
        self._runner_param = "onnxruntime" if self.real else "emulated"
        self.runner = (
            f"{config.device} onnxruntime (Python backend)"
            if self.real
            else f"emulated: {config.profile}"
        )
        self.weights = "emulated device: no model runs"
        self._trained = False
        self._curve_ms = curve_ms
        self.knobs: Knobs = knobs_of(make_policy(config))
        self._folder = Path(tempfile.mkdtemp(prefix="batchscope-triton-repository-"))
        self.server: TritonServer | None = None
        try:
            onnx = self._onnx(config, progress) if self.real else None
            write_repository(self._folder, config, onnx)
            self.server = TritonServer(self._folder, progress, temporary=(self._folder,))
            self.version = self.server.version
            self._client = grpcclient.InferenceServerClient(self.server.url)
            progress(f"loading BlurBall into Triton {self.version}…")
            self.load_s = self._load(self.knobs)
        except BaseException:
            self._close_server()
            raise
        self.label = f"Triton {self.version}: {self.runner}"
        self.draws_detections = self.real and self._trained
        self._outputs = [grpcclient.InferRequestedOutput(triton_model.SERVED)]
        if self.real:
            self._outputs.append(grpcclient.InferRequestedOutput(TRITON_OUTPUT))
        self._reloader = ThreadPoolExecutor(1, thread_name_prefix="batchscope-triton-reload")
        self._flight_lock = threading.Lock()
        self._in_flight: set[Future] = set()
        self._closing = False
        self.reloads: list[dict[str, Any]] = []
        self._carried: Counter[int] = Counter()  # counts of model instances reloaded away
        self._stats_mark = self._server_stats()[1]

    # -- set-up ----------------------------------------------------------------

    def _onnx(self, config: RunConfig, progress: Callable[[str], None]) -> bytes:
        """BlurBall's ONNX model for the run (an ``.onnx`` checkpoint as it is, else the
        export of its weights; untrained weights: timing only, no detections)."""
        from batchscope.engine.backends.onnx_backend import onnx_model

        progress("exporting BlurBall to ONNX for Triton (a few seconds)…")
        data, self.weights, self._trained = onnx_model(
            config.checkpoint, config.precision, config.resolution, config.lean
        )
        return data

    def _load(self, knobs: Knobs) -> float:
        """Load (or reload) the model with ``knobs``; returns the seconds it took."""
        assert self.server is not None, "loaded on a started server"
        t0 = time.monotonic()
        try:
            self._client.load_model(
                MODEL,
                config=json.dumps(
                    served_config(self.config, knobs, self._runner_param, self._curve_ms)
                ),
            )
        except Exception as exc:
            raise BackendError(
                f"Triton did not load BlurBall: {_message(exc)} ({self.server.log_tail(1)})"
            ) from None
        self.server.watch()  # the model instance's process
        self.knobs = knobs
        return time.monotonic() - t0

    # -- the serving side ------------------------------------------------------

    def submit(self, window: Window) -> Future:
        future: Future = Future()
        x = frames_tensor(window)
        tensor = self._grpc.InferInput(TRITON_INPUT, list(x.shape), "UINT8")
        tensor.set_data_from_numpy(x)
        with self._flight_lock:
            if self._closing:
                raise BackendError("the Triton backend is closing")
            self._in_flight.add(future)
        future.add_done_callback(self._landed)
        try:
            self._client.async_infer(
                MODEL, [tensor], partial(self._answered, future, window), outputs=self._outputs
            )
        except Exception as exc:
            future.set_exception(TritonRequestError(_message(exc)))
        return future

    def _answered(self, future: Future, window: Window, result: Any, error: Any) -> None:
        """gRPC's thread: the answer, as a Served (the detection post-processed here)."""
        if error is not None:
            future.set_exception(TritonRequestError(_message(error)))
            return
        try:
            row = result.as_numpy(triton_model.SERVED)[0]
            detection = self._detect(result.as_numpy(TRITON_OUTPUT), window) if self.real else None
            start = float(row[2])
            future.set_result(
                Served(
                    detection,
                    batch_id=int(row[0]),
                    batch_size=int(row[1]),
                    arrived=start,  # Triton does not say: the batch's start
                    start=start,
                    prep_end=float(row[3]),
                    compute_end=float(row[4]),
                    post_end=float(row[5]),
                    device_late=0.0,
                    clock=self.clock,  # the server runs on this machine (BatchScope started it)
                    pid=int(row[6]),
                )
            )
        except Exception as exc:
            future.set_exception(exc)

    def _detect(self, heatmaps: np.ndarray, window: Window) -> Any:
        import torch

        from batchscope.engine.backends.torch_device import detect
        from batchscope.models.postprocess import best_detections

        if not self.draws_detections:
            return None
        last = torch.from_numpy(heatmaps[:, 2].astype(np.float32))  # a copy: gRPC owns the answer
        method = partial(best_detections, method=self.config.postprocess)
        return detect(method, last, [window])[0]

    def _landed(self, future: Future) -> None:
        with self._flight_lock:
            self._in_flight.discard(future)

    def batching_of(self, policy: BatchPolicy) -> Knobs:
        return knobs_of(policy)

    def set_batching(self, knobs: tuple[Any, ...]) -> Future:
        """The knobs as a new configuration of the loaded model (``load_model(config=…)``);
        the Future says what the reload took (None when Triton holds these knobs already)."""
        want: Knobs = (int(knobs[0]), knobs[1], int(knobs[2]))
        if want == self.knobs:
            done: Future = Future()
            done.set_result(None)
            return done
        return self._reloader.submit(self._reload, want)

    def _reload(self, knobs: Knobs) -> str:
        before = self._batch_counts()
        seconds = self._load(knobs)
        after = self._batch_counts()
        if any(after.get(k, 0) < v for k, v in before.items()):  # a new instance's statistics
            self._carried.update(before)
        max_batch, preferred, delay_us = knobs
        self.reloads.append(
            {
                "seconds": round(seconds, 2),
                "max_batch_size": max_batch,
                "preferred_batch_size": preferred,
                "max_queue_delay_us": delay_us,
            }
        )
        preferred_text = f", preferred {preferred}" if preferred else ""
        return (
            f"Triton loaded the new batching (max_batch_size {max_batch}{preferred_text}, "
            f"delay {delay_us} µs) in {seconds:.2f} s"
        )

    # -- the server's figures --------------------------------------------------

    def _server_stats(self) -> tuple[Counter[int], dict[str, tuple[int, int]]]:
        """The model's batch counts by size and its stages' (count, ns) sums, as Triton's
        statistics endpoint has them now."""
        stats = self._client.get_inference_statistics(MODEL, as_json=True)
        counts: Counter[int] = Counter()
        stages = dict.fromkeys(SERVER_STAGES, (0, 0))
        for model in stats.get("model_stats", []):
            for batch in model.get("batch_stats", []):
                counts[int(batch["batch_size"])] += int(batch["compute_infer"].get("count", 0))
            inference = model.get("inference_stats", {})
            for stage in SERVER_STAGES:
                got = inference.get(stage, {})
                count, ns = stages[stage]
                stages[stage] = (count + int(got.get("count", 0)), ns + int(got.get("ns", 0)))
        return counts, stages

    def _batch_counts(self) -> Counter[int]:
        return self._server_stats()[0]

    def counts(self) -> dict[int, int]:
        total = self._batch_counts() + self._carried
        return dict(total)

    def reset(self) -> None:
        with contextlib.suppress(Exception):
            self._stats_mark = self._server_stats()[1]

    def report(self) -> dict[str, Any]:
        _, stages = self._server_stats()
        server_ms = {}
        for stage, (count, ns) in stages.items():
            count0, ns0 = self._stats_mark.get(stage, (0, 0))
            n = count - count0
            server_ms[stage] = round((ns - ns0) / n / 1e6, 3) if n > 0 else None
        max_batch, preferred, delay_us = self.knobs
        return {
            "server_pid": self.server.pid if self.server else None,
            "server_ms": server_ms,
            "config": {
                "max_batch_size": max_batch,
                "preferred_batch_size": preferred,
                "max_queue_delay_us": delay_us,
            },
            "start_s": {
                "server": round(self.server.start_s, 2) if self.server else None,
                "load": round(self.load_s, 2),
            },
            "reloads": list(self.reloads),
            "address": self.server.url if self.server else None,
        }

    # -- Backend ---------------------------------------------------------------

    def close(self) -> None:
        """Let the requests in flight end, then stop the server (and its processes)."""
        with self._flight_lock:
            self._closing = True
            pending = list(self._in_flight)
        wait(pending, timeout=CLOSE_WAIT_S)
        self._reloader.shutdown(wait=True, cancel_futures=True)
        with contextlib.suppress(Exception):
            self._client.close()
        self._close_server()

    def _close_server(self) -> None:
        if self.server is not None:
            self.server.close()
        shutil.rmtree(self._folder, ignore_errors=True)


def _curve_ms(config: RunConfig) -> list[float]:
    """The profile's batch curve as the ms of a batch of 1 … MAX_BATCH_SIZE (the emulated
    model's table); a bad profile or curve is said before Triton starts."""
    try:
        profile = load_profile(config.profile or "")
        curve = profile.curve(config.precision, config.resolution, config.runtime)
    except ProfileError as exc:
        raise BackendError(str(exc)) from None
    return curve_table(curve)


def curve_table(curve: BatchCurve) -> list[float]:
    """The emulated model's table: the ms of a batch of 1 … MAX_BATCH_SIZE."""
    return [round(curve.ms(n), 4) for n in range(1, MAX_BATCH_SIZE + 1)]


def _message(exc: Any) -> str:
    """A tritonclient error's own message (without its gRPC status prefix's noise)."""
    text = exc.message() if hasattr(exc, "message") and callable(exc.message) else str(exc)
    return str(text).splitlines()[0] if text else type(exc).__name__
