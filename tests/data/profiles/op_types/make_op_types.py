"""Generate the op-type table under tests/data/profiles/op_types/ from real MindSpore profiles.

    .venv/bin/python tests/data/profiles/op_types/make_op_types.py all          # every scenario (about 4 min, 2 cores)
    .venv/bin/python tests/data/profiles/op_types/make_op_types.py resnet18_pynative_model
    .venv/bin/python tests/data/profiles/op_types/make_op_types.py --table-only  # redo table.json from the profiles

Each scenario trains one model for a few tiny steps in a fresh process (MindSpore's context is process-global),
profiles two of them with ``perftune.profile.session.ProfilerSession`` and keeps the two files the phase attribution
reads (the op table and the per-launch timestamps) under ``<scenario>/``.  ``table.json`` then lists, per scenario,
every op type with the phases perftune gives it (ms per phase over the profiled steps) and the rules that decided
them; ``tests/test_op_types.py`` re-attributes the stored profiles and checks them against the table and against
what each op *is* (gradient kernels backward, update kernels optimizer).

Models (32x32 images, batch 2; token models batch 4): mindcv's ResNet-18, MobileNetV3-small and a one-block ViT
(mindcv's ``VisionTransformer``), each trained the way ``mindspore.train.Model`` trains (its own train network:
``TrainOneStepCell(WithLossCell)``, mindcv's momentum optimizer): the route of a script workload; and perftune's
``tiny_gpt`` and ``experiments/third_party_lm.py`` trained with perftune's own step (``build_train_step``, cell
form, Adam): the route of a ``package.module:function`` workload.  Both in GRAPH and PYNATIVE mode.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
sys.path.insert(0, str(REPO))

KEEP = ("FRAMEWORK/cpu_op_detail_info_0.csv", "FRAMEWORK/cpu_op_execute_timestamp_0.txt")
MODELS = ("resnet18", "mobilenet_v3_small_100", "vit_tiny", "tiny_gpt", "third_party_lm")
SCENARIOS = {f"{m}_{mode}_{'model' if m not in ('tiny_gpt', 'third_party_lm') else 'cell'}": (m, mode)
             for m in MODELS for mode in ("graph", "pynative")}
PROFILED_STEPS = 2


def build_image_model(name: str):
    """A mindcv model trained as ``Model.train`` trains it (its train network), and one batch."""
    import mindcv
    import mindspore as ms
    import numpy as np
    from mindcv.models.vit import VisionTransformer
    from mindspore.train import Model

    if name == "vit_tiny":
        net = VisionTransformer(image_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2, num_classes=10)
    else:
        net = mindcv.create_model(name, num_classes=10, pretrained=False)
    loss = mindcv.create_loss(name="CE")
    opt = mindcv.create_optimizer(net.trainable_params(), opt="momentum", lr=0.01)
    step = Model(net, loss_fn=loss, optimizer=opt)._train_network  # what Model.train runs each step
    step.set_train(True)
    rng = np.random.default_rng(0)
    batch = (ms.Tensor(rng.standard_normal((2, 3, 32, 32)).astype(np.float32)),
             ms.Tensor(np.array([1, 3], np.int32)))
    return step, batch


def build_lm(name: str, graph: bool):
    """perftune's tiny_gpt or the third-party stand-in with perftune's own cell step, and one batch."""
    import mindspore as ms

    from perftune.burst.train_step import NetWithLoss, build_train_step
    from perftune.workloads import resolve

    params = {"d_model": 32, "n_layers": 1, "n_heads": 2, "seq_len": 16, "train_samples": 8, "val_samples": 4}
    if name == "tiny_gpt":
        workload = resolve("tiny_gpt")(params, 0)
    else:
        from experiments.third_party_lm import build
        workload = build({**params, "corpus_bytes": 20_000}, 0)
    step = build_train_step("cell", NetWithLoss(workload.network, workload.loss_fn),
                            workload.make_optimizer(workload.network.trainable_params()), "none", 1, graph, "O0",
                            with_norm=False)
    cols = [workload.train_columns[c][:4] for c in workload.train_columns]
    return step, tuple(ms.Tensor(c) for c in cols)


def worker(model: str, mode: str, out: Path) -> None:
    import mindspore as ms
    import numpy as np

    from perftune.profile.session import ProfilerSession

    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    try:  # under NumPy 2 the first eager op can fail once
        (ms.Tensor(np.ones(1, np.float32)) + 1).asnumpy()
    except SystemError:
        pass
    ms.set_seed(0)
    if model in ("tiny_gpt", "third_party_lm"):
        step, batch = build_lm(model, mode == "graph")
    else:
        step, batch = build_image_model(model)

    def run(k: int) -> None:
        for _ in range(k):
            out_ = step(*batch)
            (out_[0] if isinstance(out_, tuple) else out_).asnumpy()

    run(2)  # compile and warm up
    session = ProfilerSession(out, profile_memory=False)
    session.start()
    run(PROFILED_STEPS)
    session.stop_and_analyse()
    print(session.root)


def run_scenario(name: str) -> None:
    model, mode = SCENARIOS[name]
    with tempfile.TemporaryDirectory(prefix=f"perftune_{name}_") as tmp:
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "GLOG_v": "3"}
        proc = subprocess.run([sys.executable, __file__, "--as-worker", model, mode, tmp], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=900)
        if proc.returncode:
            sys.exit(f"{name}: worker failed\n{proc.stderr[-3000:]}")
        root = Path(proc.stdout.strip().splitlines()[-1])
        dest = HERE / name
        shutil.rmtree(dest, ignore_errors=True)
        for rel in KEEP:
            (dest / root.name / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / rel, dest / root.name / rel)


def table_entry(name: str) -> dict:
    """Every op type of one stored profile with the phases perftune gives it."""
    from perftune.profile.layouts import load_profile

    model, mode = SCENARIOS[name]
    profile = load_profile(HERE / name)
    types: dict[str, dict] = {}
    for r in profile.ops.itertuples(index=False):
        row = types.setdefault(str(r.op_type), {"phases_ms": {}, "rules": [], "example": str(r.full_name)})
        row["phases_ms"][r.phase] = row["phases_ms"].get(r.phase, 0.0) + float(r.total_ms)
        if r.phase_rule not in row["rules"]:
            row["rules"].append(str(r.phase_rule))
    for row in types.values():
        row["rules"].sort()
        row["phases_ms"] = {p: round(ms, 3) for p, ms in sorted(row["phases_ms"].items())}
    return {"model": model, "mode": mode, "route": "Model.train" if name.endswith("_model") else "perftune cell step",
            "launch_steps": profile.launch_steps, "op_types": dict(sorted(types.items()))}


README_HEAD = """# op_types: which phase each op type gets, on real profiles (MindSpore 2.10.0 CPU)

