"""What a script's options accept, read without running it: the ``add_argument`` calls of ``argparse`` in the
script and in the modules of its own folder that it imports (mindcv's ``train.py`` reads its options in
``config.py``), parsed with ``ast``.  Running the script's parser (``python train.py --help``) would import
MindSpore and whatever the script does at import; reading the source cannot misfire that way.

It checks what is written literally: ``type=int`` / ``float`` / ``str`` / ``bool``-like, literal ``choices``, flags
(``store_true``).  It cannot check options built at run time (names or choices computed, a ``type`` that is a
function of the script's own, a parser from an installed package, ``click`` or ``hydra``): those are let through,
as before, and fail in the burst with the script's own message.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

#: argparse types whose conversion is checked
CONVERTERS = {"int": int, "float": float, "str": str}
FLAG_ACTIONS = ("store_true", "store_false", "store_const", "count", "help", "version")
#: flags a boolean knob reaches by the option's presence or absence
FLAG_VALUE_ACTIONS = ("store_true", "store_false")


@dataclass(frozen=True)
class ScriptOption:
    option: str
    where: str  # file:line
    type_name: Optional[str]  # "int", "float", "str" or None (not checked)
    choices: Optional[tuple]  # literal choices, or None
    flag: bool  # takes no value
    action: Optional[str] = None  # argparse's literal action (``store_true``), if any
    default: Any = None  # the literal default, if any (an own knob's baseline when the plan gives none)


def local_modules(tree: ast.Module, folder: Path) -> list[Path]:
    """The modules of ``folder`` that the script imports (``import config`` / ``from config import x``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return [folder / f"{n}.py" for n in sorted(names) if (folder / f"{n}.py").is_file()]


def literal(node: Optional[ast.AST]) -> Any:
    try:
        return ast.literal_eval(node) if node is not None else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def options_in(tree: ast.Module, path: Path) -> dict[str, ScriptOption]:
    out = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        kind = keywords.get("type")
        type_name = kind.id if isinstance(kind, ast.Name) and kind.id in CONVERTERS else None
        if kind is None:
            type_name = "str"
        choices = literal(keywords.get("choices"))
        action = literal(keywords.get("action"))
        option = ScriptOption(option="", where=f"{path.name}:{node.lineno}", type_name=type_name,
                              choices=tuple(choices) if isinstance(choices, (list, tuple, set)) else None,
                              flag=action in FLAG_ACTIONS, action=action if isinstance(action, str) else None,
                              default=literal(keywords.get("default")))
        for name in names:
            out[name] = ScriptOption(**{**option.__dict__, "option": name})
    return out


def script_trees(script: Path) -> list[tuple[ast.Module, Path]]:
    """The script's syntax tree and those of its folder's modules it imports ([] if the script is unreadable)."""
    try:
        tree = ast.parse(script.read_text(encoding="utf-8"), filename=str(script))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return []
    trees = [(tree, script)]
    for module in local_modules(tree, script.parent):
        try:
            trees.append((ast.parse(module.read_text(encoding="utf-8")), module))
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
    return trees


def script_options(script: Path) -> dict[str, ScriptOption]:
    """Every option the script (and its folder's modules it imports) declares literally; {} if none or unreadable."""
    return trees_options(script_trees(script))


def trees_options(trees: list[tuple[ast.Module, Path]]) -> dict[str, ScriptOption]:
    """Every option declared literally in ``trees`` (``script_trees``): the script's own declarations win."""
    found: dict[str, ScriptOption] = {}
    for tree, path in reversed(trees):
        found.update(options_in(tree, path))
    return found


def all_options(trees: list[tuple[ast.Module, Path]], options: dict[str, ScriptOption]) -> Optional[list[str]]:
    """Every option the script can take (``options``, read from its ``trees``), where its source says so
    completely, else None (nothing to refuse by).

    Complete means: an ``argparse.ArgumentParser`` is made in the files read, every ``add_argument`` there names its
    options literally (no ``*names``), no parser takes ``parents=`` (options declared elsewhere), and none parses
    with ``parse_known_args`` (the rest may go to another parser)."""
    made = False
    for tree, _ in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if called == "ArgumentParser":
                made = True
                if any(k.arg == "parents" or k.arg is None for k in node.keywords):
                    return None
            elif called == "parse_known_args":
                return None
            elif called == "add_argument" and (any(not isinstance(a, ast.Constant) for a in node.args)
                                               or any(k.arg is None for k in node.keywords)):
                return None
    if not made:
        return None
    return list(options) or None


def unknown_option(option: str, known: Optional[list[str]]) -> Optional[str]:
    """Why ``option`` is none of the script's (``all_options``), else None: unknown options are refused only where
    the script's options are all known, and argparse's unique abbreviations (``--batch`` for ``--batch-size``) pass."""
    if known is None or not option.startswith("-") or option in known:
        return None
    if option.startswith("--") and sum(k.startswith(option) for k in known) == 1:
        return None
    shown = [k for k in known if k.startswith("-") and k not in ("-h", "--help")]
    listed = ", ".join(shown[:8]) + (", ..." if len(shown) > 8 else "")
    return f"the script has no option {option!r} (its options: {listed})"


def refusal(option: ScriptOption, given: str) -> Optional[str]:
    """Why the option cannot take ``given`` (the string the script's argv will hold), or None."""
    if option.flag:
        return f"{option.option} is a flag ({option.where}): it takes no value"
    value: Any = given
    if option.type_name in ("int", "float"):
        try:
            value = CONVERTERS[option.type_name](given)
        except ValueError:
            return f"{option.option} takes {option.type_name} ({option.where}), not {given!r}"
    if option.choices is not None and value not in option.choices:
        return f"{option.option} takes one of {list(option.choices)} ({option.where}), not {given!r}"
    return None
