"""A range search in words (``SearchRecord``, ``perftune.engine.search``): what it tried, what it found and why it
stopped, for the progress line, the summary, the tables and the report alike."""

from __future__ import annotations

from perftune.io.plan import KnobRange
from perftune.io.sweep_records import SearchRecord

START_WORDS = {"cores": "75% of the machine's {cores} cores", "middle": "the middle of the range",
               "largest fit": "the largest value that fits"}


def range_text(record: SearchRecord) -> str:
    """``[1, 8]``, ``[16, 1024] log2, until fits``."""
    return plan_range_text(record.range)


def plan_range_text(r: KnobRange) -> str:
    """A plan's range as ``range_text`` writes it."""
    return f"[{r.lo}, {r.hi}]" + (" log2" if r.scale == "log2" else "") + (", until fits" if r.until else "")


def stop_text(record: SearchRecord) -> str:
    """Why the search stopped, in words."""
    found, gain = record.found, f"{record.min_gain:.0%}"
    return {
        "peak": f"no neighbour of {found} is faster by min_gain {gain}",
        "edge": f"{found} is the range's end and the fastest found: a value beyond it might be faster",
        "fits": f"{found} is the largest value that fits and the fastest found",
        "budget": f"its {record.budget} comparisons were spent (decision.search_steps)",
        "failed": "the value it stood at failed" if record.largest_fit is not None or not record.fits
                  else "not even the range's lowest value fits",
        "time": "the sweep's decision.budget_s was spent",
    }[record.stopped]


def fits_text(record: SearchRecord) -> str:
    """``fits: 16 ok, 32 ok, 64 oom -> largest 32``; "" without ``until: fits``."""
    if not record.fits:
        return ""
    tried = ", ".join(f"{f.value} {f.status}" for f in record.fits)
    return f"fits: {tried} -> largest {record.largest_fit if record.largest_fit is not None else 'none'}"


def search_line(record: SearchRecord) -> str:
    """``kernel_threads searched over [1, 8] from 4 (the middle of the range): tried 4, 5, 3, 2, 1; found 2 (no
    neighbour of 2 is faster by min_gain 3%); 4 comparisons, 15 processes``."""
    start = START_WORDS[record.start_rule].format(cores=record.cores)
    found = record.found if record.found is not None else "nothing"
    fits = fits_text(record)
    return (f"{record.knob} searched over {range_text(record)} from {record.start} ({start}): "
            + (f"{fits}; " if fits else "")
            + f"tried {', '.join(map(str, record.tried)) or 'nothing'}; found {found} ({stop_text(record)}); "
            f"{len(record.steps)} comparison(s), {record.processes} process(es)")


def planned_text(knob: str, r: KnobRange, steps: int) -> str:
    """``perftune validate``: ``kernel_threads searched over [1, 8]: 8 values, at most 6 comparisons``."""
    climb = "doubling" if r.scale == "log2" else "doubling, then bisecting"
    fits = f"; first the largest that fits ({climb})" if r.until else ""
    return f"{knob} searched over {plan_range_text(r)}: {len(r.values())} values, at most {steps} comparisons{fits}"
