"""MindSpore's profiler around a few training steps of a burst, and a check that it left readable output."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Optional

from perftune.errors import ProfileError
from perftune.profile.columns import ROOT_SUFFIX
from perftune.profile.layouts import detect_layout


class ProfilerSession:
    """MindSpore's profiler around a few steps: ``start()``, run the steps, ``stop_and_analyse()``.

    Uses ``mindspore.profiler.profile`` (the non-deprecated API) with CPU activity always and the device's
    (GPU / NPU) where the context's device is one; the analysis runs inside ``stop_and_analyse`` (on 2 CPU cores
    about 1.1 s for a few thousand op launches, 3.4 s for 29 k, 5.5 s for 59 k), so keep it out of timed steps.
    MindSpore's profiler logs and swallows its own errors; this class checks that the output exists and raises
    :class:`ProfileError` when it does not.  Several processes (msrun ranks) may share ``output_dir``: each
    session finds its own folder by its pid; ``root`` is that folder after ``stop_and_analyse``.
    """

    def __init__(self, output_dir: Path, profile_memory: bool = True):
        self.output_dir = Path(output_dir)
        self.profile_memory = profile_memory
        self.root: Optional[Path] = None
        self._prof = None
        self._before: set[Path] = set()

    def start(self) -> None:
        import mindspore as ms
        from mindspore.profiler import ProfilerActivity

        if self._prof is not None:
            raise RuntimeError("ProfilerSession.start() called twice")
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self._before = set(self.output_dir.glob(f"*{ROOT_SUFFIX}"))
        activities = [ProfilerActivity.CPU]
        device = str(ms.get_context("device_target"))
        if device == "GPU":
            activities.append(ProfilerActivity.GPU)
        elif device == "Ascend":
            activities.append(ProfilerActivity.NPU)
        self._prof = ms.profiler.profile(
            activities=activities,
            profile_memory=self.profile_memory,
            start_profile=False,
            on_trace_ready=ms.profiler.tensorboard_trace_handler(str(self.output_dir.resolve())),
        )
        self._prof.start()

    def stop_and_analyse(self) -> float:
        """Stop collecting, analyse (on_trace_ready runs inside ``stop``); return the seconds this took."""
        if self._prof is None:
            raise RuntimeError("ProfilerSession.stop_and_analyse() before start()")
        t0 = time.perf_counter()
        self._prof.stop()
        analyse_s = time.perf_counter() - t0
        self._prof = None
        # several processes (msrun ranks) may share output_dir: the folder is <host>_<pid>_<timestamp>_ascend_ms
        pid = f"_{os.getpid()}_"
        new = sorted(p for p in set(self.output_dir.glob(f"*{ROOT_SUFFIX}")) - self._before if pid in p.name)
        if not new:
            raise ProfileError(
                f"{self.output_dir}: the profiler wrote no *{ROOT_SUFFIX} folder (MindSpore's profiler logs and "
                "swallows its own errors; see its log above)"
            )
        self.root = new[-1]
        detect_layout(self.root)  # raises where the analysis left no readable output
        return analyse_s
