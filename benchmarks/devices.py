"""Several devices: the simulator's speed, the planner's fewest-devices answer, routers, live.

Eight tables, each measured in this one run:

1. **Speed**: 30 s of ``--devices`` devices × ``--per-device`` sessions (server-24gb,
   512x288 fp16, 30 fps) for each policy, best of 3: wall seconds, simulated seconds
   per wall second, and the same × devices ("per device"), after one untimed run (numba's
   compile, or its cache's load); beside it the same run in the loop's Python form (what
   plays without numba: ``play_devices(python=True)``) and the one-device simulator on one
   device's share of the sessions, for the ratios.
2. **Fewest devices**: ``plan --sessions S`` (server-24gb, p99 ≤ 100 ms, 8 seeds × 30 s)
   for S = 200 and 256: devices, router, wall seconds (the one-device plan included).
3. **Routers** on uneven devices and counts: pinned vs least-loaded, the slowest
   session's fps (worst of 8 seeds) and the worst p99, for 2 and 4 devices.
4. **Routers** on uneven sessions: one camera bursting at 3x fps, or one stalled, for 10 s
   of 30, on 2 and 4 server-24gb devices each carrying what one carries (5 sessions):
   the slowest *other* session's fps (worst of 8 seeds) and the worst p99.
5. **Routers** on mixed model resolutions: half the sessions at 512x288, half at 256x144
   on 2 and 4 laptop-8gb devices (a batch holds one resolution: sim/devices.py ``Shapes``),
   joining alternately or the far half first: slowest fps (worst of 8 seeds), worst p99.
6. **Live vs simulated**: BatchScope's own worker on 2 and 3 emulated devices (laptop-8gb,
   256x144 fp16, 20 s after 2 s), pinned and least-loaded, beside the simulator on the
   same config and seed: served / simulated for throughput, slowest fps, p50 and p99, and
   each device's busy share live and simulated.
7. **MIG slices vs the whole GPU** (emulated slices, ``NAME@Kg``: scaled by an assumption,
   ``profiles/profile.py``'s ``mig_slice``): the whole device, 2 x 3g, 3 x 2g and 7 x 1g
   of laptop-8gb at 256x144 (p99 <= 50 ms) and server-24gb at 512x288 (p99 <= 100 ms):
   each layout's most sessions with its own plan's setting, and the whole device's most
   sessions played on it with that setting (least-loaded; the worst of 8 seeds' slowest
   session, p50 and p99).
8. **The compiled loop's compile** (numba): a process with an empty cache, then one with
   the cache the first left: the import, the first 4 x 64 run (compile or load) and the
   second.

    PYTHONPATH=app python benchmarks/devices.py [--devices 4] [--per-device 64]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from batchscope.config import RunConfig
from batchscope.profiles.profile import load_profile
from batchscope.sim.devices import (
    Pace,
    devices_report,
    load_devices,
    mixed_shapes,
    play_devices,
    simulate_devices,
)
from batchscope.sim.planner import Budget, plan
from batchscope.sim.planner.devices import fewest_devices
from batchscope.sim.simulator import simulate

SERVER = dict(backend="emulated", profile="server-24gb", precision="fp16", resolution=(512, 288))
POLICIES = [
    ("oldest", {}),
    ("all", {"max_batch": 8}),
    ("dynamic", {"max_batch": 4, "max_delay_ms": 5.0}),
    ("adaptive", {"slo_ms": 50.0}),
]
#: the speed table's: every built-in policy
EVERY_POLICY = [*POLICIES, ("round-robin", {}), ("fixed", {"batch": 4, "max_delay_ms": 10.0})]


def best_of(k: int, fn, *args) -> float:
    times = []
    for _ in range(k):
        t = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t)
    return min(times)


def speed(devices: int, per_device: int) -> None:
    print(f"## speed: {devices} devices x {per_device} sessions, 30 s simulated (best of 3)")
    print(
        "| policy | router | wall s | sim/wall | x devices | Python form: wall s, x devices "
        "| one device, its share: wall s |"
    )
    print("|---|---|---|---|---|---|---|")
    on = load_devices(["server-24gb"] * devices)
    for policy, knobs in EVERY_POLICY:
        config = RunConfig(
            sessions=devices * per_device, policy=policy, duration_s=30.0, **SERVER, **knobs
        )
        share = config.with_changes(sessions=per_device)
        alone = best_of(3, simulate, share)
        for router in ("pinned", "least-loaded"):
            simulate_devices(config, on, router)  # numba's compile (or its cache's load) apart
            wall = best_of(3, simulate_devices, config, on, router)
            python = best_of(3, python_form, config, on, router)
            print(
                f"| {policy} | {router} | {wall:.3f} | {31 / wall:.0f}x | "
                f"{devices * 31 / wall:.0f}x | {python:.3f}, {devices * 31 / python:.0f}x | "
                f"{alone:.3f} ({31 / alone:.0f}x) |"
            )


def python_form(config: RunConfig, on: list, router: str) -> None:
    """``simulate_devices`` in the loop's Python form (what plays without numba)."""
    curves = [d.curve(config) for d in on]
    played = play_devices(config, curves, router, 1.0, python=True)
    devices_report(played, config, on, router, 1.0)


