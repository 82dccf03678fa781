"""A ``build()`` workload returning anything but a ``Workload`` (``None`` from a forgotten ``return``) is refused in
one line naming the module, what it returned and what is expected (``perftune.workloads.build``), which the burst
records as the failed trial's reason (``burst.failures.classify_failure``), never an ``AttributeError`` traceback."""

from __future__ import annotations

import pytest

from perftune.burst.failures import classify_failure
from perftune.engine.plan_load import parse_plan
from perftune.engine.specs import make_spec
from perftune.workloads import build


def test_a_build_returning_none_is_refused_in_one_line():
    with pytest.raises(TypeError) as caught:
        build("tests.workloads_for_tests:returns_none", {}, 0)
    text = str(caught.value)
    assert "'tests.workloads_for_tests'" in text and "returned None" in text
    assert "perftune.workloads.base.Workload" in text and "\n" not in text
    spec = make_spec(parse_plan({"name": "w", "workload": "tests.workloads_for_tests:returns_none"}), {}, "w")
    status, reason = classify_failure(caught.value, spec)
    assert status == "failed" and reason == f"TypeError: {text}"


def test_a_build_returning_another_type_names_it():
    with pytest.raises(TypeError, match=r"returned a builtins\.dict; it must return a perftune"):
        build("tests.workloads_for_tests:wrong_type", {}, 0)
