"""MindSpore's profiler: record a profile (``session``), parse its output folders (``layouts``), give each op its
phase (``phases``) and split the step time by phase (``splits``).  Bad folders raise ``ProfileError`` naming the
file and what was expected; nothing here logs and returns empty."""
