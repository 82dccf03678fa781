"""A user's YAML or JSON config file, read and copied with fields set: the file an own knob of the config route
(``workload.knob_config``) reaches.  The user's file is only ever read; each trial gets its own copy.

YAML goes through ruamel.yaml's round-trip mode, which keeps key order, comments, quoting and anchors of everything
the copy does not change (PyYAML would drop every comment of a launcher's annotated config); JSON keeps its key
order through ``json``.  A dotted path (``model.model_config.seq_length``) names a field; a segment of digits
indexes a list (``layers.0.width``).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from perftune.errors import UserError

#: files a config knob may name, by suffix
CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
#: never read more: a config is a hand-written file
MAX_CONFIG_BYTES = 4 * 1024 * 1024
MISSING = object()


def is_json(path: Path) -> bool:
    return path.suffix.lower() == ".json"


def _yaml():
    from ruamel.yaml import YAML

    handler = YAML(typ="rt")
    handler.preserve_quotes = True
    handler.width = 4096  # never re-wrap the user's long lines
    return handler


def load_config(path: Path) -> Any:
    """The file's content (ruamel's round-trip containers for YAML); ``UserError`` in one line when unusable."""
    path = Path(path)
    if path.suffix.lower() not in CONFIG_SUFFIXES:
        raise UserError(f"{path.name}: a config knob's file must be YAML or JSON ({', '.join(CONFIG_SUFFIXES)})")
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read it ({exc.__class__.__name__}: {exc})") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise UserError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes; not a config file")
    try:
        return json.loads(text) if is_json(path) else _yaml().load(text)
    except Exception as exc:  # noqa: BLE001 - ruamel raises many classes; each is "not valid YAML"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        raise UserError(f"{path}: not valid {'JSON' if is_json(path) else 'YAML'}: {first}") from None


def _step(node: Any, key: str) -> Any:
    if isinstance(node, dict):
        return node.get(key, MISSING)
    if isinstance(node, list) and key.isdigit():
        return node[int(key)] if int(key) < len(node) else MISSING
    return MISSING


def get_field(data: Any, dotted: str) -> Any:
    """The value at ``dotted`` in ``data``, or ``MISSING``."""
    node = data
    for key in dotted.split("."):
        node = _step(node, key)
        if node is MISSING:
            return MISSING
    return node


def set_field(data: Any, dotted: str, value: Any) -> None:
    """Set the existing field at ``dotted`` (never creates one: a path the file lacks is refused by validation)."""
    *parents, last = dotted.split(".")
    node = data
    for key in parents:
        node = _step(node, key)
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def dump_config(data: Any, path: Path) -> str:
    if is_json(path):
        return json.dumps(data, indent=2) + "\n"
    out = io.StringIO()
    _yaml().dump(data, out)
    return out.getvalue()


def write_copy(source: Path, dest: Path, fields: dict[str, Any]) -> None:
    """``dest``: ``source`` with each ``dotted path -> value`` of ``fields`` set; ``source`` is only read."""
    data = load_config(source)
    for dotted, value in fields.items():
        set_field(data, dotted, value)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(dump_config(data, source), encoding="utf-8")


def plain(value: Any) -> Any:
    """A scalar as Python's own type (ruamel gives ``ScalarFloat`` and friends, which records should not carry)."""
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


def type_refusal(current: Any, value: Any) -> str | None:
    """Why a field holding ``current`` cannot take ``value`` (None: it can): the field's type is the file's."""
    if current is None:
        return None if isinstance(value, (bool, int, float, str)) or value is None else "a scalar"
    if isinstance(current, bool):
        return None if isinstance(value, bool) else "true | false"
    if isinstance(current, int):
        return None if isinstance(value, int) and not isinstance(value, bool) else "an integer"
    if isinstance(current, float):
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "a number"
    if isinstance(current, str):
        return None if isinstance(value, str) else "a string"
    return f"nothing: the field holds a {'list' if isinstance(current, list) else 'mapping'}, not one value"
