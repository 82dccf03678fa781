"""Are the sweep's verdicts right on real processes?  False alarms, power and cost, as the sweep decides them.

Every comparison here is made by perftune's own ``Sweep`` (``perftune.engine.sweep``): the R C1 R C2 R ... rounds,
the racing "C R" rounds for open comparisons, the pooled noise, Pocock's boundary, Benjamini-Hochberg across the
sweep's candidates, the verdict precedence.  Only the candidates are made here, because no knob is a known A/A:

* **A/A**: a candidate that *is* the baseline configuration under another name (its own trial id, so its processes
  are its own; its first process is profiled like every candidate's).  Each sweep races ``--aa-candidates`` of them
  against the baseline; ``kept`` or ``slower`` is a false alarm.  Run on the idle machine, then again with a
  background process keeping one core busy for ``--busy-on`` seconds out of every ``--busy-on + --busy-off``.
* **Power**: the data-bound quickstart workload (mlp, ``preprocess_ms`` 0.5: a per-sample sleep in the dataset map,
  1 worker, so the step waits for its batch) against the same with ``preprocess_ms`` raised by 5% and 10%.  Their
  true ratios are first measured with long processes (``--truth-rounds`` interleaved rounds, 4x the windows); each
  of ``--power-sweeps`` sweeps then races both.  Found: ``slower`` (the right sign); wrong: ``kept``.
* **Cost**: from every process above, the share of a repeat process's wall time that is not timed windows, and
  the processes per comparison.

The accuracy gate is loosened in the power plan (``accuracy.rel_tolerance`` 1000): the changes are real and cost
accuracy nothing, but the gate is not what is measured here.  Run from the repository root (at the defaults about
85 minutes on two cores: 25 per A/A condition, 6 for the true ratios, 2-3 per power sweep)::

    .venv/bin/python experiments/benchmarks/verdicts.py
    .venv/bin/python experiments/benchmarks/verdicts.py --phases truth,power --sizes 25,100 --power-sweeps 4

The figures come last, with the load average; exit status 2 when a sweep could not be made.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Optional

from harness import EXIT_CANNOT_MEASURE, CannotMeasure, fixed_cost, loadavg, log, make_plan, out_dir

from perftune.engine.blocked import process_run
from perftune.engine.sequential import blocks
from perftune.engine.specs import make_spec
from perftune.engine.sweep import Sweep
from perftune.io.files import read_sweep
from perftune.io.records import TrialResult, TrialSpec
from perftune.io.sweep_records import SweepResult
from perftune.runner import run_trial

#: the compute-bound plan of the A/A sweeps: the mlp defaults (0.4 M parameters), graph mode, batch 32
#: (the accuracy gate is not what is measured here: a fixed short window and no seed runs)
AA_PLAN = {"workload": "mlp", "device": "CPU", "seed": 0, "baseline": {"batch_size": 32, "mode": "graph"},
           "accuracy": {"samples": 256, "seeds": 1}}
#: the data-bound plan of the power sweeps: the quickstart's workload, graph mode
POWER_PLAN = {"workload": "mlp", "workload_params": {"preprocess_ms": 0.5}, "device": "CPU", "seed": 0,
              "baseline": {"batch_size": 32, "mode": "graph", "num_parallel_workers": 1, "prefetch_size": 2},
              "accuracy": {"rel_tolerance": 1000, "samples": 256, "seeds": 1}}
PLANS = {"compute": AA_PLAN, "data": POWER_PLAN}


class CandidateSweep(Sweep):
    """The sweep's singles phase over made-up candidates: ``variants`` maps a name to workload_params to overlay on
    the plan's (None: the baseline itself, an A/A candidate).  Stacking and leave-one-out are not run."""

    def __init__(self, plan, out: Path, variants: dict[str, Optional[dict]]):
        super().__init__(plan, out, run_trial, fresh=not RESUME)
        self.variants = variants
        self.procs.spec = self._spec  # a configuration's trial, for every process spec: the variants' workload_params

    def singles(self) -> list[dict[str, Any]]:
        return [{"variant": name} for name in self.variants]

    def _spec(self, changes: dict[str, Any], replicate: int = 0, windows: Optional[int] = None) -> TrialSpec:
        if not changes:
            return make_spec(self.plan, {}, "baseline", replicate, self.store.cache_dir, windows)
        name = changes["variant"]
        overlay = self.variants[name]
        plan = self.plan
        if overlay is not None:
            plan = plan.model_copy(update={"workload_params": {**plan.workload_params, **overlay}})
        spec = make_spec(plan, {}, f"variant={name}", replicate, self.store.cache_dir, windows)
        if overlay is None:  # the baseline's spec under its own id: its processes are not the baseline's
            spec = spec.model_copy(update={"trial_id": hashlib.sha256(
                f"{spec.trial_id}/{name}".encode()).hexdigest()[:12]})
        return spec

    def stack(self, single_trials) -> None:
        pass

    def leave_one_out(self) -> None:
        pass


