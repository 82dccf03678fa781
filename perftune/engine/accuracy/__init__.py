"""The accuracy gate: a faster change is kept only if training did not get worse.

Its parts, in the order a sweep uses them: the accuracy-only trials they all run (``window_trials``); the window's
length, sized from the baseline's curve (``sizing``, to the curve's ``knee``); the baseline's seed runs that
calibrate the gate (``seeds``) and the band they make (``seed_band``); the decision on each candidate (``gate``);
after stacking, the final stack trained for a longer window (``stack_check``).  Decisions are data
(``perftune.io.accuracy_window``, ``perftune.io.sweep_records``); their words are ``perftune.words.gate_words`` and
``perftune.words.window_words``.
"""
