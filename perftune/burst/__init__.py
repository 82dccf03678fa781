"""The child side of a trial: one measured training burst in its own process.

Started by module name (``python -m perftune.burst TRIAL_DIR``, see ``main.py``), never imported by the launcher.
``context`` applies the process-wide knobs and reads back what MindSpore made of them, ``meter`` is the one phase
machine (accuracy window, warm-up, drain, timed windows, profiled steps) that every route drives: ``phases`` (perftune's
own workloads), ``script`` (a user's script) and ``callback`` (``perftune.Callback``); ``results`` turns its step
records into the trial's figures, ``train_step`` and ``data`` build the step and the input pipeline,
``collectives`` holds the distributed parts, ``failures`` turns an exception into a status.
"""
