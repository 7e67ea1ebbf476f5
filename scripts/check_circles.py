"""Fail when modules of src/tidelog import each other in a circle, type-only imports included.

import-linter's layers keep packages in order, but two modules inside one package (or one
layer) may still import each other; an ``if TYPE_CHECKING:`` import is a circle of types all
the same. This walks every ``import`` / ``from ... import`` of every module, resolves it to a
module of the tree (``from pkg import name`` counts as ``pkg.name`` when that is a module),
and prints each strongly connected group of two or more modules.

    python3 scripts/check_circles.py [--src src]      # exit 1 when there is a circle
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path


def module_of(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(tree: ast.Module, module: str, is_package: bool, known: set[str]) -> set[str]:
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    out: set[str] = set()
    for name in found:
        target = name
        while target and target not in known:  # ``a.b.C`` is the module ``a.b``
            target = target.rpartition(".")[0]
        if target and target != module:
            out.add(target)
    return out


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of two or more modules, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parent.parent / "src")
    args = parser.parse_args()
    files = {module_of(p, args.src): p for p in sorted(args.src.rglob("*.py"))}
    known = set(files)
    graph = {
        module: imports_of(ast.parse(path.read_text()), module, path.name == "__init__.py", known)
        for module, path in files.items()
    }
    # A package's __init__ importing its own submodules is how a package exports; the
    # submodule importing the package back is the circle worth reporting, so the edge from
    # a package to its own children is left out.
    for module, edges in graph.items():
        if files[module].name == "__init__.py":
            graph[module] = {e for e in edges if not e.startswith(module + ".")}
    found = circles(graph)
    for group in found:
        print("import circle: " + " <-> ".join(group))
    print(f"{len(files)} modules, {len(found)} import circles")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
