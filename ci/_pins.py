"""What ci/min_constraints.py and ci/gpu_image_constraints.py share: reading
constraints.txt's pins and writing (or checking) a generated pin file."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def canon(name: str) -> str:
    """A distribution name as pip compares it ("Foo_Bar.baz" -> "foo-bar-baz")."""
    return name.lower().replace("_", "-").replace(".", "-")


def tested_pins(root: Path = ROOT) -> dict[str, str]:
    """constraints.txt's ``name==version`` lines by canonical name, in file order."""
    pins = {}
    for line in (root / "constraints.txt").read_text().splitlines():
        pin = line.split("#", 1)[0].strip()
        if "==" in pin:
            pins[canon(pin.split("==", 1)[0])] = pin
    return pins


def main(out: Path, render: Callable[[], str], script: str, doc: str,
         argv: list[str] | None = None) -> int:  # fmt: skip
    """Write ``render()`` to ``out``; ``--check``: exit 1, saying so, if ``out`` differs."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        if not out.is_file() or out.read_text() != text:
            sys.stderr.write(f"{out.relative_to(ROOT)} is stale: run python ci/{script}\n")
            return 1
        return 0
    out.write_text(text)
    sys.stdout.write(f"wrote {out.relative_to(ROOT)}\n")
    return 0
