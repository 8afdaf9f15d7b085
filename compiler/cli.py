"""The ``fuelc`` console script. Subcommands delegate to their modules:

    fuelc opt in.mlir --pass-pipeline='builtin.module(fuel-fuse)'   # compiler.opt
"""
from __future__ import annotations

import sys
from typing import Optional, Sequence

SUBCOMMANDS = {
    "opt": ("compiler.opt", "run a pass pipeline over fuel dialect text (like mlir-opt)"),
}


def _usage() -> str:
    lines = ["usage: fuelc <command> [args...]", "", "commands:"]
    lines += [f"  {name:10s} {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd not in SUBCOMMANDS:
        print(f"fuelc: unknown command {cmd!r}\n{_usage()}", file=sys.stderr)
        return 2
    import importlib
    return importlib.import_module(SUBCOMMANDS[cmd][0]).main(rest)


if __name__ == "__main__":
    sys.exit(main())
