"""The burst of a script workload: the user's training script, unchanged, run in the burst process as
``python train.py ARGS`` would run it, measured from inside by ``perftune.Callback`` (``Model.train``) or
``perftune.steps`` (a custom loop), or, without any perftune line, by the loop over the training dataset's
iterator (``script_loop``).

The script runs with ``__name__ == "__main__"``, ``sys.argv = [script, *args, *knob options]``, its own folder as
working directory and first on ``sys.path``.  Before it starts, the context and dataset knobs the plan names are
applied (and kept against the script's own ``set_context``, see ``script_hooks``).  Once the burst has its steps the
script is ended (``BurstDone``), so a script written for 100 epochs runs a burst and writes no checkpoints after it.
A script that raises, exits non-zero or never trains gives a recorded trial with the reason.
"""

from __future__ import annotations

import os
import runpy
import sys
import time
import traceback
from pathlib import Path
from typing import Optional

from perftune import knobs as knob_registry
from perftune.burst.callback import Callback, activate, refuse_custom_loops
from perftune.burst.config_copies import ConfigCopies
from perftune.burst.context import environment, first_eager_op
from perftune.burst.failures import KnobRefused, script_failure
from perftune.burst.meter import BurstDone, Meter, needed_steps
from perftune.burst.results import read_memory
from perftune.burst.script_figures import ScriptFigures
from perftune.burst.script_hooks import ScriptHooks, apply_dataset_config, apply_script_context
from perftune.errors import UserError
from perftune.io.derived import failed_result
from perftune.io.records import Note, TrialResult, TrialSpec
from perftune.routes import script_argv

#: knobs whose read-back in ``applied`` is the knob's own value (so the two can be compared)
READ_BACK_AS_IS = ("mode", "jit_level", "num_parallel_workers", "prefetch_size", "dataset_autotune")


def disagreements(knobs: dict, applied: dict, imposed: set[str]) -> list[Note]:
    """Where ``knobs`` (perftune's defaults for what the plan does not name) and what ran differ: say why, so that
    ``knobs.jit_level`` O0 beside the script's own ``applied.jit_level`` O2 is not read as a contradiction."""
    out = []
    for name in READ_BACK_AS_IS:
        ran = applied.get(name)
        if name in imposed or ran is None or name not in knobs:
            continue
        if knob_registry.format_value(ran) != knob_registry.format_value(knobs[name]):
            out.append(Note(kind="info", knob=name, text=(
                f"knobs.{name}={knob_registry.format_value(knobs[name])} is perftune's default, not imposed (the "
                f"plan does not name {name}): the script ran {name}={knob_registry.format_value(ran)} "
                f"(applied.{name})")))
    return out


