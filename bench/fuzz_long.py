"""The long fuzz run: 10,000+ damaged traces, run and sweep directories; 0 uncaught exceptions expected.

    .venv/bin/python bench/fuzz_long.py [--cases N] [--out bench/results/fuzz_long.md]

The generators are tests/test_fuzz.py's (hypothesis strategies, drawn here
with a fixed seed per target so a run is reproducible). Seeds: the
hand-built trace of the tests, and the real fixtures (TF CPU traces, the
H200 JAX trace) for mutation. Each case runs under a 20 s alarm (a hang
is a failure) and the peak RSS of the process is reported. Any exception
other than ScaldiagError is counted, and its first instances printed.
"""

from __future__ import annotations

import argparse
import collections
import glob
import platform
import resource
import signal
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import test_fuzz as fz  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

CASE_TIMEOUT_S = 20


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=10_000, help="total cases over the four targets")
    parser.add_argument("--out", type=Path, help="write the result as markdown here")
    args = parser.parse_args()
    fixtures = [Path(p).read_bytes() for p in sorted(glob.glob(str(ROOT / "fixtures" / "**" / "*.xplane.pb"),
                                                                recursive=True))]
    seeds = [fz.SEED, *fixtures]
    share = {"mutated traces (hand-built seed and real fixtures)": 0.3, "generated traces, stats of any type": 0.2,
             "damaged run directories (with and without a trace)": 0.35, "damaged sweeps (a failed point or not)": 0.15}
    targets = {
        list(share)[0]: (st.tuples(st.sampled_from(range(len(seeds))), fz.MUTATIONS),
                         lambda case: fz.trace_case(fz._mutate(seeds[case[0]], case[1]))),
        list(share)[1]: (fz.generated_trace(), fz.trace_case),
        list(share)[2]: (st.tuples(fz.DAMAGES, st.booleans()), lambda case: fz.run_case(case[0], fz.SEED if case[1]
                                                                                         else None)),
        list(share)[3]: (st.tuples(fz.DAMAGES, st.booleans()), lambda case: fz.sweep_case(*case)),
    }
    signal.signal(signal.SIGALRM, _alarm)
    results: dict[str, collections.Counter] = {}
    failures: list[str] = []
    slowest = 0.0
    started = time.time()
    for name, (strategy, run) in targets.items():
        count = collections.Counter()
        n = max(1, int(args.cases * share[name]))
        worst = _make_case(name, strategy, run, count, failures, n)()
        slowest = max(slowest, worst)
        results[name] = count
        print(f"{name}: {dict(count)}", file=sys.stderr)
    wall = time.time() - started
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    text = report(results, failures, wall, rss_mb, slowest, args.cases)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 1 if failures else 0


def _make_case(name, strategy, run, count, failures, n):
    slowest = [0.0]

    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(strategy)
    def case(value):
        t0 = time.perf_counter()
        signal.alarm(CASE_TIMEOUT_S)
        try:
            count[run(value)] += 1
        except Hang:
            count["hang"] += 1
            failures.append(f"{name}: hang over {CASE_TIMEOUT_S} s")
        except Exception as exc:
            count["uncaught"] += 1
            if len(failures) < 20:
                failures.append(f"{name}: {type(exc).__name__}: {exc}\n" + traceback.format_exc(limit=-4))
        finally:
            signal.alarm(0)
            slowest[0] = max(slowest[0], time.perf_counter() - t0)

    def run_all() -> float:
        case()
        return slowest[0]
    return run_all


def report(results, failures, wall, rss_mb, slowest, cases) -> str:
    total = collections.Counter()
    for c in results.values():
        total.update(c)
    lines = ["# Long fuzz run", "",
             f"- date: {time.strftime('%Y-%m-%d %H:%M %Z')}",
             f"- machine: {platform.node()}, {platform.machine()}, {platform.processor() or '?'}, "
             f"Python {platform.python_version()}, {platform.system()} {platform.release()}",
             f"- command: `.venv/bin/python bench/fuzz_long.py --cases {cases} --out bench/results/fuzz_long.md`",
             f"- wall time: {wall:.0f} s; slowest case {slowest:.2f} s (limit {CASE_TIMEOUT_S} s); "
             f"peak RSS of the whole run {rss_mb:.0f} MiB", "",
             "| target | cases | report | ScaldiagError (exit 2) | uncaught | hangs |", "|---|---|---|---|---|---|"]
    for name, c in [*results.items(), ("**all**", total)]:
        lines.append(f"| {name} | {sum(c.values())} | {c['ok']} | {c['error']} | {c['uncaught']} | {c['hang']} |")
    lines += ["", "Hypothesis counts cases it generated; it may run a few more than asked (shrinking) or fewer "
              "(when a strategy's space is exhausted)."]
    if failures:
        lines += ["", "## Failures (first 20)", "", "```", *failures, "```"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