class BusyCycle:
    """A background process keeping one core busy ``on`` seconds out of every ``on + off`` (None: never)."""

    def __init__(self, on: float, off: float):
        self.on, self.off = on, off
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._cycle, daemon=True)

    def _cycle(self) -> None:
        while not self.stop.is_set():
            busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            try:
                self.stop.wait(self.on)
            finally:
                busy.kill()
                busy.wait()
            self.stop.wait(self.off)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


#: ``--resume``: sweeps reuse the finished processes in their folders (a rerun with a changed decision rule measures
#: only what the new rule asks for), instead of starting over
RESUME = False


def sweep(plan_fields: dict, out: Path, variants: dict[str, Optional[dict]]) -> SweepResult:
    plan = make_plan(**plan_fields)
    result = CandidateSweep(plan, out, variants).run()
    bad = [t for t in result.trials if t.result.status != "ok"]
    if bad:
        raise CannotMeasure(f"{out}: {bad[0].label}: {bad[0].result.status}: {bad[0].result.reason}")
    return result


def singles(result: SweepResult) -> list:
    return [t for t in result.trials if t.kind == "single" and t.replicate == 0]


def describe(t) -> str:
    c = t.vs_baseline
    if c is None:
        return f"{t.label}: {t.verdict} (no comparison)"
    return (f"{t.label}: {t.verdict} x{c.ratio:.3f} [{c.ci_low:.3f}, {c.ci_high:.3f}] after {c.processes} run(s), "
            f"noise {c.noise_sd:.1%}, {c.contended} contended")


def aa_phase(name: str, sweeps: int, candidates: int, work: Path, busy: Optional[tuple[float, float]],
             plan: dict) -> None:
    for s in range(sweeps):
        variants = {f"aa{k + 1}": None for k in range(candidates)}
        started = time.perf_counter()
        if busy:
            with BusyCycle(*busy):
                result = sweep(plan, work / name / f"sweep{s}", variants)
        else:
            result = sweep(plan, work / name / f"sweep{s}", variants)
        for t in singles(result):
            log(f"{name} sweep {s + 1}/{sweeps}: {describe(t)}")
        log(f"{name} sweep {s + 1}/{sweeps}: {len(result.trials)} processes in {time.perf_counter() - started:.0f} s, "
            f"load {loadavg()}")


def truth(work: Path, rounds: int, sizes: list[float]) -> None:
    """The power changes' true throughput ratios: long processes (4x the windows), base and each size interleaved."""
    plan = make_plan(**{**POWER_PLAN, "burst": {"repeats": 12}})
    rates: dict[float, list[float]] = {0.0: [], **{s: [] for s in sizes}}
    for r in range(rounds):
        order = [0.0] + (sizes if r % 2 == 0 else sizes[::-1])
        for size in order:
            p = plan.model_copy(update={"workload_params": {"preprocess_ms": 0.5 * (1 + size / 100)}})
            spec = make_spec(p, {}, f"truth {size:g}%", replicate=1 + r)
            res = run_trial(spec, work / "truth" / f"r{r}_{size:g}")
            if res.status != "ok":
                raise CannotMeasure(f"truth run {size:g}%: {res.status}: {res.reason}")
            rates[size].append(res.samples_per_s)
        log(f"truth round {r + 1}/{rounds}: " + ", ".join(f"{s:g}%: {rates[s][-1]:.0f}/s" for s in rates)
            + f", load {loadavg()}")


