"""``run --metrics-port PORT``: the run's Prometheus endpoint on 127.0.0.1, for the run's
length (engine/metrics_export.py). The port is taken before anything starts, so a port in
use exits 2 with one line and runs nothing; nothing listens without the flag."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from batchscope.cli.args import CliError
from batchscope.engine.engine import Engine
from batchscope.engine.metrics_export import MetricsPortError, MetricsServer


def add_metrics_flag(parser: Any) -> None:
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve the run's figures as a Prometheus endpoint on "
        "http://127.0.0.1:PORT/metrics while it runs (0: any free port, printed): "
        "per-session latency histogram, fps, delivered, overwritten and expired windows, "
        "batch-size histogram, device busy (docs/USER_GUIDE.md); default: nothing listens",
    )


@contextlib.contextmanager
def metrics_served(args: argparse.Namespace) -> Iterator[None]:
    """While the block runs, ``args.metrics`` is the endpoint (``--metrics-port``) or None;
    stopped, its port freed, when the block ends however it ends."""
    port = getattr(args, "metrics_port", None)
    if port is None:
        args.metrics = None
        yield
        return
    try:
        server = MetricsServer(port)
    except MetricsPortError as exc:
        raise CliError(f"--metrics-port {port}: {exc}") from None
    args.metrics = server
    try:
        yield
    finally:
        server.stop()


def serve_metrics_of(args: argparse.Namespace, engine: Engine) -> None:
    """The endpoint (if any) serves ``engine``'s run, from its first record; its URL on
    stderr (port 0: the one the OS picked)."""
    server = getattr(args, "metrics", None)
    if server is not None:
        server.watch(engine)
        print(f"batchscope: metrics at {server.url}", file=sys.stderr, flush=True)
