"""Decisions over records: ``plan`` (load and validate), ``specs`` (what a trial runs, its id), ``sweep`` (the
order of trials and their verdicts), ``stats`` (noise-aware comparison), ``accuracy`` (the accuracy gate).

No processes and no printing: the sweep takes its trial runner and its progress display as parameters.
"""