def fewest() -> None:
    print("\n## fewest devices: server-24gb 512x288 fp16, 30 fps, p99 <= 100 ms, 8 seeds x 30 s")
    print("| sessions | devices | router | setting | slowest fps | p99 ms | wall s | processes |")
    print("|---|---|---|---|---|---|---|---|")
    profile = load_profile("server-24gb")
    cores = len(os.sched_getaffinity(0))  # as plan --sessions plays least-loaded's seeds
    for sessions in (200, 256):
        for workers in sorted({1, cores}):
            t = time.perf_counter()
            result = plan(profile, "fp16", (512, 288), Budget(30.0, 100.0))
            answer = fewest_devices(result, profile, sessions, workers=workers)
            wall = time.perf_counter() - t
            rec = result.recommended
            assert answer is not None
            print(
                f"| {sessions} | {answer.devices} | {answer.router} | {rec.policy} {rec.params}"
                f" | {answer.min_fps_worst:.1f} | {answer.p99_worst:.1f} | {wall:.1f} "
                f"| {workers} |"
            )


def worst_over_seeds(sessions: int, policy: str, knobs: dict, report_of) -> str:
    """'slowest fps / p99' on the worst of 8 seeds; ``report_of(config)`` -> (fps, report)."""
    worst_fps, worst_p99 = 1e9, 0.0
    for seed in range(8):
        config = RunConfig(
            sessions=sessions, policy=policy, duration_s=30.0, seed=seed, **SERVER, **knobs
        )
        fps, report = report_of(config)
        worst_fps = min(worst_fps, fps)
        worst_p99 = max(worst_p99, report["overall"]["latency_ms"]["p99"])
    return f"{worst_fps:.1f} / {worst_p99:.1f}"


def routers() -> None:
    print("\n## routers: slowest session fps (worst of 8 seeds) / worst p99 ms, 30 s")
    print("| devices | sessions | policy | pinned | least-loaded |")
    print("|---|---|---|---|---|")
    cases = [
        (["laptop-8gb", "server-24gb"], 8),
        (["laptop-8gb", "server-24gb"], 12),
        (["laptop-8gb", "laptop-8gb", "server-24gb", "server-24gb"], 16),
        (["laptop-8gb", "laptop-8gb", "server-24gb", "server-24gb"], 24),
        (["server-24gb"] * 2, 11),
        (["server-24gb"] * 4, 21),
    ]
    for names, sessions in cases:
        on = load_devices(names)
        for policy, knobs in POLICIES[1:3]:
            cells = []
            for router in ("pinned", "least-loaded"):

                def report_of(
                    config: RunConfig, router: str = router, on: list = on
                ) -> tuple[float, dict]:
                    report = simulate_devices(config, on, router)
                    return report["overall"]["min_fps"], report

                cells.append(worst_over_seeds(sessions, policy, knobs, report_of))
            label = " + ".join(n.replace("-8gb", "").replace("-24gb", "") for n in names)
            print(f"| {label} | {sessions} | {policy} {knobs} | {cells[0]} | {cells[1]} |")


def uneven_sessions() -> None:
    print("\n## routers, uneven sessions: slowest other session fps (worst of 8 seeds) / worst p99")
    print("| devices | sessions | what | policy | pinned | least-loaded |")
    print("|---|---|---|---|---|---|")
    faults = {
        "session 0 bursts 3x, 10-20 s": (Pace(10.0, 0, 3.0), Pace(20.0, 0, 1.0)),
        "session 0 stalls, 10-20 s": (Pace(10.0, 0, 0.0), Pace(20.0, 0, 1.0)),
    }
    for n in (2, 4):
        on = load_devices(["server-24gb"] * n)
        for what, paces in faults.items():
            for policy, knobs in POLICIES[1:3]:
                cells = []
                for router in ("pinned", "least-loaded"):

                    def report_of(
                        config: RunConfig, router: str = router, paces: tuple = paces, on: list = on
                    ) -> tuple[float, dict]:
                        curves = [d.curve(config) for d in on]
                        played = play_devices(config, curves, router, 1.0, paces)
                        report = devices_report(played, config, on, router, 1.0)
                        return min(x["fps"] for x in report["sessions"][1:]), report

                    cells.append(worst_over_seeds(5 * n, policy, knobs, report_of))
                print(f"| {n} | {5 * n} | {what} | {policy} {knobs} | {cells[0]} | {cells[1]} |")


