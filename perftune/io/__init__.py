"""Typed records and files: what flows between the stages and how it is written and read back.

``records`` (a trial: ``TrialSpec``, ``TrialResult``, ``Note`` ...), ``sweep_records`` (``results.json``), ``plan``
(the plan's models, embedded in both), ``files`` (the file layout and the one JSON reader), ``store`` (atomic
writes), ``schema`` (versions and upgrade steps).  Imports nothing of perftune but ``perftune.errors``.
"""
