"""Words: every decision, figure and note in the text a reader sees, rendered from the typed records.

A low layer: it imports only ``perftune.io`` (the records it words), so that the engine, which stores decisions as
data, and the report, the summary and ``perftune compare``, which print them, all say the same thing without the
engine depending on the report.  Modules: ``format`` (numbers, speeds, counts), ``reasons`` (a verdict's and a
stack step's reason), ``split_notes`` (what a reader of the phase splits must know), ``lm`` (a language model's
figures: tokens/s, perplexity, repetition), ``samples`` (the report's greedy samples side by side), ``rules``
(the sweep's order rule, multiplicity rule and accuracy window's sizing).
"""
