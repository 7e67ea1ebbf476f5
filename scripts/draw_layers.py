"""Draw docs/layers.png from the import-linter layers contracts in pyproject.toml.

Two stacks side by side: the packages of ``tidelog`` (the "Layers" contract) and the
subpackages of ``tidelog.server`` (the contract whose ``containers`` is ``tidelog.server``),
top layer first, each box labelled with the first sentence of its package docstring. A box
may import the boxes below it, never those above (import-linter enforces it in
``make lint``).

    .venv/bin/python scripts/draw_layers.py [--output docs/layers.png]
"""

from __future__ import annotations

import argparse
import ast
import textwrap
import tomllib
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch

ROOT = Path(__file__).resolve().parent.parent


def contracts() -> tuple[list[str], list[str], str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    top: list[str] = []
    server: list[str] = []
    container = "tidelog.server"
    for contract in config["contracts"]:
        if contract.get("type") != "layers":
            continue
        if contract.get("containers"):
            container = contract["containers"][0]
            server = list(contract["layers"])
        else:
            top = list(contract["layers"])
    return top, server, container


def job(module: str) -> str:
    """The first sentence of a package's (or module's) docstring."""
    base = ROOT / "src" / Path(*module.split("."))
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = " ".join(doc.split("\n\n")[0].split()).replace("``", "")
    head, colon, rest = first.partition(": ")
    if colon and " " not in head.strip():  # "tidelog.zk: ZooKeeper access ..."
        first = rest
    first = first.split(". ")[0]
    return first[:1].upper() + first[1:].rstrip(".")


def draw_stack(ax: plt.Axes, layers: list[str], prefix: str, title: str) -> None:
    ax.set_xlim(0, 1)
    ax.set_ylim(0, len(layers))
    ax.axis("off")
    ax.set_title(title, fontsize=11, loc="left")
    for i, layer in enumerate(layers):
        y = len(layers) - i - 1
        names = [n.strip() for n in layer.split("|")]
        width = 1 / len(names)
        for j, name in enumerate(names):
            x = j * width
            ax.add_patch(
                FancyBboxPatch(
                    (x + 0.01, y + 0.08),
                    width - 0.02,
                    0.84,
                    boxstyle="round,pad=0.005",
                    facecolor="#e8f0fb" if i % 2 else "#f4f8fd",
                    edgecolor="#4a6fa5",
                )
            )
            full = name if name.startswith(prefix) else prefix + name
            short = full.removeprefix(prefix)
            label = textwrap.shorten(job(full), width=int(190 * width), placeholder=" ...")
            label = textwrap.fill(label, width=int(100 * width))
            ax.text(x + 0.03, y + 0.72, short, fontsize=9, weight="bold", va="top")
            ax.text(x + 0.03, y + 0.5, label, fontsize=6.5, va="top", color="#333333")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "layers.png")
    args = parser.parse_args()
    top, server, container = contracts()
    rows = max(len(top), len(server))
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 0.62 * rows + 0.8))
    draw_stack(left, top, "tidelog.", "tidelog: each layer imports only those below it")
    draw_stack(right, server, f"{container}.", f"{container}: the broker shell, the same rule")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
