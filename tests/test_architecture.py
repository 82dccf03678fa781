"""The layout's rules (perftune/README.md, "Architecture"), checked with ``ast`` over the source tree, and the
checker itself checked on a small package that breaks every rule."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400
#: modules held under a tighter limit than ``MAX_LINES``: the burst's one phase machine, whose policies live beside
#: it, and the sweep's processes, which every feature passes through (specs, the store, the budget live elsewhere)
FILE_LIMITS = {"perftune.burst.meter": 250, "perftune.engine.processes": 150}

#: (importer package, imported package): imports that must not exist, at any level of a function
FORBIDDEN = [
    ("perftune.runner", "perftune.burst"),
    ("perftune.engine", "perftune.runner"),
    ("perftune.engine", "perftune.burst"),
    ("perftune.engine", "perftune.report"),  # the engine stores decisions as data; words are perftune.words'
    ("perftune.report", "perftune.runner"),
    ("perftune.report", "perftune.burst"),
    ("perftune.compare", "perftune.runner"),
    ("perftune.compare", "perftune.burst"),
    # the burst is the child: what it shares with the parent's side sits below both (``perftune.parent_death``)
    ("perftune.burst", "perftune.engine"),
    ("perftune.burst", "perftune.runner"),
]
#: a low package: what it may import of the project besides itself, each entry with its submodules (compat: the
#: version differences, for everyone; parent_death: shared by the launchers and the burst, below both; words: the
#: records it puts in words, below the engine and the report)
LEAVES = {"perftune.io": ("perftune.errors",), "perftune.compat": (), "perftune.parent_death": (),
          "perftune.words": ("perftune.io", "perftune.errors")}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the imported module (a submodule where ``from package import name`` names one)
    names: tuple[str, ...]  # names taken from it (``from x import a, b``)
    line: int


def modules(src: Path, package: str) -> dict[str, Path]:
    """Dotted name -> file, for every ``.py`` under ``src/package``."""
    out = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(src: Path, package: str) -> list[Import]:
    """Every import of ``package``'s own modules, by every module of it."""
    known = modules(src, package)
    out = []
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [(a.name, ()) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolve against this module's package
                    here = name.split(".") if is_pkg else name.split(".")[:-1]
                    here = here[: len(here) - (node.level - 1)]
                    base = ".".join(here + ([base] if base else []))
                targets = []
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    targets.append((sub, ()) if sub in known else (base, (a.name,)))
            else:
                continue
            for target, names in targets:
                if target == package or target.startswith(package + "."):
                    out.append(Import(name, target, names, node.lineno))
    return out


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def unresolved_imports(found: list[Import], known: dict[str, Path]) -> list[str]:
    """Imports of modules that do not exist in the tree (an editable install elsewhere could still satisfy them)."""
    return [f"{i.module}:{i.line} imports {i.target}, which is not in the source tree" for i in found
            if i.target not in known]


def forbidden_imports(found: list[Import], rules=FORBIDDEN) -> list[str]:
    return [f"{i.module}:{i.line} imports {i.target}" for i in found for a, b in rules
            if _within(i.module, a) and _within(i.target, b)]


def leaf_violations(found: list[Import], leaves=LEAVES) -> list[str]:
    out = []
    for leaf, allowed in leaves.items():
        for i in found:
            outside = not _within(i.target, leaf) and not any(_within(i.target, a) for a in allowed)
            if _within(i.module, leaf) and outside:
                out.append(f"{i.module}:{i.line} imports {i.target} ({leaf} may import only {', '.join(allowed)})")
    return out


def private_imports(found: list[Import]) -> list[str]:
    """``from other_module import _name`` (or a ``_module`` of another package): reaching into someone's internals."""
    out = []
    for i in found:
        if i.target == i.module:
            continue
        private = [n for n in i.names if n.startswith("_") and not n.startswith("__")]
        private += [p for p in i.target.split(".") if p.startswith("_") and not p.startswith("__")]
        if private:
            out.append(f"{i.module}:{i.line} imports {', '.join(private)} from {i.target}")
    return out


def cycles(found: list[Import]) -> list[list[str]]:
    """Import cycles, an import inside a function counted as one at the top (it only hides the cycle until the
    function runs); importing ``a.b.c`` also runs ``a`` and ``a.b``."""
    graph: dict[str, set[str]] = {}
    for i in found:
        parts = i.target.split(".")
        for k in range(2, len(parts) + 1):
            target = ".".join(parts[:k])
            if target != i.module and not _within(i.module, target):  # a module's own package is already running
                graph.setdefault(i.module, set()).add(target)
    out, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "active"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "active":
                out.append(stack[stack.index(nxt):] + [nxt] if nxt in stack else [node, nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    return out


def long_modules(src: Path, package: str, limit: int = MAX_LINES, limits: dict[str, int] = FILE_LIMITS) -> list[str]:
    """Modules over ``limit`` lines, or over their own limit in ``limits``."""
    out = []
    for name, path in modules(src, package).items():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limits.get(name, limit):
            out.append(f"{name}: {n} lines")
    return out


# -- the project -----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def found() -> list[Import]:
    return imports(ROOT, "perftune")


def test_the_checker_sees_the_project(found):
    """A checker that finds nothing proves nothing: it must see the imports that are known to exist."""
    assert len(modules(ROOT, "perftune")) > 40
    assert any(i.module == "perftune.engine.sweep" and i.target == "perftune.io.sweep_records" for i in found)
    assert any(i.module == "perftune.commands" and i.target == "perftune.runner" for i in found)


def test_every_import_resolves_in_this_tree(found):
    assert unresolved_imports(found, modules(ROOT, "perftune")) == []


def test_no_forbidden_direction(found):
    assert forbidden_imports(found) == []


def test_io_is_a_leaf(found):
    assert leaf_violations(found) == []


def test_no_private_names_across_modules(found):
    assert private_imports(found) == []


def test_no_import_cycle(found):
    assert cycles(found) == []


def test_no_module_is_long():
    assert long_modules(ROOT, "perftune") == []


def test_the_tighter_limits_name_modules_that_exist():
    """A limit on a module that moved or was renamed would hold nothing."""
    assert set(FILE_LIMITS) <= set(modules(ROOT, "perftune"))


def test_no_module_name_is_used_twice():
    """A module's file name says what it does: two ``summary.py`` in two packages make a reader open both."""
    names: dict[str, list[str]] = {}
    for path in sorted((ROOT / "perftune").rglob("*.py")):
        if path.name not in ("__init__.py", "__main__.py"):
            names.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {n: p for n, p in names.items() if len(p) > 1} == {}


def type_names(src: Path, package: str) -> dict[str, list[str]]:
    """Class and module-level type alias names (``X = Literal[...]``, ``X = Union[...]``, ``X: TypeAlias = ...``)
    -> the modules that define them."""
    out: dict[str, list[str]] = {}
    for name, path in modules(src, package).items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found = [n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript):
                found += [t.id for t in node.targets if isinstance(t, ast.Name) and t.id[:1].isupper()]
            elif (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                  and "TypeAlias" in ast.unparse(node.annotation)):
                found.append(node.target.id)
        for n in found:
            out.setdefault(n, []).append(name)
    return out


def shared_type_names(src: Path, package: str) -> dict[str, list[str]]:
    return {n: where for n, where in type_names(src, package).items() if len(where) > 1}


#: function and class length limits (perftune/README.md, "Architecture")
MAX_FUNCTION_LINES, MAX_CLASS_LINES = 60, 200
PENDING: tuple[str, ...] = ()  # modules exempt while being split; none now


def long_definitions(src: Path, package: str, pending: tuple[str, ...] = ()) -> list[str]:
    out = []
    for name, path in modules(src, package).items():
        if any(_within(name, p) for p in pending):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            limit = (MAX_FUNCTION_LINES if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else
                     MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else None)
            if limit and node.end_lineno - node.lineno + 1 > limit:
                out.append(f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    return out


def test_no_two_types_share_a_name():
    """One name, one meaning: two ``Verdict`` types with different values make a reader guess which one a field is."""
    assert shared_type_names(ROOT, "perftune") == {}


def test_no_function_or_class_is_long():
    assert long_definitions(ROOT, "perftune", PENDING) == []


def test_every_folder_is_a_package():
    """setuptools' package discovery skips a folder without ``__init__.py``: it would be missing from the wheel."""
    folders = {p.parent for p in (ROOT / "perftune").rglob("*.py")}
    assert [str(f) for f in sorted(folders) if not (f / "__init__.py").is_file()] == []


def test_the_burst_is_started_by_name_only():
    """The runner starts ``python -m perftune.burst`` and the module runs as a script."""
    from perftune.runner.process import BURST_MODULE

    assert BURST_MODULE == "perftune.burst"
    assert (ROOT / "perftune" / "burst" / "__main__.py").is_file()


# -- the checker on a package that breaks every rule -------------------------------------------------------------------
def test_the_checker_catches_each_kind_of_violation(tmp_path):
    pkg = tmp_path / "demo"
    files = {
        "__init__.py": "",
        "errors.py": "",
        "io/__init__.py": "",
        "io/records.py": "from demo.errors import E\nfrom demo.engine import plan\n",  # leaf imports engine
        "engine/__init__.py": "",
        "engine/plan.py": "from demo.engine.sweep import run\nKind = Literal['a']\n",  # cycle plan <-> sweep
        # forbidden; a long function
        "engine/sweep.py": "import demo.engine.plan\n\ndef f():\n    from demo.runner import go\n" + "    x = 1\n" * 60
                           + "\nclass Node:\n    pass\n",
        "runner/__init__.py": "from demo.runner.local import _private_helper\n",  # private name
        "runner/local.py": "from . import process\n" + "x = 1\n" * 450,  # relative import; too long
        # shared names; a cycle with local.py through an import inside a function
        "runner/process.py": "Kind: TypeAlias = str\n\ndef f():\n    from demo.runner import local\n\nclass Node:\n"
                             + "    x = 1\n" * 200,
        "report/__init__.py": "from demo.records import gone\n",  # a module that does not exist
    }
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    found = imports(tmp_path, "demo")
    assert any(i.module == "demo.runner.local" and i.target == "demo.runner.process" for i in found)
    assert forbidden_imports(found, [("demo.engine", "demo.runner")]) == ["demo.engine.sweep:4 imports demo.runner"]
    assert leaf_violations(found, {"demo.io": ("demo.errors",)}) == [
        "demo.io.records:2 imports demo.engine.plan (demo.io may import only demo.errors)"]
    assert private_imports(found) == ["demo.runner:1 imports _private_helper from demo.runner.local"]
    found_cycles = cycles(found)
    assert any(set(c) == {"demo.engine.plan", "demo.engine.sweep"} for c in found_cycles), found_cycles
    assert any(set(c) == {"demo.runner.local", "demo.runner.process"} for c in found_cycles), found_cycles
    assert long_modules(tmp_path, "demo") == ["demo.runner.local: 451 lines"]
    assert long_modules(tmp_path, "demo", limits={"demo.runner.process": 200}) == [
        "demo.runner.local: 451 lines", "demo.runner.process: 206 lines"]
    assert shared_type_names(tmp_path, "demo") == {"Kind": ["demo.engine.plan", "demo.runner.process"],
                                                    "Node": ["demo.engine.sweep", "demo.runner.process"]}
    assert long_definitions(tmp_path, "demo") == ["demo.engine.sweep.f: 62 lines",
                                                  "demo.runner.process.Node: 201 lines"]
    assert long_definitions(tmp_path, "demo", ("demo.engine", "demo.runner")) == []
    assert unresolved_imports(found, modules(tmp_path, "demo")) == [
        "demo.report:1 imports demo.records, which is not in the source tree"]