class ScriptBurst:
    """Same face as ``own_workload.Burst`` for ``main``: ``run()``, ``result``, ``memory()``."""

    def __init__(self, spec: TrialSpec, out_dir: Path):
        self.spec = spec
        self.dir = Path(out_dir).resolve()  # the script changes the working directory
        self.result = failed_result(spec, "failed", None)
        # the built-in knobs the plan names; its own knobs reach the script by their routes (``perftune.routes``)
        self.imposed = {name for name in spec.script_knobs if name in knob_registry.KNOBS}

    def memory(self) -> None:
        read_memory(self.result, self.spec.device)

    def run(self) -> TrialResult:
        import mindspore as ms
        import mindspore.dataset as ds
        import numpy as np

        started = time.perf_counter()
        spec, script = self.spec, self.spec.script
        self.result.notes += knob_registry.no_effect_notes({n: spec.knobs[n] for n in sorted(self.imposed)},
                                                           spec.device)
        apply_script_context(spec, self.imposed)
        apply_dataset_config(spec.knobs, self.imposed)
        first_eager_op()
        ms.set_seed(spec.seed)
        np.random.seed(spec.seed)
        ds.config.set_seed(spec.seed)
        meter = Meter(spec, self.dir, self.result)
        figures = ScriptFigures(meter)
        hooks = ScriptHooks(spec, self.imposed, meter, lambda: Callback(meter=meter, stop=True))
        figures.network = lambda: hooks.network
        refuse_custom_loops(hooks.custom_loop_refusal())
        argv = script_argv(script.script, script.args, script.knob_args, spec.knobs)
        if script.seed_arg:  # the accuracy gate's seed runs: the script's own seed follows perftune's
            argv += [script.seed_arg, str(spec.seed)]
        try:
            copies = ConfigCopies(spec, self.dir)
        except (UserError, OSError) as exc:  # the user's config file changed or vanished since validation
            self.result.reason = f"cannot write the trial's copy of a config file: {exc}"
            return self.result
        argv = copies.argv(argv)
        self.result.applied["argv"] = argv[1:]
        if copies.copies:
            self.result.applied["config"] = copies.applied(self.dir)
        if spec.env:
            self.result.applied["env"] = dict(spec.env)
        failure = self.run_script(Path(script.script), argv, meter, hooks)
        self.result.applied.update(hooks.read_back())
        self.result.notes += hooks.notes + copies.notes()
        self.result.environment = environment(spec.device, spec.knobs["kernel_threads"] or None)
        self.memory()
        if meter.done:
            self.result.status = "ok"
            self.result.reason = None
        else:
            self.result.status, self.result.reason = failure or self.incomplete(meter, hooks)
            self.result.steps = meter.records
        left = sorted(n for n in ("mode", "num_parallel_workers") if n not in self.imposed)
        if left:
            self.result.notes.append(Note(kind="info", text=(
                f"left to the script (the plan does not name them): {', '.join(left)}; `applied` shows what ran")))
        self.result.notes += disagreements(spec.knobs, self.result.applied, self.imposed)
        self.result.wall_s = time.perf_counter() - started
        return self.result

    def run_script(self, path: Path, argv: list[str], meter: Meter, hooks: ScriptHooks
                   ) -> Optional[tuple[str, str]]:
        """Run the script to its end (or the burst's); (status, reason) when it failed, else None."""
        saved = (list(sys.argv), os.getcwd(), list(sys.path))
        sys.argv = argv
        os.chdir(path.parent)
        sys.path.insert(0, str(path.parent))
        activate(meter)
        hooks.install()
        try:
            runpy.run_path(str(path), run_name="__main__")
        except BurstDone:
            pass
        except SystemExit as exc:
            if exc.code not in (None, 0):
                what = f"code {exc.code}" if isinstance(exc.code, int) else repr(exc.code)
                return "failed", f"the script exited with {what} after {meter.steps_seen} step(s)"
        except KnobRefused as exc:  # a Model knob MindSpore refused, or one a custom loop cannot take
            traceback.print_exc()
            return "unsupported", str(exc)
        except Exception as exc:  # noqa: BLE001 - the script's failure becomes the trial's reason
            traceback.print_exc()
            sys.stderr.flush()
            if meter.done:  # measured already: the failure came after the burst (should not happen: BurstDone)
                self.result.notes.append(Note(kind="warning", text=f"the script failed after the burst: {exc}"))
                return None
            return script_failure(exc, self.spec, meter.steps_seen)
        finally:
            hooks.remove()
            activate(None)
            sys.argv, path_cwd, sys.path[:] = saved[0], saved[1], saved[2]
            os.chdir(path_cwd)
            sys.stdout.flush()
        return None

    @staticmethod
    def incomplete(meter: Meter, hooks: ScriptHooks) -> tuple[str, str]:
        if meter.steps_seen == 0:
            if hooks.trained:
                return "failed", "the script called Model.train but no training step ran (an empty dataset?)"
            return "failed", ("the script finished without training: it never called mindspore.train.Model.train "
                              "and took no batch from a mindspore.dataset iterator outside a validation (a loop "
                              "over other data needs `for batch in perftune.steps(iterator):`)")
        return "failed", (f"the script's training ended after {meter.steps_seen} step(s), before the burst had "
                          f"{needed_steps(meter)}: give the script more epochs or data in workload.args, or "
                          "lower the plan's burst settings")
