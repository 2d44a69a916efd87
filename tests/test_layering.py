"""The project's layering, read from its import graph: every import statement in a module,
those deferred into functions included (a cycle hidden in a function is still a cycle), and
every string that names a project module whole (`"advisor.harness.rank"`, `"pkg.mod:attr"`:
what importlib, multiprocessing's preload or `python -m` would import). Imports under
`if TYPE_CHECKING:` are left out: they never run, and only name types."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"advisor": ROOT / "advisor", "advisor.recipes": ROOT / "recipes"}  # advisor/recipes links to recipes/
SESSION = "advisor.session"
# Parent-side judgement: what measures, compares, decides and records. A measurement child never needs it.
JUDGEMENT = ("advisor.verify", "advisor.verdict", "advisor.diagnosis", "advisor.findings", "advisor.evidence", "advisor.search",
             "advisor.session", "advisor.tracking", "advisor.report", "advisor.api", "advisor.cli")
KINDS = ("train", "lightning", "script", "infer", "pipeline", "distributed")
# Each kind's parent side: judgement too.
KIND_JUDGEMENT = tuple(f"advisor.kinds.{kind}.{part}" for kind in KINDS for part in ("rules", "derive", "compare", "body"))
# What runs inside a measurement child: its entry, the user's code resolved, the shared loop, and
# each kind's child side (its job loaded, its loop).
CHILD_SIDE = ("advisor.harness.child", "advisor.workload", "advisor.harness.train", "advisor.harness.rank",
              "advisor.harness.vectorised",
              *(f"advisor.kinds.{kind}.child" for kind in KINDS if (ROOT / "advisor" / "kinds" / kind / "child.py").exists()),
              *(f"advisor.kinds.{kind}.loop" for kind in KINDS if (ROOT / "advisor" / "kinds" / kind / "loop.py").exists()))
MODULE_STRING = re.compile(r"advisor(\.\w+)+(:\w+)?")
MAX_SESSION_FUNCTION_LINES = 60
MAX_FUNCTION_LINES = 70  # anywhere else: past it, a function holds more than one idea


def module_files() -> dict[str, Path]:
    files = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = (*package.split("."), *path.relative_to(folder).with_suffix("").parts)
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def imported(name: str, known: set[str]) -> str | None:
    """The project module an imported name belongs to (the longest known prefix), or None."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `module` imports anywhere in its file."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(without_type_checking(ast.parse(path.read_text()))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_STRING.fullmatch(node.value):
            names = [node.value.split(":")[0]] if node.value.split(":")[0] in known else []
        else:
            continue
        found |= {target for name in names if (target := imported(name, known)) is not None}
    return found - {module}


def without_type_checking(tree: ast.Module) -> ast.Module:
    """The module with its `if TYPE_CHECKING:` blocks emptied."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            node.body = [ast.Pass()]
    return tree


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    known = set(files)
    return {module: imports_of(module, path, known) for module, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def within(module: str, roots: tuple[str, ...]) -> bool:
    return any(module == root or module.startswith(root + ".") for root in roots)


def test_the_cycle_finder_finds_a_cycle_through_a_deferred_import(tmp_path):
    """The checks below are only as good as the graph: an import inside a function counts, one
    for type checking does not."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from advisor import search\n"
                      "def f():\n    from advisor.session.gate import gate_candidates\n")
    assert imports_of("advisor.m", source, {"advisor", "advisor.search", "advisor.session.gate"}) == {
        "advisor.session.gate"}
    source.write_text('PRELOAD = ["advisor.harness.train"]\nENTRY = "advisor.workload:run"\nTAG = "advisor.kind"\n')
    assert imports_of("advisor.m", source, {"advisor", "advisor.harness.train", "advisor.workload"}) == {
        "advisor.harness.train", "advisor.workload"}


def test_every_kind_is_one_package_registered_once():
    """A kind's parent side, its config section and its child side live in its own package;
    the registry is the one place that lists them."""
    from advisor.kinds import KINDS, SECTIONS

    assert len(KINDS) >= 5
    for name, kind in KINDS.items():
        assert type(kind).__module__ == f"advisor.kinds.{name}", name
        assert kind.name == name
    for name, section in SECTIONS.items():
        assert section.__module__ == f"advisor.kinds.{name}.section", name


def test_outside_the_kinds_a_kind_is_reached_through_the_registry():
    """Shared modules call a kind through `advisor.kinds` (its `Kind`), never into a kind's
    package; only its config section (data) may be named, where a config is read without the
    registry (a data-parallel rank)."""
    graph = import_graph()
    for module, targets in graph.items():
        if within(module, ("advisor.kinds",)):
            continue
        inside = {t for t in targets if t.startswith("advisor.kinds.") and t != "advisor.kinds.protocol"
                  and not t.endswith(".section")}
        assert not inside, f"{module} imports {sorted(inside)}"


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_kinds_and_recipes_never_import_the_session():
    graph = import_graph()
    for module in graph:
        if within(module, ("advisor.kinds", "advisor.recipes")):
            reached = {target for target in reachable(graph, module) if within(target, (SESSION,))}
            assert not reached, f"{module} imports {sorted(reached)}"


def test_code_that_runs_in_a_measurement_child_never_imports_judgement():
    graph = import_graph()
    for module in CHILD_SIDE:
        reached = {target for target in reachable(graph, module) | {module}
                   if within(target, JUDGEMENT) or target in KIND_JUDGEMENT}
        assert not reached, f"{module} imports {sorted(reached)}"


def test_the_harness_never_names_a_recipes_plan_key():
    """The loops apply recipes through their hooks (`recipes.applied`): no recipe key is spelled there."""
    from advisor.recipes import RECIPES

    keys = {key for recipe in RECIPES for key in recipe.keys}
    for path in (ROOT / "advisor" / "harness").glob("*.py"):
        named = {node.value for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Constant) and node.value in keys}
        assert not named, f"{path.name} names {sorted(named)}"


def test_session_functions_are_short():
    for path in (ROOT / "advisor" / "session").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                assert length <= MAX_SESSION_FUNCTION_LINES, f"{path.name}: {node.name} is {length} lines"


def test_no_function_is_longer_than_seventy_lines():
    for folder in (ROOT / "advisor", ROOT / "recipes"):
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = node.end_lineno - node.lineno + 1
                    assert length <= MAX_FUNCTION_LINES, f"{path.relative_to(ROOT)}: {node.name} is {length} lines"


def test_the_code_passes_its_linter():
    """pyproject.toml's [tool.ruff]: its line length, pyflakes, pycodestyle and sorted imports."""
    import shutil
    import subprocess
    import sys

    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    done = subprocess.run([ruff, "check", "advisor", "recipes", "tests", "experiments"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:]
