"""The package's import map: no cycles, and imports that point down the layers only."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "workflow" / "volsweep"
#: Layers, lowest first: a module imports only from its own layer or lower ones.
LAYERS = [
    {"volsweep.validation", "volsweep.backend", "volsweep.tiling", "volsweep.progress",
     "volsweep.provenance", "volsweep.devices", "volsweep._cufft_lengths"},
    {"volsweep.engine", "volsweep.thickness", "volsweep.fftconv", "volsweep.synthetic"},
    {"volsweep.io", "volsweep.phase", "volsweep.plots"},
    {"volsweep.jobs", "volsweep.estimate", "volsweep.config"},
    {"volsweep.steps"},
]


def modules():
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def import_map():
    """module -> the volsweep modules it imports (at module level or inside functions)."""
    mods = modules()
    edges = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                full = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
                for alias in node.names:
                    found.add(f"{full}.{alias.name}" if f"{full}.{alias.name}" in mods else full)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        edges[name] = {m for m in found if m in mods and m != name and m != "volsweep"}
    return edges


def layer_of(name):
    for i, layer in enumerate(LAYERS):
        if any(name == top or name.startswith(top + ".") for top in layer):
            return i
    raise AssertionError(f"{name} belongs to no layer: add it to LAYERS")


def test_no_import_cycles():
    edges = import_map()
    state = {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                raise AssertionError(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])


def test_imports_point_down_the_layers():
    upward = [f"{a} -> {b}" for a, targets in import_map().items() for b in targets
              if a != "volsweep" and layer_of(b) > layer_of(a)]
    assert not upward, upward


def test_back_ends_do_not_import_their_facade():
    edges = import_map()
    for back_end, facade in (("volsweep.engine._gpu", "volsweep.engine"),
                             ("volsweep.engine._cpu", "volsweep.engine"),
                             ("volsweep.thickness._gpu", "volsweep.thickness"),
                             ("volsweep.thickness._cpu", "volsweep.thickness")):
        assert facade not in edges[back_end], back_end
    assert "volsweep.thickness._cpu" not in edges["volsweep.thickness._gpu"]
