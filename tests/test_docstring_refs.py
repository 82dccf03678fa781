"""Every code reference a docstring or comment of ``perftune/`` writes in backticks exists: a module named by its
dotted path (``perftune.engine.stats``, ``engine.paired``, ``stats.Noise``, ``paired.PairedRun.mean``) or by its file
(``burst/drain.py``, ``sequential.py``), and the name it points at inside that module.  Code moves; a sentence that
still sends the reader to the old place is worse than none.  Checked with ``ast`` (docstrings) and ``tokenize``
(comments) over the source tree, and the checker checked on a small package with one reference of each kind broken.

A dotted reference counts as one when its first part names a module or package of the tree (module file names are
unique: ``tests/test_architecture.py``), or ``perftune``.  One that does not resolve as a module may still name a
plan field (``accuracy.samples``, ``burst.drain_s``, ``plan.seed``): it is then checked against the plan's records.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
DOUBLE = re.compile(r"``([^`\s]+)``")
SINGLE = re.compile(r"(?<!`)`([^`\s]+)`(?!`)")
DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
FILE = re.compile(r"[\w./-]*\w\.(py|md|yaml|json|html|txt|csv|toml)")
#: files of other projects that docstrings cite by name (MLPerf's checker, mindcv's script and its options)
EXTERNAL = ("rcp_checker.py", "train.py", "config.py")
#: the plan's sections as a plan file and the records write them (``accuracy.samples``), and the plan itself
PLAN_RECORDS = {"plan": "Plan", "accuracy": "AccuracyGate", "burst": "BurstSettings", "decision": "DecisionRule",
                "workload": "WorkloadSpec", "distributed": "DistributedSettings"}


@dataclass(frozen=True)
class Ref:
    module: str  # the module whose docstring or comment holds it
    line: int
    text: str


class Tree:
    """The modules of ``package`` under ``src``: their files, top-level names and classes."""

    def __init__(self, src: Path, package: str):
        self.src, self.package = src, package
        self.files: dict[str, Path] = {}
        for path in sorted((src / package).rglob("*.py")):
            parts = list(path.relative_to(src).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            self.files[".".join(parts)] = path
        self.trees = {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in self.files.items()}
        #: a module's or package's last name -> its dotted names (file names are unique; packages may repeat)
        self.by_last: dict[str, list[str]] = {}
        for name in self.files:
            self.by_last.setdefault(name.rsplit(".", 1)[-1], []).append(name)
        self.classes = {node.name: node for tree in self.trees.values() for node in ast.walk(tree)
                        if isinstance(node, ast.ClassDef)}

    def top_names(self, module: str) -> Optional[set[str]]:
        """Names a module defines or imports at its top level; None when it answers any name (``__getattr__``)."""
        out: set[str] = set()
        body = list(self.trees[module].body)
        while body:
            node = body.pop(0)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(node.name)
            elif isinstance(node, ast.Assign):
                out.update(n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                out.add(node.target.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                out.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.If, ast.Try)):
                body += node.body + node.orelse + getattr(node, "finalbody", [])
                body += [s for h in getattr(node, "handlers", []) for s in h.body]
        return None if "__getattr__" in out else out

    def class_has(self, cls: ast.ClassDef, name: str, seen: frozenset = frozenset()) -> bool:
        """``name`` in the class body, set on ``self`` in a method, or in a base class of the tree."""
        for node in ast.walk(cls):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
                return True
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                return True
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return True
            if isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.value, ast.Name) \
                    and node.value.id == "self" and isinstance(node.ctx, ast.Store):
                return True
        for base in cls.bases:
            base_name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) \
                else None
            if base_name in self.classes and base_name not in seen:
                if self.class_has(self.classes[base_name], name, seen | {base_name}):
                    return True
            elif base_name is not None and base_name not in self.classes:
                return True  # a base from outside the tree (pydantic, Enum, Protocol ...) may hold it
        return False

    def imported(self, module: str) -> dict[str, str]:
        """Names ``module`` binds to modules of the tree (``from perftune.engine import stats``: ``stats``)."""
        out = {}
        for node in ast.walk(self.trees[module]):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if f"{node.module}.{a.name}" in self.files:
                        out[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Import):
                out.update({a.asname: a.name for a in node.names if a.asname and a.name in self.files})
        return out

    def module_of(self, dotted: str, here: str) -> Optional[list[str]]:
        """The modules a reference's first part names, or None when it names none (a variable, a class, a field):
        the package itself, a module ``here`` imports, a package of the tree, or a module beside ``here``."""
        first = dotted.split(".")[0]
        if first == self.package:
            return [self.package]
        imported = self.imported(here)
        if first in imported:
            return [imported[first]]
        packages = [m for m in self.by_last.get(first, []) if self.files[m].name == "__init__.py"]
        package = here if self.files[here].name == "__init__.py" else here.rsplit(".", 1)[0]
        sibling = [f"{package}.{first}"] if f"{package}.{first}" in self.files and f"{package}.{first}" != here \
            else []
        return packages + sibling or None

    def resolves(self, dotted: str, start: str) -> bool:
        """``dotted`` (its first part naming module ``start``) down to a module, then names inside it."""
        parts = dotted.split(".")[1:]
        module = start
        while parts and f"{module}.{parts[0]}" in self.files:
            module = f"{module}.{parts.pop(0)}"
        if not parts:
            return True
        names = self.top_names(module)
        if names is not None and parts[0] not in names:
            return False
        node = next((n for n in self.trees[module].body if isinstance(n, ast.ClassDef) and n.name == parts[0]), None)
        if node is None or len(parts) == 1:
            return True  # a function's or a variable's own attributes are not checked
        return self.class_has(node, parts[1])

    def plan_field(self, dotted: str) -> bool:
        """``accuracy.samples``: a field of the plan's record for that section."""
        first, *rest = dotted.split(".")
        cls = self.classes.get(PLAN_RECORDS.get(first, ""))
        return cls is not None and len(rest) == 1 and self.class_has(cls, rest[0])

    def file_of_tree(self, text: str) -> bool:
        """A path this checker answers for: a ``.py`` file, or a path under a folder of the repository or of the
        package (``trial.json``, ``mindcv/data/loader.py``, ``rcp_checker.py`` are someone else's)."""
        head = text.split("/")[0]
        folders = {p.name for p in self.src.iterdir() if p.is_dir()} | {
            m.rsplit(".", 1)[-1] for m, path in self.files.items() if path.name == "__init__.py"}
        return (text.endswith(".py") and text not in EXTERNAL) if "/" not in text else head in folders

    def file_exists(self, text: str, here: str) -> bool:
        folder = self.files[here].parent
        bases = [self.src, self.src / self.package, folder, folder.parent]
        if "/" not in text:  # a module's file name alone: ``sequential.py``
            return any(p.name == text for p in self.files.values()) or any((b / text).exists() for b in bases)
        return any((b / text).exists() for b in bases)


