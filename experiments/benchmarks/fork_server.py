"""Whether a fork server pays here (issue 38, item 6): a configuration's repeat processes started as the sweep starts
them (``perftune.runner.run_trial``: a fresh ``python -m perftune.burst``) against the same processes forked from a
server that imported MindSpore and perftune's burst once.

The server imports ``mindspore``, ``mindspore.dataset``, ``perftune.burst.main`` and the built-in workloads, reports
how long that took and which threads it has at that point (a fork copies only the forking thread: any other thread's
locks are copied in whatever state they were in), then forks one child per request; the child starts a session of
its own, enters the trial folder, sends its output to ``burst.log`` and runs ``perftune.burst.main.main`` exactly as
``python -m perftune.burst`` would.  For each plan (its baseline) and round: the first process (fresh), then
repeats in ABBA order (fresh, forked, forked, fresh), each with the configuration's compile cache where the sweep
would give it one (``perftune.engine.graph_cache``).  Prints per plan and start: the median wall time, the share in
timed windows, the samples/s over the round's first process, and whether every process reproduced the first loss
of the first process, with the load average before and after.

    .venv/bin/python experiments/benchmarks/fork_server.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perftune.engine import graph_cache
from perftune.engine.plan_load import load_plan
from perftune.engine.specs import make_spec
from perftune.io.files import SPEC_NAME, read_trial
from perftune.io.store import write_json_atomic
from perftune.runner import run_trial
from perftune.runner.process import burst_env

ROOT = Path(__file__).resolve().parents[2]
PLANS = ("experiments/quickstart.yaml", "experiments/tiny_gpt.yaml")

SERVER = r"""
import json, os, sys, time
started = time.perf_counter()
import mindspore, mindspore.dataset
import perftune.burst.main as burst_main
import perftune.workloads.mlp, perftune.workloads.tiny_gpt
tasks = os.listdir("/proc/self/task")
names = sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in tasks)
print(json.dumps({"import_s": time.perf_counter() - started, "threads": names}), flush=True)
for line in sys.stdin:
    trial_dir = line.strip()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.chdir(trial_dir)
            fd = os.open(os.path.join(trial_dir, "burst.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            burst_main.main([trial_dir])  # ends the process itself (burst.main.leave)
        finally:
            os._exit(9)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"rc": os.waitstatus_to_exitcode(status), "wall_s": time.perf_counter() - t0}), flush=True)
"""


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def figures(trial_dir: Path, wall_s: float) -> dict:
    r = read_trial(trial_dir)
    if r.status != "ok":
        raise SystemExit(f"{trial_dir}: {r.status}: {r.reason}")
    return {"wall_s": wall_s, "timed_s": sum(w.total_ms for w in r.windows) / 1e3, "sps": r.samples_per_s,
            "first_loss": r.first_loss, "compile_ms": r.compile_ms, "windows": len(r.windows)}


def spec_for(plan_path: str, replicate: int, cache: Path, first: Path | None):
    spec = make_spec(load_plan(plan_path), {}, "baseline", replicate, cache)
    return graph_cache.with_cache(spec, read_trial(first) if first else None)


def fresh(spec, trial_dir: Path) -> dict:
    t0 = time.perf_counter()
    run_trial(spec, trial_dir)
    return figures(trial_dir, time.perf_counter() - t0)


def forked(server: subprocess.Popen, spec, trial_dir: Path) -> dict:
    trial_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(trial_dir / SPEC_NAME, spec.model_dump(mode="json"))
    server.stdin.write(f"{trial_dir.resolve()}\n")
    server.stdin.flush()
    reply = json.loads(server.stdout.readline())
    if reply["rc"] != 0:
        raise SystemExit(f"forked burst in {trial_dir} exited {reply['rc']}")
    return figures(trial_dir, reply["wall_s"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", nargs="+", default=list(PLANS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "perftune_bench" / "fork_server")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    before = load()
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=burst_env(), cwd=ROOT)
    ready = json.loads(server.stdout.readline())
    print(f"server: imported in {ready['import_s']:.2f} s; threads at the fork: {len(ready['threads'])} "
          f"({', '.join(ready['threads'])})", flush=True)
    rows = []
    try:
        for plan in args.plans:
            for rnd in range(args.rounds):
                folder = args.out / Path(plan).stem / f"round{rnd}"
                cache = (folder / "cache").resolve()
                first = fresh(spec_for(plan, 0, cache, None), folder / "p0")
                for rep, how in enumerate(("fresh", "forked", "forked", "fresh"), start=1):
                    spec = spec_for(plan, rep, cache, folder / "p0")
                    row = fresh(spec, folder / f"p{rep}") if how == "fresh" else forked(server, spec,
                                                                                        folder / f"p{rep}")
                    rows.append({**row, "plan": plan, "how": how, "ratio": row["sps"] / first["sps"],
                                 "same_loss": row["first_loss"] == first["first_loss"]})
                print(f"{Path(plan).stem} round {rnd}: " + ", ".join(
                    f"{r['how']} {r['wall_s']:.1f} s" for r in rows[-4:]) + f" (load {load()})", flush=True)
    finally:
        server.stdin.close()
        server.wait(timeout=60)
    (args.out / "rows.json").write_text(json.dumps(rows, indent=1))
    print(f"\nfork_server: load average before {before}, after {load()}")
    for plan in args.plans:
        for how in ("fresh", "forked"):
            k = [r for r in rows if r["plan"] == plan and r["how"] == how]
            wall = statistics.median(r["wall_s"] for r in k)
            print(f"  {Path(plan).stem:<11} {how:<6} n={len(k)} wall {wall:.2f} s, "
                  f"timed {statistics.median(r['timed_s'] / r['wall_s'] for r in k):.0%}, "
                  f"compile {statistics.median(r['compile_ms'] for r in k):.0f} ms, "
                  f"throughput over the first process x{statistics.median(r['ratio'] for r in k):.3f}, "
                  f"first loss reproduced {sum(r['same_loss'] for r in k)} of {len(k)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