def repeat_cost(work: Path) -> tuple[float, float, int]:
    """Median fixed share (wall time less timed windows) of the sweeps' repeat processes and first processes, from
    their trial.json (the sweep's own records drop the per-step rows)."""
    rep, first = [], []
    for path in work.glob("*/sweep*/trials/*/trial.json"):
        result = TrialResult.model_validate_json(path.read_text())
        spec = TrialSpec.model_validate_json((path.parent / "spec.json").read_text())
        cost = fixed_cost(result)
        if result.status == "ok" and cost["wall_s"] > 0 and spec.pair is None:  # paired ones: paired_figures
            (rep if spec.replicate > 0 else first).append(cost["fixed_share"])
    return statistics.median(rep), statistics.median(first), len(rep)


def sweeps_in(folder: Path) -> list[SweepResult]:
    found = [read_sweep(d) for d in sorted(folder.glob("sweep*")) if (d / "results.json").is_file()]
    return [r for r in found if r.status == "complete"]  # a sweep still running (or interrupted) is left out


def agreement(name: str, results: list[SweepResult]) -> None:
    """Do fresh processes and paired ones measure the same change?  Per candidate: the geometric mean over the
    sweeps of its fresh processes against the baseline processes on either side (the sweep's own blocks,
    ``sequential.blocks``), and of its paired blocks."""
    fresh: dict[str, list[float]] = {}
    paired: dict[str, list[float]] = {}
    for r in results:
        runs = [process_run(t.label, t.result) for t in r.trials if t.result.status == "ok" and t.result.windows]
        for label in {run.config for run in runs} - {"baseline"}:
            fresh.setdefault(label, []).extend(b.difference for b in blocks(runs, label, "baseline"))
        for p in r.paired:
            if p.status == "ok" and p.differences and p.reference != p.candidate:
                paired.setdefault(p.candidate.lstrip("+"), []).extend(p.differences)
    for label in sorted(set(fresh) & set(paired)):
        f, q = fresh[label], paired[label]
        se_f = statistics.stdev(f) / math.sqrt(len(f)) if len(f) > 1 else float("nan")
        se_q = statistics.stdev(q) / math.sqrt(len(q)) if len(q) > 1 else float("nan")
        print(f"{name}: {label}: fresh processes x{math.exp(statistics.mean(f)):.3f} (+-{1.96 * se_f:.1%}, "
              f"{len(f)} processes) vs paired x{math.exp(statistics.mean(q)):.3f} (+-{1.96 * se_q:.1%}, {len(q)} "
              "blocks)")


def paired_figures(name: str, results: list[SweepResult]) -> None:
    """The paired design's figures: its A/A checks, the variance components, what a paired process and a decided
    comparison cost."""
    if not results:
        return
    checks = [r.aa_paired for r in results if r.aa_paired is not None]
    if checks:
        alarms = sum(c.verdict in ("faster", "slower") for c in checks)
        print(f"{name}: paired A/A checks (2 processes, both arm orders): {alarms} of {len(checks)} faster or "
              f"slower; half-widths {min(c.resolution for c in checks):.1%}-{max(c.resolution for c in checks):.1%} "
              f"(median {statistics.median(c.resolution for c in checks):.1%})")
    comps = [t.vs_baseline for r in results for t in singles(r) if t.vs_baseline is not None]
    paired = [c for c in comps if c.design == "paired"]
    if paired:
        print(f"{name}: variance components: between processes (fresh, pooled) "
              f"{statistics.median(r.noise_sd for r in results):.1%}; paired block within a process "
              f"{statistics.median(c.block_sd for c in paired):.1%}; paired ratio between processes (with its prior) "
              f"{statistics.median(c.process_sd for c in paired):.1%}; {len(paired)} of {len(comps)} comparisons "
              "decided by paired processes")
    procs = [p for r in results for p in r.paired if p.status == "ok" and p.wall_s]
    if procs:
        print(f"{name}: paired processes: timed share of wall time median "
              f"{statistics.median(p.timed_s / p.wall_s for p in procs):.0%} over {len(procs)} (wall median "
              f"{statistics.median(p.wall_s for p in procs):.1f} s)")
    agreement(name, results)
    decided = [c for c in comps if c.verdict != "undecided"]
    wall = sum((t.result.wall_s or 0) for r in results for t in r.trials) + \
        sum((p.wall_s or 0) for r in results for p in r.paired)
    print(f"{name}: {len(decided)} of {len(comps)} comparisons decided; process wall time per decided comparison "
          f"{wall / max(1, len(decided)):.0f} s ({wall:.0f} s of processes, sweeps' wall "
          f"{sum(r.wall_s or 0 for r in results):.0f} s)")


