"""``python -m bench fuzz --mode job``: damaged node directories of a multi-node job through
``report NODE_DIR...``.

The nodes are built from real rank traces (fixtures/kineto/cpu_ddp_gloo,
fixtures/x2_devset/torch_ddp_sync_2gpu, fixtures/kineto/synthetic_gpu: one rank a node, as
tests/test_hostile_round3.py builds them; four nodes of the gloo ranks, two nodes of two ranks, and
two copies of the real run directory fixtures/kineto/h200_healthy_run), each node's run.json as
``profile --nnodes`` writes it (``node``, ``started_ns``/``ended_ns``, ``intra_node_allreduce``).
Each case applies 1-4 damages: run.json damaged as a file (rundir mode's damages) or in its node
fields, times and intra-node table; a rank trace mutated (kineto mode's mutations), truncated,
gzip-damaged, a bomb, sparse, a FIFO, a link to /dev/zero; node clocks moved apart (1 ms to a
century); another job's trace or rendezvous; a rank copied into another node or twice into one, a
node named twice; absurd sizes (run.json over 16 MiB, 300 rank files, 12 nodes, nnodes 10^6); odd
names (newlines, bidi, ``rank²``, 200 characters); the shared folder instead of the nodes. The
command is ``report`` in the terminal, JSON, Perfetto or HTML, to stdout or ``-o FILE``, with
``--json FILE`` or ``-``, sometimes ``-o`` naming one of the inputs. Beyond the common checks (no
uncaught exception, no exit 70, 10 s), ``verify`` checks that nothing is lost: an output that
existed is as it was when the command fails, an input named as output is untouched, no temporary is
left, and a report that exits 0 wrote every file it was asked for.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GLOO = ROOT / "fixtures/kineto/cpu_ddp_gloo/plugins/profile/torch"
X2 = ROOT / "fixtures/x2_devset/torch_ddp_sync_2gpu"
SYN = ROOT / "fixtures/kineto/synthetic_gpu"
HEALTHY = ROOT / "fixtures/kineto/h200_healthy_run"
SOURCES = {
    "gloo": [GLOO / "rank0.pt.trace.json.gz", GLOO / "rank1.pt.trace.json.gz"],
    "x2": [X2 / "rank0.pt.trace.json.gz", X2 / "rank1.pt.trace.json.gz"],
    "synthetic": [SYN / "rank0.pt.trace.json", SYN / "rank1.pt.trace.json"],
    "healthy": [HEALTHY / "trace/plugins/profile/torch/rank0.pt.trace.json.gz"],
}
SENTINEL = b"an earlier report, which a failed command must leave as it was\n"
MS = 10**6
S = 10**9
NODE_FIELDS = ["nnodes", "node_rank", "host", "launcher", "rdzv_endpoint", "nproc_per_node"]
ODD_DIR_NAMES = [
    "node\n1",
    "n\u00f6de",
    "\u202enode",
    "a b",
    "x" * 200,
    "rank\u00b2",
    "node\x1b[31m",
    "-node",
    "node\u2028",
    "..node",
    "--",
]
ODD_TRACE_NAMES = [
    "rank\u00b2.pt.trace.json.gz",
    "x.pt.trace.json.gz",
    ".pt.trace.json.gz",
    "rank0.pt.trace.json.gz.pt.trace.json",
    "r\nank0.pt.trace.json.gz",
    "rank-1.pt.trace.json.gz",
    "rank99999999999999999999.pt.trace.json.gz",
    "rank0.xplane.pb",
]
ODD_HOSTS = [
    "h\nfake line",
    "\x1b[2J",
    "\u202eevil",
    "x" * 10_000,
    "",
    "h/../..",
    "\u00b2",
    "a\x00b",
]


def _load(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)


class Node:
    """One node directory in the making: run.json as a dict (or bytes once damaged), its rank
    traces, other files."""

    def __init__(self, name: str, run: dict, traces: list[list], files: dict[str, bytes]):
        self.name, self.run, self.traces, self.files = (
            name,
            run,
            traces,
            files,
        )  # traces: [relpath, doc, gz]


class JobCases:
    def __init__(self):
        self.docs = {k: [_load(p) for p in v] for k, v in SOURCES.items()}
        self.healthy_files = {
            str(p.relative_to(HEALTHY)): p.read_bytes()
            for p in HEALTHY.rglob("*")
            if p.is_file() and "trace" not in p.relative_to(HEALTHY).parts
        }
        self.healthy_run = json.loads(self.healthy_files.pop("run.json"))
        from bench.fuzz import run as fuzz

        self.fuzz = fuzz
        self.bombs = [fuzz._bomb(n) for n in (2 << 20, 8 << 20)]
        self.outputs: list[tuple[Path, bool]] = []  # (path, existed before)
        self.inputs_named: list[
            tuple[Path, str]
        ] = []  # an input given as an output: (path, its hash)

    # -- the job before damage ---------------------------------------------------------------------

    def _template(self, rng) -> tuple[str, list[Node]]:
        kind = rng.choices(
            ["gloo", "x2", "synthetic", "gloo4", "gloo2x2", "healthy"], [30, 20, 15, 10, 10, 15]
        )[0]
        nodes: list[Node] = []
        if kind in ("gloo", "x2", "synthetic"):
            for k, doc in enumerate(self.docs[kind]):
                nodes.append(self._node(k, 2, [[f"trace/rank{k}.pt.trace.json.gz", doc, True]]))
        elif kind == "gloo4":
            for k in range(4):
                doc = _shifted(self.docs["gloo"][k % 2], (k // 2) * MS)
                nodes.append(
                    self._node(
                        k, 4, [[f"trace/plugins/profile/torch/rank{k}.pt.trace.json.gz", doc, True]]
                    )
                )
        elif kind == "gloo2x2":
            for k in range(2):
                traces = [
                    [
                        f"trace/rank{2 * k + r}.pt.trace.json.gz",
                        _shifted(self.docs["gloo"][r], k * MS),
                        True,
                    ]
                    for r in range(2)
                ]
                nodes.append(self._node(k, 2, traces, nproc=2))
        # two copies of a real run directory, the second's clock 1 ms off (not the same trace)
        else:
            for k in range(2):
                run = {**self.healthy_run, **self._node(k, 2, []).run}
                doc = _shifted(self.docs["healthy"][0], k * MS)
                nodes.append(
                    Node(
                        f"node{k}",
                        run,
                        [["trace/plugins/profile/torch/rank0.pt.trace.json.gz", doc, True]],
                        dict(self.healthy_files),
                    )
                )
        return kind, nodes

    def _node(self, k: int, n: int, traces: list, nproc: int = 1) -> Node:
        base = 1790857026 * S
        run = {
            "schema_version": 1,
            "status": "finished",
            "exit_code": 0,
            "host": f"h{k}",
            "started_ns": base - 5 * S,
            "ended_ns": base + 300 * S,
            "node": {
                "nnodes": n,
                "node_rank": k,
                "host": f"h{k}",
                "launcher": "torchrun",
                "rdzv_endpoint": "10.0.0.1:29500",
                "nproc_per_node": nproc,
            },
            "intra_node_allreduce": {
                "bytes": 8_000_000,
                "repeats": 5,
                "times_ns": {
                    "1": [2_100_000, 2_000_000, 2_200_000],
                    "4": [900_000, 950_000, 1_000_000],
                },
            },
        }
        return Node(f"node{k}", run, traces, {})

    # -- damages -----------------------------------------------------------------------------------

    def make(self, rng, work: Path) -> tuple[str, list[list[str]]]:
        self.outputs, self.inputs_named = [], []
        kind, nodes = self._template(rng)
        log = [kind]
        post: list = []  # damages on the written files (bytes, links, FIFOs)
        layout = "dirs"
        for _ in range(rng.randint(1, 4)):
            op = rng.choices(
                [
                    "runfile",
                    "nodefield",
                    "span",
                    "intra",
                    "mutate",
                    "tracefile",
                    "clock",
                    "otherjob",
                    "duprank",
                    "absurd",
                    "names",
                    "layout",
                ],
                [10, 14, 6, 5, 14, 12, 10, 6, 7, 5, 6, 5],
            )[0]
            node = rng.choice(nodes)
            if op == "runfile":
                post.append(("runfile", node))
            elif op == "tracefile" and node.traces:
                post.append(("tracefile", node, rng.randrange(len(node.traces))))
            elif op == "layout":
                layout = rng.choice(
                    ["parent", "parent+junk", "twice", "missing", "file", "one", "link"]
                )
                log.append(f"layout {layout}")
            else:
                log.append(self._damage(op, node, nodes, rng))
        job = work / "job"
        dirs = self._write(nodes, job)
        for what in post:
            if what[0] == "runfile":
                d = dirs[nodes.index(what[1])]
                if (d / "run.json").is_file() and not (d / "run.json").is_symlink():
                    log.append(
                        f"{what[1].name}/run.json: {self.fuzz._damage_file(d / 'run.json', rng)}"
                    )
            else:
                d = dirs[nodes.index(what[1])]
                log.append(
                    f"{what[1].name}/trace:"
                    f" {self._damage_trace_file(d / what[1].traces[what[2]][0], rng)}"
                )
        paths = self._paths(layout, dirs, job, work, rng)
        return "; ".join(log), [self._argv(paths, dirs, work, rng, log)]

    def _damage(self, op: str, node: Node, nodes: list[Node], rng) -> str:
        fz = self.fuzz
        if not isinstance(node.run, dict):
            node.run = {}
        if op == "nodefield":
            field = rng.choice(NODE_FIELDS + ["node"])
            value = rng.choice(
                [
                    fz._weird(rng),
                    "DROP",
                    10**6,
                    2**20,
                    2**20 - 1,
                    len(nodes),
                    1,
                    -1,
                    rng.choice(ODD_HOSTS),
                    (
                        nodes[0].run.get("node", {}).get("node_rank", 0)
                        if isinstance(nodes[0].run.get("node"), dict)
                        else 0
                    ),
                ]
            )
            if field == "node":
                node.run = fz._set_path(node.run, "node", value, rng)
            else:
                inner = node.run.get("node") if isinstance(node.run.get("node"), dict) else {}
                node.run = {**node.run, "node": fz._set_path(inner, field, value, rng)}
            return (
                f"{node.name}: node.{field}={value!r:.50}"
                if field != "node"
                else f"{node.name}: node={value!r:.50}"
            )
        if op == "span":
            field = rng.choice(["started_ns", "ended_ns", "both"])
            how = rng.choice(["weird", "shift", "swap"])
            if how == "weird":
                value = rng.choice([fz._weird(rng), "DROP"])
                for f in ["started_ns", "ended_ns"] if field == "both" else [field]:
                    node.run = fz._set_path(node.run, f, value, rng)
                return f"{node.name}: {field}={value!r:.50}"
            if how == "shift":
                by = rng.choice(
                    [61 * S, -61 * S, 3600 * S, 86400 * S, -(100 * 365 * 86400 * S), 30 * S]
                )
                for f in ["started_ns", "ended_ns"] if field == "both" else [field]:
                    if isinstance(node.run.get(f), int):
                        node.run[f] += by
                return f"{node.name}: {field} moved {by / S:+.0f} s"
            node.run["started_ns"], node.run["ended_ns"] = (
                node.run.get("ended_ns"),
                node.run.get("started_ns"),
            )
            return f"{node.name}: ended before started"
        if op == "intra":
            value = rng.choice(
                [
                    fz._weird(rng),
                    "DROP",
                    [1, 2, 3],
                    {"times_ns": fz._weird(rng)},
                    {"times_ns": [10**6] * 100_000},
                    {"times_ns": {"\u00b2": [1000], "0": [1000]}},
                    {"times_ns": {"9" * 10: [1000], "1" * 9: [fz._weird(rng)]}},
                    {"times_ns": {str(i): [1000 + i] for i in range(1, 5000)}},
                    {"times_ns": {"1": [2**62, 2**63, 0, -1, 1.5]}},
                ]
            )
            node.run = fz._set_path(node.run, "intra_node_allreduce", value, rng)
            return f"{node.name}: intra_node_allreduce={value!r:.50}"
        if op == "mutate" and node.traces:
            t = rng.choice(node.traces)
            sub: list[str] = []
            t[1] = fz._mutate_kineto(t[1], rng, sub)
            return f"{node.name}/{Path(t[0]).name}: " + ", ".join(sub)
        if op == "clock" and node.traces:
            by = rng.choice(
                [
                    MS,
                    50 * MS,
                    30 * S,
                    59 * S,
                    61 * S,
                    55 * 60 * S,
                    86400 * S,
                    -(100 * 365 * 86400 * S),
                    "zero",
                    "drop",
                    "weird",
                    2**62,
                    2**63,
                ]
            )
            for t in node.traces:
                t[1] = dict(t[1])
                base = t[1].get("baseTimeNanoseconds")
                if by == "zero":
                    t[1]["baseTimeNanoseconds"] = 0
                elif by == "drop":
                    t[1].pop("baseTimeNanoseconds", None)
                elif by == "weird":
                    t[1]["baseTimeNanoseconds"] = fz._weird(rng)
                elif by in (2**62, 2**63):
                    t[1]["baseTimeNanoseconds"] = by
                elif isinstance(base, int):
                    t[1]["baseTimeNanoseconds"] = base + by
            return f"{node.name}: trace clock {by if isinstance(by, str) else f'{by / S:+g} s'}"
        if op == "otherjob":
            how = rng.choice(["trace", "rdzv", "launcher"])
            if how == "trace" and node.traces:
                other = rng.choice([d for k, v in self.docs.items() for d in v])
                node.traces[0][1] = other
                return f"{node.name}: another job's trace"
            key = "rdzv_endpoint" if how == "rdzv" else "launcher"
            if isinstance(node.run.get("node"), dict):
                node.run["node"] = {
                    **node.run["node"],
                    key: rng.choice(["10.9.9.9:29500", "slurm", "jax", ""]),
                }
            return f"{node.name}: another {key}"
        if op == "duprank" and node.traces:
            how = rng.choice(["into-other", "twice-in-node", "same-rank"])
            other = rng.choice(nodes)
            if how == "into-other" and other is not node:
                other.traces = [
                    [
                        other.traces[0][0] if other.traces else node.traces[0][0],
                        node.traces[0][1],
                        node.traces[0][2],
                    ]
                ]
                return f"{other.name}: {node.name}'s trace copied in"
            if how == "twice-in-node":
                t = node.traces[0]
                node.traces.append(
                    [
                        str(Path(t[0]).parent / f"copy{len(node.traces)}.pt.trace.json.gz"),
                        t[1],
                        t[2],
                    ]
                )
                return f"{node.name}: a rank twice"
            if (
                isinstance(node.run.get("node"), dict)
                and isinstance(other.run, dict)
                and isinstance(other.run.get("node"), dict)
            ):
                node.run["node"] = {
                    **node.run["node"],
                    "node_rank": other.run["node"].get("node_rank"),
                }
            return f"{node.name}: the node_rank of {other.name}"
        if op == "absurd":
            how = rng.choice(["runjson-17MiB", "rank-files", "many-nodes", "nnodes", "events"])
            if how == "runjson-17MiB":
                node.run = {**node.run, "pad": " " * (17 << 20)}
            elif how == "rank-files" and node.traces:
                t = node.traces[0]
                node.files.update(
                    {
                        f"{Path(t[0]).parent}/r{i}.pt.trace.json": rng.choice(
                            [b"", b"{}", b'{"traceEvents"']
                        )
                        for i in range(300)
                    }
                )
            elif how == "many-nodes":
                src = nodes[0]
                for k in range(len(nodes), rng.choice([8, 12])):
                    run = copy.deepcopy(src.run) if isinstance(src.run, dict) else {}
                    if isinstance(run.get("node"), dict):
                        run["node"].update(node_rank=k, nnodes=12)
                    nodes.append(
                        Node(
                            f"node{k}",
                            run,
                            [[t[0], _shifted(t[1], k * MS), t[2]] for t in src.traces],
                            dict(src.files),
                        )
                    )
                for n in nodes:
                    if isinstance(n.run.get("node"), dict):
                        n.run["node"]["nnodes"] = 12
            elif how == "nnodes":
                for n in nodes:
                    if isinstance(n.run.get("node"), dict):
                        n.run["node"] = {**n.run["node"], "nnodes": 10**6}
            elif how == "events" and node.traces:
                t = node.traces[0]
                events = (
                    t[1].get("traceEvents") if isinstance(t[1].get("traceEvents"), list) else []
                )
                t[1] = {**t[1], "traceEvents": events * rng.choice([5, 20])}
            return f"{node.name}: absurd {how}"
        if op == "names":
            how = rng.choice(["dir", "trace", "host"])
            if how == "dir":
                node.name = rng.choice(ODD_DIR_NAMES)
            elif how == "trace" and node.traces:
                t = rng.choice(node.traces)
                t[0] = str(Path(t[0]).parent / rng.choice(ODD_TRACE_NAMES))
                t[2] = not t[0].endswith((".json", ".pb"))
            elif isinstance(node.run.get("node"), dict):
                node.run["node"] = {**node.run["node"], "host": rng.choice(ODD_HOSTS)}
            return f"odd name: {how}"
        return f"{op} (nothing to damage)"

    def _damage_trace_file(self, path: Path, rng) -> str:
        if not path.is_file() or path.is_symlink():
            return "(damaged already)"
        if path.stat().st_size > DAMAGED_SIZE_BYTES:  # made sparse: not read whole here
            return "(damaged already: sparse)"
        op = rng.choice(
            [
                "truncate",
                "flip",
                "empty",
                "delete",
                "gz-garbage",
                "gz-members",
                "bomb",
                "sparse",
                "fifo",
                "devzero",
                "dir",
                "bytes",
            ]
        )
        data = path.read_bytes()
        if op == "truncate":
            path.write_bytes(data[: rng.randrange(len(data) + 1)])
        elif op == "flip":
            b = bytearray(data)
            for _ in range(rng.randint(1, 20)):
                if b:
                    b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            path.write_bytes(bytes(b))
        elif op == "empty":
            path.write_bytes(b"")
        elif op == "delete":
            path.unlink()
        elif op == "gz-garbage":
            path.write_bytes(
                data + bytes(rng.randrange(256) for _ in range(rng.choice([1, 8, 512])))
            )
        elif op == "gz-members":
            path.write_bytes(data + gzip.compress(rng.choice([b"", b"{}", data[:100]])))
        elif op == "bomb":
            path.write_bytes(rng.choice(self.bombs))
        elif op == "sparse":
            with path.open("r+b") as f:
                f.truncate(2 << 30)
        elif op == "fifo":
            path.unlink()
            os.mkfifo(path)
        elif op == "devzero":
            path.unlink()
            path.symlink_to(rng.choice(["/dev/zero", "/dev/urandom", "/dev/null"]))
        elif op == "dir":
            path.unlink()
            path.mkdir()
        else:
            try:
                plain = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
            except (OSError, EOFError):  # damaged already (a mutated byte in its header)
                plain = data
            sub: list[str] = []
            plain = self.fuzz._mutate_bytes(plain, rng, sub)
            path.write_bytes(
                gzip.compress(plain, compresslevel=1) if path.name.endswith(".gz") else plain
            )
            op = ", ".join(sub)
        return op

    # -- writing it out, and the command -----------------------------------------------------------

    def _write(self, nodes: list[Node], job: Path) -> list[Path]:
        job.mkdir()
        dirs = []
        for k, node in enumerate(nodes):
            d = job / node.name
            if d.exists():  # two nodes given the same odd name
                d = job / f"{node.name}{k}"
            d.mkdir(parents=True)
            (d / "run.json").write_bytes(
                self.fuzz._dumps(node.run) if not isinstance(node.run, bytes) else node.run
            )
            for rel, data in node.files.items():
                (d / rel).parent.mkdir(parents=True, exist_ok=True)
                (d / rel).write_bytes(data)
            (d / "trace").mkdir(exist_ok=True)
            for rel, doc, gz in node.traces:
                (d / rel).parent.mkdir(parents=True, exist_ok=True)
                data = self.fuzz._dumps(doc)
                (d / rel).write_bytes(gzip.compress(data, compresslevel=1) if gz else data)
            dirs.append(d)
        return dirs

    def _paths(self, layout: str, dirs: list[Path], job: Path, work: Path, rng) -> list[str]:
        paths = [str(d) for d in dirs]
        if layout == "parent":
            return [str(job)]
        if layout == "parent+junk":
            (job / "junk").mkdir()
            (job / "junk" / "run.json").write_text("[]")
            (job / "file.txt").write_text("x")
            return [str(job)]
        if layout == "twice":
            return paths + [paths[0]]
        if layout == "missing":
            return paths + [str(work / "no-such-node")]
        if layout == "file":
            return paths + [str(dirs[0] / "run.json")]
        if layout == "one":
            return paths[:1]
        if layout == "link":
            link = work / "link-to-node0"
            link.symlink_to(dirs[0])
            return paths + [str(link)]
        return paths

    def _argv(
        self, paths: list[str], dirs: list[Path], work: Path, rng, log: list[str]
    ) -> list[str]:
        out, outj = work / "report.out", work / "report.json"
        how = rng.choices(
            [
                "term",
                "json",
                "json-o",
                "term-o",
                "json-file",
                "both",
                "perfetto",
                "html",
                "input-o",
                "json-dash",
            ],
            [15, 10, 15, 15, 10, 10, 12, 3, 7, 3],
        )[0]
        extra = {
            "term": [],
            "json": ["--format", "json"],
            "json-o": ["--format", "json", "-o", str(out)],
            "term-o": ["-o", str(out)],
            "json-file": ["--json", str(outj)],
            "both": ["-o", str(out), "--json", str(outj)],
            "perfetto": ["--format", "perfetto", "-o", str(out)],
            "html": ["--format", "html", "-o", str(out)],
            "json-dash": ["--json", "-"],
        }.get(how)
        if how == "input-o":  # an input named as the output: refused, the input untouched
            given = [
                d for d in dirs if str(d) in paths or str(d.parent) in paths
            ]  # inputs of this command only
            files = [
                p
                for d in given
                for p in d.rglob("*")
                if p.is_file() and not p.is_symlink() and p.stat().st_size < (64 << 20)
            ]
            if files:
                target = rng.choice(files)
                self.inputs_named.append((target, _hash(target)))
                extra = [
                    rng.choice([[], ["--format", "json"], ["--format", "perfetto"]]),
                    ["-o", str(target)],
                ]
                extra = [*extra[0], *extra[1]]
            else:
                extra = []
        for i, a in enumerate(extra):
            if (
                a in ("-o", "--json")
                and extra[i + 1] != "-"
                and not any(extra[i + 1] == str(p) for p, _ in self.inputs_named)
            ):
                existed = rng.random() < 0.7
                if existed:
                    Path(extra[i + 1]).write_bytes(SENTINEL)
                self.outputs.append((Path(extra[i + 1]), existed))
        engine = rng.choices([["--engine", "local:1"], ["--engine", "local:2"], []], [88, 6, 6])[0]
        log.append(how + (f" {' '.join(engine)}" if engine else " default engine"))
        return ["report", *paths, *extra, *engine]

    def verify(self, work: Path, argv: list[str], code) -> str | None:
        """What the command lost or left: None when nothing."""
        said = []
        for path, existed in self.outputs:
            there = path.read_bytes() if path.is_file() else None
            if code != 0 and existed and there != SENTINEL:
                said.append(
                    f"exit {code} but {path.name} changed (was a report of {len(SENTINEL)} bytes,"
                    f" now {'absent' if there is None else f'{len(there)} bytes'})"
                )
            if code != 0 and not existed and there is not None:
                said.append(f"exit {code} but {path.name} was written ({len(there)} bytes)")
            if code == 0 and (there is None or there == SENTINEL or not there):
                said.append(f"exit 0 but {path.name} was not written")
        for path, digest in self.inputs_named:
            if not path.is_file() or _hash(path) != digest:
                said.append(f"the input {path.name} named as output was changed (exit {code})")
        left = [p.name for p in work.rglob(".*.tmp")]
        if left:
            said.append(f"temporaries left: {left[:3]}")
        return "; ".join(said) or None


# A trace file over this was made sparse (2 GiB) by an earlier damage of the same case: reading it
# whole to damage it again (and copying it twice for a bit flip) took this harness to 6.4 GB, the
# peak RSS the 10,000-case run of 2026-12-05 put on scaldiag (issue 34).
DAMAGED_SIZE_BYTES = 64 << 20


def _hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _shifted(doc: dict, shift_ns: int) -> dict:
    base = doc.get("baseTimeNanoseconds")
    return (
        {**doc, "baseTimeNanoseconds": base + shift_ns}
        if isinstance(base, int) and shift_ns
        else doc
    )
