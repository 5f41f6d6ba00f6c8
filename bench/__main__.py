"""Run one named benchmark: ``python -m bench NAME [ARGS]``; list them: ``python -m bench``.

A benchmark is a folder ``bench/NAME/`` holding ``run.py`` with ``main(argv) -> int``. The first
line of its module docstring is the claim of the README or docs it guards; ``DEVICE = "gpu"`` at
its top marks one that needs a GPU (the rest are "cpu": ``make bench`` runs them). Each writes one
result file, ``bench/results/NAME.md`` (``bench.common.write_result``: date, machine, versions,
command). The list is read from the files (``ast``), so listing imports no framework.

The GPU runners, ``bench/gpu/run_NAME.sh``, go through the same entry point: ``python -m bench gpu``
lists them (what each measures, the machine kind, the results folder), ``python -m bench gpu NAME
[ARGS]`` runs one with bash from the project root (on the GPU machine, with the Keras wheels in
``.whl/``: bench/README.md).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Benchmark:
    name: str
    claim: str
    device: str  # "cpu" or "gpu"


def _describe(run_py: Path) -> Benchmark:
    tree = ast.parse(run_py.read_text(encoding="utf-8"))
    doc = (ast.get_docstring(tree) or "").strip()
    device = "cpu"
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "DEVICE" for t in node.targets)
            and isinstance(node.value, ast.Constant)
        ):
            device = str(node.value.value)
    return Benchmark(
        run_py.parent.name, doc.splitlines()[0] if doc else "(no claim written)", device
    )


def benchmarks() -> list[Benchmark]:
    """Every folder of bench/ with a run.py, by name."""
    return [
        _describe(p)
        for p in sorted(HERE.glob("*/run.py"))
        if not p.parent.name.startswith((".", "_"))
    ]


# A GPU runner's line saying which machine it needs, what it measures and where its results go.
GPU_LINE = "# gpu runner: "


def _gpu_line(name: str) -> str:
    for line in (HERE / "gpu" / f"run_{name}.sh").read_text(encoding="utf-8").splitlines():
        if line.startswith(GPU_LINE):
            return line[len(GPU_LINE) :]
    return "(not described)"


def gpu_runners() -> list[str]:
    """Every bench/gpu/run_NAME.sh, by NAME."""
    return sorted(p.name[len("run_") : -len(".sh")] for p in (HERE / "gpu").glob("run_*.sh"))


def gpu(argv: list[str]) -> int:
    """``python -m bench gpu``: the GPU runners; ``python -m bench gpu NAME [ARGS]``: run one with
    bash."""
    names = gpu_runners()
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(
            "python -m bench gpu NAME [ARGS]   (bash bench/gpu/run_NAME.sh ARGS, from the project"
            " root, on the GPU machine with .whl/ carried)\n"
        )
        width = max((len(n) for n in names), default=4)
        for n in names:
            print(f"{n:<{width}}  {_gpu_line(n)}")
        return 0
    name, args = argv[0], argv[1:]
    if name not in names:
        print(
            f"no GPU runner {name!r} (bench/gpu/run_{name}.sh); known: {', '.join(names)}",
            file=sys.stderr,
        )
        return 2
    root = HERE.parent
    if not (root / ".whl").is_dir():
        print(
            "note: no .whl/ here; bench/gpu/setup.sh installs the Keras wheels from it"
            " (bench/README.md)",
            file=sys.stderr,
        )
    import subprocess

    return subprocess.run(
        ["bash", str(HERE / "gpu" / f"run_{name}.sh"), *args], cwd=root
    ).returncode


def run(name: str, argv: list[str]) -> int:
    if not (HERE / name / "run.py").is_file():
        known = ", ".join(b.name for b in benchmarks())
        print(f"no benchmark {name!r} (bench/{name}/run.py); known: {known}", file=sys.stderr)
        return 2
    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))
    main = importlib.import_module(f"bench.{name}.run").main
    if inspect.signature(main).parameters:
        return int(main(argv) or 0)
    # An entry point written for ``python bench/NAME/run.py`` reads sys.argv itself.
    sys.argv = [f"bench/{name}/run.py", *argv]
    return int(main() or 0)


def _list() -> int:
    rows = benchmarks()
    width = max((len(b.name) for b in rows), default=4)
    print("python -m bench NAME [ARGS]   (NAME --help for its arguments)\n")
    for b in rows:
        print(f"{b.name:<{width}}  {b.device}  {b.claim}")
    print(
        "\nGPU runners (python -m bench gpu NAME; `python -m bench gpu` says what each runs):"
        f" {', '.join(gpu_runners())}"
    )
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "list"):
        return _list()
    if argv[0] == "--names":  # the benchmarks of one device kind
        kind = argv[1] if len(argv) > 1 else "cpu"
        print(" ".join(b.name for b in benchmarks() if b.device == kind))
        return 0
    if argv[0] == "gpu":
        return gpu(argv[1:])
    if (
        argv[0] == "--all"
    ):  # make bench: each of one kind with its defaults, the failures summed up at the end
        return run_all(argv[1] if len(argv) > 1 else "cpu")
    return run(argv[0], argv[1:])


def run_all(kind: str) -> int:
    failed = []
    for b in (b for b in benchmarks() if b.device == kind):
        print(f"== python -m bench {b.name}", flush=True)
        try:
            rc = run(b.name, [])
        except (
            SystemExit
        ) as exc:  # an argparse error: the benchmark needs arguments it has no default for
            rc = exc.code if isinstance(exc.code, int) else 2
        if rc:
            failed.append(f"{b.name} (exit {rc})")
    print("all ran" if not failed else f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
