"""bench/results holds one current result per benchmark, and the paths the docs name exist (issue 33).

The layout (bench/README.md, "How bench/results is laid out"): every folder under bench/results holds an
optional README.md and, per benchmark, at most NAME.md and NAME.json, where NAME is a benchmark of
`python -m bench` (bench/NAME/run.py), a GPU runner (bench/gpu/run_NAME.sh) or one of RETIRED.
"""  # noqa: E501
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"

# Removed probes whose results docs still cite (bench/README.md), and the make-test log of issue 33.
RETIRED = {
    "nvml_sampling_probe",
    "profiler_aftermath",
    "rank_abort",
    "host_and_fit_checks",
    "host_tick_probe",
    "accounting",
    "sampler_beside_training",
    "make_test",
}


def _names() -> set[str]:
    bench = {p.parent.name for p in (ROOT / "bench").glob("*/run.py")}
    gpu = {p.stem.removeprefix("run_") for p in (ROOT / "bench" / "gpu").glob("run_*.sh")}
    return bench | gpu | RETIRED


def test_at_most_two_files_per_benchmark_in_each_folder():
    names = _names()
    wrong = []
    for path in sorted(RESULTS.rglob("*")):
        rel = path.relative_to(RESULTS)
        if not path.is_file() or path.name == "README.md":
            continue
        stem, _, ext = path.name.partition(".")
        if ext not in ("md", "json") or stem not in names:
            wrong.append(str(rel))
    assert not wrong, f"not NAME.md or NAME.json of a benchmark (bench/README.md): {wrong}"


# A path under bench/results as the pages write it: in bench/README.md relative (results/...), in docs/  # noqa: E501
# ../bench/results/..., in README.md bench/results/...; up to a character that ends a path.
PATH = re.compile(r"(?:\.\./)*(?:bench/)?results/([A-Za-z0-9_./*{}<>,-]*)")


def _current(text: str) -> str:
    """The text less the first cell ("was") of the tables under a heading of what was removed."""
    out, removed = [], False
    for line in text.splitlines():
        if line.startswith("#"):
            removed = "removed" in line.lower()
        elif removed and line.startswith("| "):
            line = line.split(" | ", 1)[-1]
        out.append(line)
    return "\n".join(out)


def _named(page: Path) -> set[str]:
    text = _current(page.read_text())
    named = set()
    for m in PATH.finditer(text):
        before = text[max(0, m.start() - 60):m.start()]
        path = m.group(1).split("#")[0].rstrip(".,)")
        # a revision's file, not the tree's
        if "git show" in before.split("`")[-1] or ":" in before[-1:]:
            continue
        if not path or any(c in path for c in "*{}<>") or path.endswith("PATH") or "NAME" in path:
            continue  # a pattern, not a file
        if page.name == "README.md" and page.parent.name == "bench" or page.parent.name == "docs" \
                or m.group(0).startswith(("bench/", "../")):
            named.add(path)
    return named


def test_every_results_path_the_docs_name_exists():
    pages = [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]  # noqa: E501
    missing = sorted({(page.relative_to(ROOT).as_posix(), p) for page in pages for p in _named(page)
                      if not (RESULTS / p).exists()})
    assert not missing, f"bench/results paths named but absent: {missing}"