def mixed_resolutions(counts: dict[int, list[int]] | None = None) -> None:
    """Sessions at two model resolutions (far cameras at 512x288, near ones at 256x144),
    half each, on laptop-8gb devices; a batch holds one resolution (sim/devices.py Shapes).
    Two orders of joining: alternating (pinned, dealing by id, puts every far camera on
    the even devices) and the far half first (pinned deals both halves evenly)."""
    counts = counts or {2: [8, 10], 4: [16, 20]}
    print("\n## routers, mixed resolutions: half the sessions 512x288, half 256x144, "
          "laptop-8gb fp16; slowest fps (worst of 8 seeds) / worst p99 ms, 30 s")  # fmt: skip
    print("| devices | sessions | order | policy | pinned | least-loaded |")
    print("|---|---|---|---|---|---|")
    for n, sessions_list in counts.items():
        on = load_devices(["laptop-8gb"] * n)
        for sessions in sessions_list:
            orders = {
                "alternating": [(512, 288) if s % 2 == 0 else (256, 144) for s in range(sessions)],
                "far half first": [
                    (512, 288) if s < sessions // 2 else (256, 144) for s in range(sessions)
                ],
            }
            for order, resolutions in orders.items():
                for policy, knobs in POLICIES[1:3]:
                    cells = []
                    for router in ("pinned", "least-loaded"):
                        worst_fps, worst_p99 = 1e9, 0.0
                        for seed in range(8):
                            config = RunConfig(
                                sessions=sessions, policy=policy, duration_s=30.0, seed=seed,
                                backend="emulated", profile="laptop-8gb", precision="fp16",
                                resolution=(512, 288), **knobs,
                            )  # fmt: skip
                            shapes = mixed_shapes(config, on, resolutions)
                            curves = [d.curve(config) for d in on]
                            played = play_devices(config, curves, router, 1.0, shapes=shapes)
                            o = devices_report(played, config, on, router, 1.0, shapes)["overall"]
                            worst_fps = min(worst_fps, o["min_fps"])
                            worst_p99 = max(worst_p99, o["latency_ms"]["p99"])
                        cells.append(f"{worst_fps:.1f} / {worst_p99:.1f}")
                    print(f"| {n} | {sessions} | {order} | {policy} {knobs} "
                          f"| {cells[0]} | {cells[1]} |")  # fmt: skip


