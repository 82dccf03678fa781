"""Reading ``plan.yaml`` with bounds: a plan is a small hand-written file, and nothing in it may make perftune hang,
exhaust memory or silently drop a value.

Refused, each in one line naming where: files over ``MAX_PLAN_BYTES`` (a plan is copied into every spec.json,
results.json and the report), YAML aliases (``&a`` / ``*a``: a "billion laughs" expands a few lines into gigabytes;
a plan has no need to share nodes), nesting deeper than ``MAX_DEPTH``, and a key given twice in one mapping (YAML
lets the last one win without a word).
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode

MAX_PLAN_BYTES = 1 << 20  # 1 MiB: hand-written plans are a few KiB
MAX_DEPTH = 32


class PlanYAMLError(ValueError):
    """One line: what is wrong and where (line, column)."""


def _where(node_or_event) -> str:
    mark = getattr(node_or_event, "start_mark", None)
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""


class BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` without aliases, with a depth bound and with duplicate keys refused."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        if self.check_event(AliasEvent):
            event = self.peek_event()
            raise PlanYAMLError(f"YAML alias *{event.anchor}{_where(event)}: aliases are not allowed in a plan "
                                "(write the value out)")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise PlanYAMLError(f"nesting deeper than {MAX_DEPTH} levels{_where(self.peek_event())}")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        if isinstance(node, MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in seen:
                        raise PlanYAMLError(f"key {key!r} appears twice in one mapping{_where(key_node)} "
                                            f"(first at line {seen[key].start_mark.line + 1}); give it once")
                    seen[key] = key_node
                except TypeError:  # an unhashable key: SafeLoader's own error says so
                    break
        return super().construct_mapping(node, deep=deep)


def load_bounded(text: str) -> Any:
    """The YAML document in ``text``; ``PlanYAMLError`` (one line) for what a plan may not contain, and
    ``yaml.YAMLError`` for text that is not YAML."""
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_PLAN_BYTES:
        raise PlanYAMLError(f"the plan is {size} bytes; a plan may be at most {MAX_PLAN_BYTES} bytes")
    loader = BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
