"""The stage boundaries, checked on the source: no cycle, no import up the pipeline.

    base (errors, trace, native, sanitize) <- record, readers <- collect | analyze <- rules <- render <- pipeline <- commands

``collect`` and ``analyze`` are siblings: both read or write the record,
neither knows the other. The Python front-end (``scaldiag.keras``,
``scaldiag.loop``, ``scaldiag.api``) sits on top, beside ``commands``. Lazy imports inside functions count:
a dependency is a dependency whenever it runs.
"""  # noqa: E501

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "scaldiag"

# layer -> the layers it may import (its own is always allowed)
ALLOWED = {
    "base": set(),
    "record": {"base"},
    "readers": {"base"},
    "collect": {"base", "record"},
    "analyze": {"base", "record"},
    "rules": {"base", "record", "analyze"},
    "render": {"base", "record", "analyze", "rules"},
    "pipeline": {"base", "record", "readers", "analyze", "rules"},
    "commands": {"base", "record", "readers", "collect", "analyze", "rules", "render", "pipeline"},
    # The Python front-end, beside the command line: the capture entry points (keras, loop, torch)
    # and scaldiag.api, which goes through the commands' own pipeline calls and ``emit`` (one way to
    # a report); nothing below imports it, the commands included.
    "api": {
        "base",
        "record",
        "readers",
        "collect",
        "analyze",
        "rules",
        "render",
        "pipeline",
        "commands",
    },
}
TOP_LEVEL = {
    "scaldiag": "base",
    "scaldiag.errors": "base",
    "scaldiag.trace": "base",
    "scaldiag.native": "base",
    "scaldiag.sanitize": "base",
    "scaldiag.engines": "base",
    "scaldiag.pipeline": "pipeline",
    "scaldiag.keras": "api",
    "scaldiag.loop": "api",
    "scaldiag.torch": "api",
    "scaldiag.api": "api",
    "scaldiag.capturing": "api",
    "scaldiag.ipython": "api",
    "scaldiag.lightning": "api",
    "scaldiag.hf": "api",
    "scaldiag.cli": "commands",
    "scaldiag.__main__": "commands",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> str:
    if module in TOP_LEVEL:
        return TOP_LEVEL[module]
    return module.split(".")[1]


def imports(path: Path, modules: set[str]) -> set[str]:
    """The scaldiag modules ``path`` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found |= {n for n in names if n in modules}
    return found


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files)
    return {m: imports(p, modules) - {m} for m, p in files.items()}


def test_every_module_has_a_layer():
    for module in graph():
        assert layer(module) in ALLOWED, f"{module}: no layer (add it to ALLOWED or TOP_LEVEL)"


def test_no_import_runs_up_the_pipeline():
    upward = [
        f"{m} ({layer(m)}) imports {d} ({layer(d)})"
        for m, deps in graph().items()
        for d in sorted(deps)
        if layer(d) != layer(m) and layer(d) not in ALLOWED[layer(m)]
    ]
    assert upward == []


def test_no_import_cycle():
    g = graph()
    # A package importing its own submodules (``rules/__init__`` lists the rules) is how a package
    # exposes them, not a cycle of stages; submodules must still not import each other in a loop.
    g = {m: {d for d in deps if not d.startswith(m + ".")} for m, deps in g.items()}
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(g[node]):
            if state.get(dep) == 1:
                cycles.append(" -> ".join(path[path.index(dep) :] + [dep]))
            elif dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for module in sorted(g):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_the_check_sees_real_imports():
    """Guard the guard: the graph holds the edges everyone knows are there."""
    g = graph()
    assert "scaldiag.analyze.profile" in g["scaldiag.pipeline"]
    assert "scaldiag.record.rundir" in g["scaldiag.collect.recorder"]
    assert (
        "scaldiag.collect.frameworks.keras_callback" in g["scaldiag.collect.frameworks.keras_hooks"]
    )


def _string_constants(path: Path) -> set[str]:
    """The string constants of ``path``'s code, docstrings left out (prose may name a file)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    }


def test_the_run_directorys_file_names_are_spelled_in_one_module():
    """run.json and the other files of a run directory: named in record/rundir.py, imported
    everywhere else."""
    from scaldiag.record import rundir

    names = {
        *rundir.JSON_FILES,
        rundir.STEPS,
        rundir.MARKS,
        rundir.DEVICE_STEPS,
        rundir.GPU_SAMPLES,
        rundir.HOST_SAMPLES,
        rundir.SWEEP_JSON,
    }
    spelled = {
        str(p.relative_to(ROOT)): sorted(_string_constants(p) & names)
        for p in PACKAGE.rglob("*.py")
    }
    assert {p: n for p, n in spelled.items() if n and p != "scaldiag/record/rundir.py"} == {}


def test_capture_s_environment_variables_are_named_in_collect_env():
    """Every SCALDIAG_ variable is named in collect/env.py, but the knobs of the layers below
    capture
    (which may not import it), each named once where it is read."""
    below = {
        "scaldiag/native.py": {"SCALDIAG_NATIVE"},
        "scaldiag/readers/xplane/read.py": {"SCALDIAG_DECODE_WORKERS"},
        "scaldiag/analyze/interconnect.py": {"SCALDIAG_CALIBRATION"},
    }
    spelled = {
        str(p.relative_to(ROOT)): {s for s in _string_constants(p) if s.startswith("SCALDIAG_")}
        for p in PACKAGE.rglob("*.py")
    }
    assert {
        p: s
        for p, s in spelled.items()
        if s and p != "scaldiag/collect/env.py" and s != below.get(p)
    } == {}


def _module_table() -> tuple[set[str], dict[str, set[str]]]:
    """docs/architecture.md's module table: the paths each row's first cell names (a bare file name
    after a
    path names a file beside it: "`collect/frameworks/adapters.py`, `guard.py`"), and for a folder's
    row the file names its second cell names."""
    import re

    rows = [
        line
        for line in (ROOT / "docs" / "architecture.md").read_text().splitlines()
        if line.startswith("| `")
    ]
    named, in_folder = set(), {}
    for row in rows:
        first, rest = row.split("|")[1], "|".join(row.split("|")[2:])
        folder = ""
        for path in re.findall(r"`([^`]+)`", first):
            path = path if "/" in path or not folder else folder + path
            folder = (
                path if path.endswith("/") else path.rpartition("/")[0] + "/" if "/" in path else ""
            )
            named.add(path)
            if path.endswith("/"):
                in_folder[path] = {
                    n.rpartition("/")[2] for n in re.findall(r"`([\w./]+\.(?:py|c))`", rest)
                }
    return named, in_folder


def _defines_something(path: Path) -> bool:
    return path.suffix == ".c" or any(
        not isinstance(n, (ast.Expr, ast.Import, ast.ImportFrom))
        for n in ast.parse(path.read_text()).body
    )


def test_the_module_table_names_every_module_and_only_modules_that_exist():
    """A newcomer reads docs/architecture.md's table to find a module: every module that defines
    anything is
    in it (a package's ``__init__.py`` through its folder's row), and every path it names exists."""
    from fnmatch import fnmatch

    named, in_folder = _module_table()

    def listed(rel: str) -> bool:
        folder, _, name = rel.rpartition("/")
        folder = folder + "/" if folder else ""
        return (
            rel in named
            or any("*" in n and fnmatch(rel, n) for n in named)
            or name in in_folder.get(folder, ())
            or (name == "__init__.py" and folder in named)
        )

    sources = [
        p for p in PACKAGE.rglob("*") if p.suffix in (".py", ".c") and "__pycache__" not in p.parts
    ]
    unlisted = sorted(
        str(p.relative_to(PACKAGE))
        for p in sources
        if _defines_something(p) and not listed(str(p.relative_to(PACKAGE)))
    )
    assert unlisted == [], "add these to docs/architecture.md's module table"
    gone = sorted(n for n in named if "*" not in n and not (PACKAGE / n).exists())
    assert gone == [], "docs/architecture.md's module table names modules that do not exist"
