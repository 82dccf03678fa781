"""Model FLOPs utilisation (MFU) per trial, against the peak ``perftune peak`` measured and cached for the machine.

MFU = the workload's FLOPs per sample x the trial's samples/s / the peak FLOP/s.  FLOPs per sample are the
workload's own count of the model (``Workload.flops_per_sample``: forward + backward, so recompute or padding never
raise it); a workload that gives none gets "unknown".  The peak is looked up for the host, device and MindSpore
version the sweep ran on; the report never measures it (that takes seconds and MindSpore's process-wide context).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from perftune.errors import UserError
from perftune.io.peak_cache import PeakRecord, cache_path, read_peak
from perftune.io.records import Environment
from perftune.io.sweep_records import SweepTrial


def mfu(flops_per_sample: float, samples_per_s: float, peak_flops_per_s: float) -> float:
    """The model's forward+backward FLOPs done per second over the peak."""
    if flops_per_sample <= 0 or samples_per_s <= 0 or peak_flops_per_s <= 0:
        raise ValueError("mfu: flops_per_sample, samples_per_s and peak_flops_per_s must all be > 0")
    return flops_per_sample * samples_per_s / peak_flops_per_s


def trial_mfu(trial: Any, peak_flops_per_s: float) -> Optional[float]:
    """MFU of one trial (a ``TrialResult`` or the dict of a ``trial.json``) at its throughput (batch / mean step); None
    when the trial is not ok or its workload gives no ``flops_per_sample``."""
    get = trial.get if isinstance(trial, dict) else (lambda k: getattr(trial, k, None))
    if get("status") != "ok":
        return None
    flops, rate = get("flops_per_sample"), get("samples_per_s")
    if not flops or not rate:
        return None
    return mfu(float(flops), float(rate), peak_flops_per_s)


@dataclass
class Efficiency:
    """The report's efficiency section: the peak (or why there is none) and one row per measured trial."""

    peak: Optional[PeakRecord]
    peak_text: str
    rows: list[dict] = field(default_factory=list)

    @property
    def any_mfu(self) -> bool:
        return any(r["mfu"] is not None for r in self.rows)


def peak_text(peak: Optional[PeakRecord], env: Optional[Environment]) -> str:
    if peak is not None:
        return (f"peak {peak.flops_per_s / 1e9:.1f} GFLOP/s ({peak.dtype}, median call "
                f"{peak.median_flops_per_s / 1e9:.1f}) on {peak.host} ({peak.device}, MindSpore "
                f"{peak.mindspore_version}), measured {peak.measured_utc} by 'perftune peak'"
                + (f" at load average {peak.load_avg_1m:.1f}" if peak.load_avg_1m is not None else "")
                + f": {peak.method}")
    where = f"{env.host} ({env.device}, MindSpore {env.mindspore_version})" if env else "this sweep's machine"
    return (f"MFU unknown: no peak measured for {where} in {cache_path()}; run 'perftune peak' on that machine, "
            "then 'perftune report' again")


def efficiency(trials: list[SweepTrial], env: Optional[Environment], labels: dict[str, str]) -> Efficiency:
    """MFU rows for the ok trials (``labels``: trial id -> the label the report shows)."""
    try:
        peak = read_peak(env.host, env.device, env.mindspore_version) if env else None
        ignored = None
    except UserError as exc:  # a corrupt cache never blocks a report: MFU is unknown, and the report says why
        peak, ignored = None, f"MFU unknown: the cached peak was ignored ({exc})"
    rows = []
    for t in trials:
        r = t.result
        if r.status != "ok" or not r.samples_per_s:
            continue
        value = trial_mfu(r, peak.flops_per_s) if peak else None
        rows.append({
            "trial_id": t.trial_id, "label": labels.get(t.trial_id, t.label), "verdict": t.verdict,
            "samples_per_s": r.samples_per_s,
            "mflop_per_sample": r.flops_per_sample / 1e6 if r.flops_per_sample else None,
            "gflop_per_s": r.flops_per_sample * r.samples_per_s / 1e9 if r.flops_per_sample else None,
            "mfu": value,
            "mfu_text": f"{value:.2%}" if value is not None else
            ("unknown (the workload gives no FLOPs per sample)" if not r.flops_per_sample else "unknown (no peak)"),
        })
    return Efficiency(peak=peak, peak_text=ignored or peak_text(peak, env), rows=rows)