Real profiler output, produced on a shared 2-core CPU machine by, from the repository root:

    .venv/bin/python tests/data/profiles/op_types/make_op_types.py all

(about 4 minutes; one fresh process per scenario; `--table-only` redoes `table.json` and this page from the stored
profiles after a rule changes on purpose).  Per scenario `<model>_<mode>_<route>/` keeps the two files the phase
attribution reads (`FRAMEWORK/cpu_op_detail_info_0.csv`, `FRAMEWORK/cpu_op_execute_timestamp_0.txt`) of 2
profiled steps after 2 warm-up steps.  Models: mindcv 0.3.0 ResNet-18, MobileNetV3-small (`mnv3`) and a one-block
ViT (mindcv's `VisionTransformer`, 32x32 images, patch 8, width 32) trained as `mindspore.train.Model` trains them
(`model`: its own train network, mindcv's momentum optimizer, batch 2 of 32x32 images), the route of a script
workload; perftune's `tiny_gpt` and `experiments/third_party_lm.py` (`tp_lm`: d_model 32, 1 layer, seq 16, batch 4)
with perftune's own cell step and Adam (`cell`), the route of a `package.module:function` workload.

`table.json`: per scenario, every op type with the ms per phase perftune gives it over the profiled steps and the
rules that decided (`op_type`, `scope`: from what the op is; `timeline`, `recompute`: placed by where its launches
ran in the step; `default`: not placed).  `tests/test_op_types.py` re-attributes the profiles against it and checks
that gradient kernels are backward by type or scope (never by time), update kernels optimizer, forward kernels
forward.  Below: F / B / O = forward / backward / optimizer, with the rules in brackets.

"""
PHASE_LETTER = {"forward": "F", "backward": "B", "optimizer": "O", "communication": "C"}
RULE_WORD = {"op_type": "type", "scope": "scope", "timeline": "time", "recompute": "rec", "default": "def"}


def readme(table: dict) -> str:
    names = sorted(table)
    short = [n.replace("mobilenet_v3_small_100", "mnv3").replace("third_party_lm", "tp_lm") for n in names]
    lines = ["| op type | " + " | ".join(short) + " |", "|---|" + "---|" * len(names)]
    for op_type in sorted({t for e in table.values() for t in e["op_types"]}):
        cells = []
        for n in names:
            row = table[n]["op_types"].get(op_type)
            cells.append("" if row is None else "".join(v for p, v in PHASE_LETTER.items() if p in row["phases_ms"]) + " ("
                         + "/".join(RULE_WORD[r] for r in row["rules"]) + ")")
        lines.append(f"| {op_type} | " + " | ".join(cells) + " |")
    return README_HEAD + "\n".join(lines) + "\n"


def write_table() -> None:
    table = {name: table_entry(name) for name in SCENARIOS if (HERE / name).is_dir()}
    (HERE / "table.json").write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    (HERE / "README.md").write_text(readme(table))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--as-worker":
        worker(sys.argv[2], sys.argv[3], Path(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", help=f"'all' or some of {', '.join(SCENARIOS)}")
    parser.add_argument("--table-only", action="store_true", help="only redo table.json from the stored profiles")
    args = parser.parse_args()
    names = list(SCENARIOS) if "all" in args.scenarios else args.scenarios
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)} (known: all, {', '.join(SCENARIOS)})")
    if not args.table_only:
        for name in names:
            print(f"{name} ...", flush=True)
            run_scenario(name)
    write_table()


if __name__ == "__main__":
    main()
