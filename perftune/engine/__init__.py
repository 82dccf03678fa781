"""Decisions over records: ``plan`` (load and validate), ``specs`` (what a trial runs, its id), ``sweep`` (the
order of the phases and their verdicts) over ``processes`` (each process measured, recorded, used or left out),
``stats`` (the one noise model, interval and verdict of every comparison: the sweep's sequential races in
``sequential``, the node-blocked comparison in ``blocked``, ``perftune compare``), ``accuracy`` (the accuracy gate).

No processes and no printing: the sweep takes its trial runner and its progress display as parameters.
"""