def references(tree: Tree) -> list[Ref]:
    """Backticked text in every docstring and comment of the tree."""
    out = []
    for module, path in tree.files.items():
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(tree.trees[module]):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    line = node.body[0].lineno
                    out += [Ref(module, line, m.group(1)) for m in DOUBLE.finditer(doc)]
                    out += [Ref(module, line, m.group(1)) for m in SINGLE.finditer(doc)]
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                out += [Ref(module, tok.start[0], m.group(1)) for p in (DOUBLE, SINGLE) for m in p.finditer(tok.string)]
    return out


def check(tree: Tree, refs: list[Ref]) -> tuple[int, list[str]]:
    """(references checked, the broken ones as ``module:line: text``)."""
    checked, broken = 0, []
    for ref in refs:
        text = ref.text.rstrip(".,;:").removesuffix("()")
        if FILE.fullmatch(text):
            if not tree.file_of_tree(text):
                continue
            checked += 1
            if not tree.file_exists(text, ref.module):
                broken.append(f"{ref.module}:{ref.line}: {ref.text} (no such file)")
        elif DOTTED.fullmatch(text):
            starts = tree.module_of(text, ref.module)
            if starts is None:
                continue  # not a module reference (``TrialSpec.data_seed``, ``self.plan``)
            checked += 1
            if not any(tree.resolves(text, s) for s in starts) and not tree.plan_field(text):
                broken.append(f"{ref.module}:{ref.line}: {ref.text}")
    return checked, broken


def test_every_code_reference_in_a_docstring_or_comment_exists():
    tree = Tree(ROOT, "perftune")
    refs = references(tree)
    checked, broken = check(tree, refs)
    assert checked > 200, f"the checker saw only {checked} references: it is not reading the docstrings"
    assert broken == []


def test_the_checker_finds_each_kind_of_broken_reference(tmp_path):
    files = {
        "demo/__init__.py": "",
        "demo/engine/__init__.py": "",
        "demo/engine/stats.py": '"""``engine.stats.Noise.sd`` and ``engine.paired``."""\nclass Noise:\n    sd = 1.0\n',
        "demo/engine/order.py": "# see ``demo.engine.stats.Noise``, ``stats.Noise.var``, ``stats.gone``, `engine/order.py`\n"
                                "# and ``engine/missing.py``, ``sequential.py``; not ``self.plan``, ``TrialSpec.x``, "
                                "``trial.json``\nx = 1\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    tree = Tree(tmp_path, "demo")
    checked, broken = check(tree, references(tree))
    assert sorted(broken) == ["demo.engine.order:1: stats.Noise.var", "demo.engine.order:1: stats.gone",
                              "demo.engine.order:2: engine/missing.py (no such file)",
                              "demo.engine.order:2: sequential.py (no such file)", "demo.engine.stats:1: engine.paired"]
    assert checked == 8
