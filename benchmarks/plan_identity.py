"""Whether the capacity planner still gives the same answers: its JSON, bit for bit.

A change made for the planner's speed (an early stop, a tighter bound, a faster
simulator core) must not change a single figure of a plan. ``--dump PATH`` writes,
for every case of :data:`CASES`, what ``batchscope plan … --json`` writes (the
plan's ``to_json()``) and, for the cases marked so, the series ``--plot`` draws;
``--check PATH`` plans them again and exits 1 on the first difference (JSON equal
after a round trip: every float compared as its repr).

    PYTHONPATH=app python benchmarks/plan_identity.py --dump BEFORE.json   # before
    PYTHONPATH=app python benchmarks/plan_identity.py --check BEFORE.json  # after
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from typing import Any

from batchscope.config import POLICIES
from batchscope.profiles.profile import load_profile
from batchscope.sim.planner import Budget, plan, series

#: (label, plan keyword arguments, whether the plot's series are compared too)
Case = tuple[str, dict[str, Any], bool]


def cases() -> list[Case]:
    """Every fp16 curve of both profiles (laptop-8gb 512×288 and 256×144, server-24gb
    512×288: it has no other) × p99 30/50/100 ms × min-fps-ratio 0.9/0.95 (every policy),
    then policy subsets, other frame rates, fp32, fewer seeds and shorter runs."""
    out: list[Case] = []
    curves = (("laptop-8gb", (512, 288)), ("laptop-8gb", (256, 144)), ("server-24gb", (512, 288)))
    for (profile, res), p99, ratio in itertools.product(curves, (30.0, 50.0, 100.0), (0.9, 0.95)):
        kw = {"profile": profile, "resolution": res, "fps": 30.0, "p99_ms": p99, "ratio": ratio}
        plot = p99 == 50.0 and ratio == 0.95  # the docs' command: its plot too
        out.append((f"{profile} {res} p99={p99:g} ratio={ratio:g}", kw, plot))
    extra: list[dict[str, Any]] = [
        {"policies": ("oldest", "round-robin"), "p99_ms": 50.0},
        {"policies": ("fixed", "adaptive"), "p99_ms": 30.0, "ratio": 0.9},
        {"policies": ("all", "dynamic"), "p99_ms": 100.0, "resolution": (256, 144)},
        {"policies": ("adaptive",), "p99_ms": 0.09},  # nothing fits: the closest point
        {"policies": ("oldest",), "p99_ms": 20.0, "ratio": 1.0},
        {"fps": 15.0, "p99_ms": 50.0},
        {"fps": 60.0, "p99_ms": 40.0, "resolution": (256, 144)},
        {"fps": 30.0, "p99_ms": 50.0, "seeds": 3, "duration_s": 10.0},
        {"fps": 25.0, "p99_ms": 70.0, "ratio": 0.8, "max_sessions": 12},
        {"profile": "server-24gb", "fps": 20.0, "p99_ms": 45.0, "ratio": 0.9},
        {"fps": 30.0, "p99_ms": 60.0, "precision": "fp32"},
        {"fps": 30.0, "p99_ms": 50.0, "precision": "fp32", "resolution": (256, 144)},
    ]
    for kw in extra:
        kw = {"profile": "laptop-8gb", "resolution": (512, 288), "fps": 30.0, **kw}
        label = " ".join(f"{k}={v}" for k, v in kw.items())
        out.append((label, kw, kw.get("seeds") == 3 or kw.get("policies") == ("oldest",)))
    return out


def run_case(kw: dict[str, Any], plot: bool) -> dict[str, Any]:
    """The plan's JSON (and the plot's series) for one case."""
    kw = dict(kw)
    profile = load_profile(kw.pop("profile"))
    budget = Budget(fps=kw.pop("fps"), p99_ms=kw.pop("p99_ms"), min_fps_ratio=kw.pop("ratio", 0.95))
    result = plan(
        profile,
        kw.pop("precision", "fp16"),
        kw.pop("resolution"),
        budget,
        policies=kw.pop("policies", POLICIES),
        **kw,
    )
    out: dict[str, Any] = {"plan": result.to_json()}
    if plot:
        out["series"] = [
            {
                "policy": s.policy,
                "params": s.params,
                "sessions": list(s.sessions),
                "min_fps": list(s.min_fps),
                "p99_ms": list(s.p99_ms),
                "max_sessions": s.max_sessions,
            }
            for s in series(result, profile)
        ]
    return json.loads(json.dumps(out))


def comparable(before: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
    """``before`` cut to the counts ``now``'s series cover: a dump made while every policy's
    curve went 3 past the largest answer (not its own) holds more counts, the same runs."""
    if "series" not in before or "series" not in now or len(before["series"]) != len(now["series"]):
        return before
    cut = []
    for old, new in zip(before["series"], now["series"], strict=True):
        k = len(new["sessions"])
        cut.append({**old, **{f: old[f][:k] for f in ("sessions", "min_fps", "p99_ms")}})
    return {**before, "series": cut}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--dump", metavar="PATH")
    mode.add_argument("--check", metavar="PATH")
    parser.add_argument("--only", metavar="TEXT", help="only the cases whose label has TEXT")
    args = parser.parse_args(argv)
    todo = [c for c in cases() if args.only is None or args.only in c[0]]
    if args.dump:
        out = {}
        for label, kw, plot in todo:
            t = time.perf_counter()
            out[label] = run_case(kw, plot)
            print(f"{time.perf_counter() - t:6.2f} s  {label}", flush=True)
        with open(args.dump, "w") as fh:
            json.dump(out, fh, indent=1)
        print(f"wrote {len(out)} plans to {args.dump}")
        return 0
    with open(args.check) as fh:
        before = json.load(fh)
    compared = 0
    for label, kw, plot in todo:
        if label not in before:
            print(f"skipped (not in the dump): {label}")
            continue
        t = time.perf_counter()
        now = run_case(kw, plot)
        if now != comparable(before[label], now):
            print(f"DIFFERENT: {label}")
            for key in now:
                if now[key] != before[label].get(key):
                    print(f"  {key}: was {json.dumps(before[label].get(key))[:2000]}")
                    print(f"  {key}: now {json.dumps(now[key])[:2000]}")
            return 1
        compared += 1
        print(f"{time.perf_counter() - t:6.2f} s  same: {label}", flush=True)
    print(f"all {compared} plans identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