def live_vs_simulated() -> None:
    from batchscope.engine.engine import Engine

    print("## live (BatchScope's worker) vs simulated, laptop-8gb 256x144, 20 s after 2 s")
    print("| devices | sessions | policy | router | thru w/s live / sim | slowest fps live / sim "
          "| p50 ms live / sim | p99 ms live / sim | busy % per device live / sim |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for devices, sessions in ((2, 24), (3, 36)):
        for policy, knobs in (("all", {}), ("dynamic", {"max_batch": 4, "max_delay_ms": 5.0})):
            for router in ("pinned", "least-loaded"):
                config = RunConfig(
                    sources=("synthetic",), backend="emulated", profile="laptop-8gb",
                    precision="fp16", resolution=(256, 144), sessions=sessions, policy=policy,
                    devices=devices, router=router, duration_s=20.0, **knobs,
                )  # fmt: skip
                engine = Engine(config)
                engine.open()
                engine.start()
                try:
                    time.sleep(2.0)
                    engine.reset_stats(announce=False)
                    time.sleep(20.0)
                    live = engine.report()
                finally:
                    engine.stop()
                on = load_devices(["laptop-8gb"] * devices)
                sim = simulate_devices(config, on, router, 2.0)
                lo, so = live["overall"], sim["overall"]
                busy = " ".join(
                    f"{100 * a['busy']:.0f}/{100 * b['busy']:.0f}"
                    for a, b in zip(live["devices"], sim["devices"], strict=True)
                )
                print(
                    f"| {devices} | {sessions} | {config.policy_label()} | {router} "
                    f"| {lo['throughput_wps']:.0f} / {so['throughput_wps']:.0f} "
                    f"| {lo['min_fps']:.1f} / {so['min_fps']:.1f} "
                    f"| {lo['latency_ms']['p50']:.1f} / {so['latency_ms']['p50']:.1f} "
                    f"| {lo['latency_ms']['p99']:.1f} / {so['latency_ms']['p99']:.1f} | {busy} |"
                )


def mig() -> None:
    """7 slices vs one whole GPU: each layout's most sessions (its own plan's setting, the
    better router), and the whole device's most sessions played on the slices."""
    from batchscope.config import ConfigError
    from batchscope.sim.planner.devices import sessions_for_devices

    cases = (("laptop-8gb", (256, 144), 50.0), ("server-24gb", (512, 288), 100.0))
    layouts = ((1, None), (2, 3), (3, 2), (7, 1))  # (count, slice size): None the whole
    print("\n## MIG slices (emulated, scaled by assumption) vs the whole GPU, fp16, 8 seeds x 30 s")
    print("| profile | budget | layout | compute | setting | most sessions | router "
          "| the whole's sessions on it: slowest fps / p50 / p99 ms |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for name, resolution, p99 in cases:
        budget = Budget(30.0, p99)
        whole = None
        for count, k in layouts:
            profile = load_profile(name if k is None else f"{name}@{k}g")
            label = "whole" if k is None else f"{count} x {k}g"
            compute = "7/7" if k is None else f"{count * k}/7"
            result = plan(profile, "fp16", resolution, budget)
            setting = result.config().policy_label()
            try:
                answer = sessions_for_devices(
                    result, profile, count, workers=len(os.sched_getaffinity(0))
                )
                row = (setting, str(answer.sessions), answer.router)
            except ConfigError:  # not one session within the budget on one slice
                one = profile.curve("fp16", resolution).ms(1)
                row = ("none", "0", f"- (one window takes {one:.0f} ms on a slice)")
            if k is None:
                whole = int(row[1])
            worst = [1e9, 0.0, 0.0]  # slowest fps, p50, p99 over the seeds
            on = load_devices([profile.name] * count, profile)
            for seed in range(8):
                config = result.config().with_changes(sessions=whole, seed=seed, duration_s=30.0)
                o = simulate_devices(config, on, "least-loaded")["overall"]
                worst[0] = min(worst[0], o["min_fps"])
                worst[1] = max(worst[1], o["latency_ms"]["p50"])
                worst[2] = max(worst[2], o["latency_ms"]["p99"])
            on_it = f"{worst[0]:.1f} / {worst[1]:.1f} / {worst[2]:.1f}"
            print(f"| {name} {resolution[0]}x{resolution[1]} | p99 <= {p99:.0f} ms | {label} "
                  f"| {compute} | {row[0]} | {row[1]} | {row[2]} | {on_it} |")  # fmt: skip


COLD = """
import time
t = time.perf_counter()
from batchscope.config import RunConfig
from batchscope.sim.devices import load_devices, simulate_devices
on = load_devices(["server-24gb"] * 4)
config = RunConfig(sessions=256, policy="all", max_batch=8, duration_s=30.0, backend="emulated",
                   profile="server-24gb", precision="fp16", resolution=(512, 288))
t1 = time.perf_counter()
simulate_devices(config, on, "least-loaded")
t2 = time.perf_counter()
simulate_devices(config, on, "least-loaded")
print(f"| {t1 - t:.2f} | {t2 - t1:.2f} | {time.perf_counter() - t2:.3f} |")
"""


def compile_cost() -> None:
    """numba's compile of the devices' loop: a process with an empty cache, then one
    with the cache the first left (``NUMBA_CACHE_DIR``: a temporary folder, so the
    package's own cache is not touched)."""
    print("\n## the compiled loop's compile: 4 x 64 sessions, all (max 8), least-loaded")
    print("| cache | import s | first simulate s | second s |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        for label in ("empty", "filled"):
            run = subprocess.run(
                [sys.executable, "-c", COLD], env=env, capture_output=True, text=True, check=True
            )
            print(f"| {label} {run.stdout.strip()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--per-device", type=int, default=64)
    parser.add_argument(
        "--only",
        choices=("speed", "fewest", "routers", "uneven", "mixed", "live", "mig", "compile"),
        help="one table only",
    )
    args = parser.parse_args()
    tables = {
        "speed": lambda: speed(args.devices, args.per_device),
        "fewest": fewest,
        "routers": routers,
        "uneven": uneven_sessions,
        "mixed": mixed_resolutions,
        "live": live_vs_simulated,
        "mig": mig,
        "compile": compile_cost,
    }
    for name, table in tables.items():
        if args.only in (None, name):
            table()


if __name__ == "__main__":
    main()