def summarize(work: Path, args) -> None:
    """The figures, from every sweep folder under ``work`` (so phases run separately are summarised together)."""
    for name, what in (("aa-idle", "idle"), ("aa-busy", f"one core busy {args.busy_on:g} s of every "
                                                          f"{args.busy_on + args.busy_off:g} s")):
        results = sweeps_in(work / name)
        trials = [t for r in results for t in singles(r)]
        if not trials:
            continue
        verdicts = [t.verdict for t in trials]
        raw = [t.vs_baseline.verdict if t.vs_baseline else "none" for t in trials]
        runs = [t.vs_baseline.processes for t in trials if t.vs_baseline]
        processes = [t for r in results for t in r.trials]
        contended = sum(bool(t.result.contended_windows) for t in processes)
        alarms = sum(v in ("kept", "slower") for v in verdicts)
        print(f"A/A ({what}): {alarms} of {len(trials)} called faster or slower (target <= 1 in 20); verdicts "
              f"{dict(Counter(verdicts))}; before Benjamini-Hochberg {dict(Counter(raw))}; processes per comparison "
              f"median {statistics.median(runs):g}; {contended} of {len(processes)} processes had contended windows; "
              f"sweep noise {min(r.noise_sd for r in results):.1%}-{max(r.noise_sd for r in results):.1%}; "
              f"{len(processes)} processes in {sum(r.wall_s or 0 for r in results):.0f} s")
    rates: dict[float, list[float]] = {}
    for path in (work / "truth").glob("r*_*/trial.json"):
        result = TrialResult.model_validate_json(path.read_text())
        if result.status == "ok":
            rates.setdefault(float(path.parent.name.split("_", 1)[1]), []).append(result.samples_per_s)
    if 0.0 in rates:
        base = statistics.geometric_mean(rates[0.0])
        print("true ratios (processes of 4x the windows, interleaved): " + ", ".join(
            f"+{size:g}% preprocess: throughput x{statistics.geometric_mean(v) / base:.3f} of the base "
            f"({len(v)} processes each)" for size, v in sorted(rates.items()) if size))
    results = sweeps_in(work / "power")
    by_label: dict[str, list] = {}
    for r in results:
        for t in singles(r):
            by_label.setdefault(t.label, []).append(t)
    for label, trials in sorted(by_label.items()):
        if "=aa" in label:  # an A/A candidate in the power sweeps: faster or slower is a false alarm
            alarms = sum(t.verdict in ("kept", "slower") for t in trials)
            print(f"power sweeps' A/A candidates: {alarms} of {len(trials)} called faster or slower; verdicts "
                  f"{dict(Counter(t.verdict for t in trials))}")
            continue
        right = sum(t.verdict == "slower" for t in trials)
        wrong = sum(t.verdict == "kept" for t in trials)
        ratios = [t.vs_baseline.ratio for t in trials if t.vs_baseline]
        runs = [t.vs_baseline.processes for t in trials if t.vs_baseline]
        print(f"power, {label}: slower in {right} of {len(trials)} sweeps, wrong sign {wrong}; verdicts "
              f"{dict(Counter(t.verdict for t in trials))}; ratio median x{statistics.median(ratios):.3f}; "
              f"processes median {statistics.median(runs):g}")
    if results:
        print(f"power sweeps' noise: {min(r.noise_sd for r in results):.1%}-{max(r.noise_sd for r in results):.1%}")
    for name in ("aa-idle", "aa-busy", "power"):
        paired_figures(name, sweeps_in(work / name))
    if list(work.glob("*/sweep*/trials/*/trial.json")):
        rep, first, n = repeat_cost(work)
        print(f"cost: fixed share of a fresh repeat process's wall time (mlp, default burst) median {rep:.0%} over {n} "
              f"(target <= 25%); of a first process {first:.0%}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aa-sweeps", type=int, default=4, help="A/A sweeps per condition (default 4)")
    ap.add_argument("--aa-candidates", type=int, default=5, help="A/A candidates per sweep (default 5)")
    ap.add_argument("--busy-on", type=float, default=20.0, help="busy seconds per cycle in the loaded A/A (20)")
    ap.add_argument("--busy-off", type=float, default=20.0, help="idle seconds per cycle in the loaded A/A (20)")
    ap.add_argument("--power-sweeps", type=int, default=10, help="sweeps of the power phase (default 10)")
    ap.add_argument("--sizes", default="5,10", help="slow-downs of the power phase in percent (default 5,10)")
    ap.add_argument("--truth-rounds", type=int, default=4, help="interleaved rounds of the true ratios (default 4)")
    ap.add_argument("--phases", default="aa,busy,truth,power",
                    help="which phases to run (default all; none: only summarise what --out holds)")
    ap.add_argument("--out", default=None, help="working folder")
    ap.add_argument("--design", choices=("paired", "processes"), default="paired",
                    help="decision.paired: data-pipeline changes in paired processes (default) or fresh ones")
    ap.add_argument("--aa-workload", choices=("data", "compute"), default="data",
                    help="the A/A phases' plan: the data-bound power plan (default) or the compute-bound mlp")
    ap.add_argument("--power-aa", type=int, default=1, help="A/A candidates in each power sweep (default 1)")
    ap.add_argument("--resume", action="store_true",
                    help="reuse the finished processes in the sweep folders (measure only what is missing)")
    args = ap.parse_args(argv)
    global RESUME
    RESUME = args.resume
    work = out_dir("verdicts", args.out)
    phases = set(args.phases.split(","))
    paired = {"decision": {"paired": args.design == "paired"}}
    plan = {**PLANS[args.aa_workload], **paired}
    power_plan = {**POWER_PLAN, **paired}
    sizes = [float(s) for s in args.sizes.split(",")]
    log(f"load before: {loadavg()}; working in {work}")
    started = time.perf_counter()
    try:
        if "aa" in phases:
            aa_phase("aa-idle", args.aa_sweeps, args.aa_candidates, work, None, plan)
        if "busy" in phases:
            # --busy-on 0: no busy cycle of ours (the load is whatever else runs, e.g. another benchmark)
            aa_phase("aa-busy", args.aa_sweeps, args.aa_candidates, work,
                     (args.busy_on, args.busy_off) if args.busy_on > 0 else None, plan)
        if "truth" in phases:
            truth(work, args.truth_rounds, sizes)
        if "power" in phases:
            for s in range(args.power_sweeps):
                variants = {f"slow{size:g}": {"preprocess_ms": 0.5 * (1 + size / 100)} for size in sizes}
                variants.update({f"aa{k + 1}": None for k in range(args.power_aa)})
                result = sweep(power_plan, work / "power" / f"sweep{s}", variants)
                for t in singles(result):
                    log(f"power sweep {s + 1}/{args.power_sweeps}: {describe(t)}")
                log(f"power sweep {s + 1}: {len(result.trials)} processes, load {loadavg()}")
    except CannotMeasure as exc:
        print(f"cannot measure: {exc}", file=sys.stderr)
        return EXIT_CANNOT_MEASURE
    print(f"\n== verdicts on real processes ({time.perf_counter() - started:.0f} s; load after {loadavg()}) ==")
    summarize(work, args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
