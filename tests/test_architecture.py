"""The shape of the code: one folder per layer, imports that run one way (type-only imports too), no cycle, no
huge module, a thin agent core and a small public face at the top of the package."""

import ast
from functools import cache
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[1]
PACKAGE = CHECKOUT / "anges"
LAYERS = {
    # entry points: the `anges` command hosts the others' subcommands
    "cli": 10, "web": 9, "batch": 9, "acp": 9,
    "agents": 8,  # the loop and the agent types
    "telemetry": 7,  # listens to what agents do; `anges stats`
    "hooks": 7,  # the user's and the plug-ins' hooks at the points of a run
    "actions": 7, "safety": 6, "tools": 5, "checkpoints": 5, "prompt": 4, "models": 4,
    "store": 3,  # the record: events, streams, their files
    "config": 2,
    "registry": 1, "util": 1, "plugins": 0, "exceptions": 0,
}
"""Each folder (or top-level module) and its floor: a module may import from a lower floor or its own folder."""
ALLOWED_ACROSS = {("cli", "batch"), ("cli", "acp"), ("cli", "web")}
"""Imports between folders of the same floor that are part of the design."""


def module_files() -> dict[str, Path]:
    """Every module of the package by dotted name; `web/` is `anges.web`."""
    modules = {}
    for root, prefix in ((PACKAGE, ()), (CHECKOUT / "web", ("web",))):
        for path in root.rglob("*.py"):
            parts = ["anges", *prefix, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The anges modules `module` imports anywhere: in functions and under `if TYPE_CHECKING:` too."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names)
    resolved = set()
    for name in found:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name and name != module:
            resolved.add(name)
    return resolved


@cache
def graph() -> dict[str, frozenset[str]]:
    modules = module_files()
    return {module: frozenset(imports_of(module, path, modules)) for module, path in modules.items()}


def layer(module: str) -> str:
    """The folder (or top-level module) a module belongs to; "" for the package itself."""
    return module.split(".")[1] if "." in module else ""


def cycles(edges: dict[str, frozenset[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in edges[node]:
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while not group or group[-1] != node:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                groups.append(sorted(group))

    for node in edges:
        if node not in index:
            connect(node)
    return groups


def upward(edges: dict[str, frozenset[str]]) -> list[str]:
    """The imports that do not run down the floors of `LAYERS`."""
    wrong = []
    for module, imported in edges.items():
        for other in imported:
            here, there = layer(module), layer(other)
            if there == "" or here == there or (here, there) in ALLOWED_ACROSS or here == "__main__":
                continue  # the package itself imports nothing (its names load lazily); `python -m anges` is the top
            if LAYERS[here] <= LAYERS[there]:
                wrong.append(f"{module} -> {other}")
    return sorted(wrong)


def test_the_checks_find_a_cycle_and_an_import_that_runs_up():
    assert cycles({"a": frozenset("b"), "b": frozenset("c"), "c": frozenset("a"), "d": frozenset("a")}) == [
        ["a", "b", "c"]]
    edges = {"anges.store.events": frozenset({"anges.agents.base"}), "anges.agents.base": frozenset(),
             "anges.cli.main": frozenset({"anges.batch.runner"}), "anges.batch.runner": frozenset()}
    assert upward(edges) == ["anges.store.events -> anges.agents.base"]


def test_every_folder_has_a_floor_and_the_root_package_imports_nothing():
    assert {layer(module) for module in graph()} - {"", "__main__"} == set(LAYERS)
    assert graph()["anges"] == frozenset()  # `import anges` loads names on first use only


def test_no_import_cycles_type_only_imports_included():
    assert cycles(graph()) == []


def test_imports_run_one_way_down_the_layers():
    assert upward(graph()) == []


def test_at_most_twelve_floors_from_the_entry_points_down():
    folders: dict[str, set[str]] = {}
    for module, imported in graph().items():
        folders.setdefault(layer(module), set()).update(layer(other) for other in imported if layer(other) != layer(module))

    @cache
    def height(folder: str) -> int:
        return 1 + max((height(other) for other in folders.get(folder, ()) if other), default=0)

    assert height("__main__") <= 12


def test_a_small_public_face_a_thin_core_and_no_huge_module():
    top = [path.name for path in PACKAGE.glob("*.py") if path.name != "__init__.py"]
    assert len(top) <= 8, top
    sizes = {module: len(path.read_text().splitlines()) for module, path in module_files().items()}
    assert sizes["anges.agents.base"] <= 300
    assert {module: size for module, size in sizes.items() if size > 500} == {}


@pytest.mark.parametrize("name", ["DefaultAgent", "BaseAgent", "Orchestrator", "Event", "EventStream", "EventStore",
                                  "Store", "load_config", "Action", "ActionContext", "Param", "Decision",
                                  "ApprovalRequest", "ScriptedModel", "get_model"])
def test_the_public_names_load_from_the_package(name):
    import anges

    assert getattr(anges, name) is not None
