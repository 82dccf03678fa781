"""The step time of a custom loop measured unchanged (the loop found by its dataset iterator, issue 39) against the
same script in its three-line form (``perftune.steps`` / ``perftune.loss``): ``experiments/script_workload/
functional_train.py`` and its three-line copy, one fresh burst each, alternated A B B A ... for ``--rounds`` rounds
(each round in both orders), in the script's PyNative mode and in graph mode (the ``@ms.jit`` step).  Prints the
mean step time of each form, their ratio per mode and the load average before and after.

    .venv/bin/python experiments/benchmarks/found_loop.py --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from perftune.engine.plan_load import parse_plan  # noqa: E402
from perftune.engine.specs import make_spec  # noqa: E402
from perftune.runner import run_trial  # noqa: E402

SCRIPT = REPO / "experiments" / "script_workload" / "functional_train.py"
LOOP = ("        for inputs, labels in train_data.create_tuple_iterator():\n"
        "            loss = train_step(inputs, labels)\n")
THREE_LINES = ("        for inputs, labels in perftune.steps(train_data.create_tuple_iterator()):\n"
               "            loss = perftune.loss(train_step(inputs, labels))\n")
BURST = {"warmup_steps": 5, "steps": 60, "repeats": 3, "profile_steps": 0, "timeout_s": 300}


def write_forms(folder: Path) -> dict[str, Path]:
    text = SCRIPT.read_text()
    plain, explicit = folder / "functional_train.py", folder / "three_lines.py"
    plain.write_text(text)
    explicit.write_text(text.replace("import mindspore as ms\n", "import mindspore as ms\nimport perftune\n")
                        .replace(LOOP, THREE_LINES))
    return {"unchanged": plain, "three lines": explicit}


def step_ms(script: Path, mode: str, out: Path) -> float:
    plan = parse_plan({"name": "found-loop", "workload": {
        "script": str(script), "args": ["--epochs", "200", "--samples", "512"],
        "knob_args": {"mode": {"arg": "--mode", "value_map": {"graph": 0, "pynative": 1}},
                      "batch_size": "--batch-size"}},
        "burst": BURST, "accuracy": {"samples": 64, "seeds": 1}, "baseline": {"mode": mode, "batch_size": 32}})
    result = run_trial(make_spec(plan, {}, "baseline"), out)
    if result.status != "ok":
        print(f"{script.name} {mode}: {result.status}: {result.reason}", file=sys.stderr)
        raise SystemExit(2)
    return result.step_ms_mean


def harness_us(route: str, steps: int, out: Path) -> float:
    """Microseconds per step that the route's own code adds around a real ``Meter`` (no training: batches from a
    list, the loss a number), so that the two routes' difference is seen without the between-process noise."""
    import time

    import numpy as np

    from perftune.burst import callback
    from perftune.burst.meter import BurstDone, Meter
    from perftune.burst.script_loop import LoopIterator, LoopState

    plan = parse_plan({"name": "found-loop", "workload": {"script": str(SCRIPT)},
                       "burst": {"warmup_steps": 0, "steps": steps, "repeats": 1, "profile_steps": 0, "drain_s": 0},
                       "accuracy": {"samples": 1, "seeds": 1}})
    meter = Meter(make_spec(plan, {}, "baseline"), out)
    batches = [(np.ones((32, 16), np.float32), np.ones((32, 1), np.float32))] * (steps + 10)
    started = time.perf_counter()
    try:
        if route == "three lines":
            callback.activate(meter)
            for inputs, _labels in callback.steps(iter(batches)):
                loss = callback.loss(float(inputs[0, 0]))
        else:
            callback.activate(None)
            for inputs, _labels in LoopIterator(iter(batches), batches, LoopState(meter)):
                loss = float(inputs[0, 0])  # noqa: F841 - the loop's loss variable, found by the route
    except BurstDone:
        pass
    finally:
        callback.activate(None)
    return (time.perf_counter() - started) / meter.steps_seen * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="pynative,graph")
    parser.add_argument("--harness", type=int, default=0, help="only the routes' own cost: N steps, 5 rounds")
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "perftune_bench", "found_loop"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.harness:
        load = os.getloadavg()[0]
        cost = {name: [harness_us(name, args.harness, out) for _ in range(5)] for name in ("three lines", "unchanged")}
        for name, values in cost.items():
            print(f"{name}: {statistics.median(values):.1f} us/step around the Meter (rounds: "
                  + ", ".join(f"{v:.1f}" for v in values) + ")")
        print(f"load average before {load:.2f}, after {os.getloadavg()[0]:.2f}")
        return
    forms = write_forms(out)
    load_before = os.getloadavg()
    rows = []
    for mode in args.modes.split(","):
        times: dict[str, list[float]] = {name: [] for name in forms}
        for r in range(args.rounds):
            order = list(forms) if r % 2 == 0 else list(reversed(forms))
            for name in order + order[::-1]:
                times[name].append(step_ms(forms[name], mode, out / f"{mode}-{r}-{name}-{len(times[name])}"))
        means = {name: statistics.mean(v) for name, v in times.items()}
        rows.append((mode, means, times))
    load_after = os.getloadavg()
    for mode, means, times in rows:
        spread = "; ".join(f"{n}: " + ", ".join(f"{t:.2f}" for t in v) for n, v in times.items())
        medians = {name: statistics.median(v) for name, v in times.items()}
        print(f"{mode}: unchanged {means['unchanged']:.2f} ms/step, three lines {means['three lines']:.2f} ms/step, "
              f"ratio of means {means['unchanged'] / means['three lines']:.3f}, of medians "
              f"{medians['unchanged'] / medians['three lines']:.3f} ({spread})")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")


if __name__ == "__main__":
    main()
