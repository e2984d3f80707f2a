"""A real Triton Inference Server, started by BatchScope on loopback and stopped with it.

The server is the one the ``nvidia-pytriton`` wheel ships (Triton 2.51 with its Python
backend; it has no ONNX Runtime backend, and it needs numpy < 2 in the backend's
process, so it lives in an environment of its own: ``.venv-triton`` beside BatchScope's
``.venv``, made by ``./batchscope.sh triton``; ``BATCHSCOPE_TRITON_ENV`` names another).
BatchScope runs the binary itself, as pytriton does, without pytriton's Python side:

- a workspace (a temporary folder) holds the Python backend with the stub for the
  environment's Python version (the wheel has one per version);
- the server listens on gRPC only, on 127.0.0.1 and a port the OS gave (HTTP and
  metrics off), loads models only when asked (``--model-control-mode explicit``) and
  takes each configuration exactly as given (no auto-complete);
- the process and the Python-backend processes below it are handed to a reaper child
  (``reaper.py``) that kills them by PID if BatchScope dies, even by SIGKILL;
  :meth:`TritonServer.close` stops the server with SIGTERM (SIGKILL after
  :data:`STOP_TIMEOUT_S`) and removes the workspace.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from batchscope.device.checks import BackendError
from batchscope.engine.serving.reaper import Reaper, descendants

ENV_VAR = "BATCHSCOPE_TRITON_ENV"
ENV_DIR = ".venv-triton"
#: What ``./batchscope.sh triton`` installs (batchscope.sh has the same pins).
SETUP_HINT = (
    "run ./batchscope.sh triton (it installs the nvidia-pytriton 0.7.0 wheel's Triton server, "
    "numpy<2 and onnxruntime into .venv-triton, about 450 MB)"
)
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
LOG_LINES = 3  # of the server's log, in the message when it fails


@dataclass(frozen=True)
class TritonInstall:
    """Where the Triton environment's server, libraries and Python-backend files are."""

    env: Path
    server: Path  # the tritonserver binary
    libs: Path  # the wheel's shared libraries (LD_LIBRARY_PATH)
    python_backend: Path  # libtriton_python.so and triton_python_backend_utils.py
    stub: Path  # triton_python_backend_stub for the environment's Python


def triton_env() -> Path:
    """The Triton environment: ``$BATCHSCOPE_TRITON_ENV``, else ``.venv-triton`` beside the
    environment BatchScope runs in."""
    named = os.environ.get(ENV_VAR)
    return Path(named) if named else Path(sys.prefix).parent / ENV_DIR


def find_triton(env: Path | None = None) -> TritonInstall:
    """The Triton install in ``env`` (default :func:`triton_env`); BackendError (one line,
    with what to do) when there is none."""
    env = env or triton_env()
    sites = sorted(env.glob("lib/python3.*/site-packages/pytriton"))
    if not sites:
        raise BackendError(f"Triton is not set up (no pytriton in {env}): {SETUP_HINT}")
    root = sites[-1] / "tritonserver"
    version = sites[-1].parent.parent.name.removeprefix("python")  # e.g. 3.11
    install = TritonInstall(
        env=env,
        server=root / "bin" / "tritonserver",
        libs=sites[-1].parent / "nvidia_pytriton.libs",
        python_backend=root / "backends" / "python",
        stub=root / "python_backend_stubs" / version / "triton_python_backend_stub",
    )
    for path in (install.server, install.libs, install.python_backend, install.stub):
        if not path.exists():
            raise BackendError(f"Triton in {env} is incomplete ({path} is missing): {SETUP_HINT}")
    return install


def free_port() -> int:
    """A TCP port on 127.0.0.1 that the OS says is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TritonServer:
    """One tritonserver process on loopback over ``repository`` (models loaded on request)."""

    def __init__(
        self,
        repository: Path,
        progress: Callable[[str], None] = lambda _: None,
        install: TritonInstall | None = None,
        temporary: tuple[Path, ...] = (),
    ) -> None:
        """``temporary``: folders of the caller's (its model repository) that go with the
        workspace if BatchScope dies (the reaper removes them); the caller removes them on
        a stop."""
        self.install = install or find_triton()
        self.repository = repository
        self._temporary = temporary
        self.workspace = Path(tempfile.mkdtemp(prefix="batchscope-triton-"))
        self.reaper: Reaper | None = None
        self.process: subprocess.Popen | None = None
        try:
            self._start(progress)
        except BaseException:
            self.close()
            raise

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _start(self, progress: Callable[[str], None]) -> None:
        backends = self.workspace / "backends" / "python"
        backends.mkdir(parents=True)
        for item in self.install.python_backend.iterdir():
            if item.is_file():
                (backends / item.name).symlink_to(item)
        (backends / "triton_python_backend_stub").symlink_to(self.install.stub)
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        env["LD_LIBRARY_PATH"] = ":".join(
            p for p in (str(self.install.libs), os.environ.get("LD_LIBRARY_PATH", "")) if p
        )
        # the Python backend's processes take Python from PATH: the Triton environment's
        env["PATH"] = f"{self.install.env / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
        env["VIRTUAL_ENV"] = str(self.install.env)
        self.log_path = self.workspace / "tritonserver.log"
        command = [
            str(self.install.server),
            f"--model-repository={self.repository}",
            f"--backend-directory={self.workspace / 'backends'}",
            "--model-control-mode=explicit",
            "--disable-auto-complete-config",
            "--allow-http=false",
            "--allow-metrics=false",
            "--allow-grpc=true",
            "--grpc-address=127.0.0.1",
            f"--grpc-port={self.port}",
            "--exit-timeout-secs=5",
        ]
        progress(f"starting Triton on {self.url}…")
        t0 = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.reaper = Reaper()
        for folder in (self.workspace, *self._temporary):  # left by a BatchScope killed
            self.reaper.remove(folder)
        self.watch()
        self._wait_live(t0)
        self.start_s = time.monotonic() - t0

    def _wait_live(self, t0: float) -> None:
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(self.url)
        try:
            while True:
                assert self.process is not None
                code = self.process.poll()
                if code is not None:
                    raise BackendError(f"Triton did not start (exit {code}): {self.log_tail()}")
                with contextlib.suppress(Exception):
                    if client.is_server_live():
                        self.version = str(client.get_server_metadata().version)
                        return
                if time.monotonic() - t0 > START_TIMEOUT_S:
                    raise BackendError(
                        f"Triton did not answer on {self.url} within {START_TIMEOUT_S:.0f} s: "
                        f"{self.log_tail()}"
                    )
                time.sleep(0.1)
        finally:
            client.close()

    def log_tail(self, lines: int = LOG_LINES) -> str:
        """The server log's last error lines (else last lines), joined: for messages."""
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "no log"
        errors = [line for line in text if line.startswith("E")]
        picked = (errors or [line for line in text if line.strip()])[-lines:]
        return " | ".join(line.strip()[:300] for line in picked) or "the log is empty"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def processes(self) -> set[int]:
        """The server and the processes below it (the Python backend's, one per model
        instance)."""
        if self.process is None or self.process.poll() is not None:
            return set()
        return {self.process.pid} | descendants(self.process.pid)

    def watch(self) -> None:
        """Hand the server's processes, as they are now, to the reaper."""
        if self.reaper is not None:
            self.reaper.watch(self.processes())

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def close(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after STOP_TIMEOUT_S), let the reaper take
        what is left, remove the workspace. Idempotent."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            t0 = time.monotonic()
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                process.wait()
            self.stop_s = time.monotonic() - t0
        if self.reaper is not None:
            self.reaper.close()
            self.reaper = None
        shutil.rmtree(self.workspace, ignore_errors=True)
