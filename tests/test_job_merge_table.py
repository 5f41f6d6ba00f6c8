"""The job merge's arithmetic (analyze/nodes.py: reduce_job over one table of arrivals) against the
straightforward reference it replaced (below: a dict per collective, a max over every rank per
collective per rank), figure for figure, on random jobs of a few nodes: missing collectives, ties,
different rank counts per node, times at the epoch's scale (past 2**53, where a float's steps are
256 ns) and small ones, ranks of one name. And the merge's work counted (conftest.lines_run) for 50
and 200 ranks: linear.
"""

from __future__ import annotations

import pickle
import random
from dataclasses import replace

import numpy as np
import pytest
from conftest import lines_run

from scaldiag.analyze import intervals, nodes
from scaldiag.analyze.stats import Summary

MS = 1_000_000
EPOCH_NS = 1_790_857_026_000_000_000


# -- the reference: the merge as it was written before the table (revision 0c66a1b), sums spelled
# out ----


def reference_job(ranks: list[nodes.RankEvents]) -> list[tuple]:
    arrivals = _ref_arrivals(ranks)
    names = list(dict.fromkeys(r.node for r in ranks))
    return [_ref_node_summary(n, [r for r in ranks if r.node == n], arrivals) for n in names] + [
        len(arrivals)
    ]


def _ref_arrivals(ranks):
    table = {}
    for r in ranks:
        for key, start in zip(r.coll_key, r.arrive_ns.tolist()):
            if key[0] >= 0:
                table.setdefault(key, {})[r.rank] = start
    everyone = {r.rank for r in ranks}
    return {k: v for k, v in table.items() if set(v) == everyone}


def _ref_node_summary(node, ranks, arrivals):
    step, inp, coll, link, exposed, late = [], [], [], [], [], []
    last = total = 0
    for r in ranks:
        step.extend(((r.step_end_ns - r.step_start_ns) / 1e6).tolist())
        w0, w1 = r.step_start_ns, r.step_end_ns
        inp.extend((intervals.measure_in_windows(r.input, w0, w1) / 1e6).tolist())
        own = intervals.union(r.arrive_ns, r.coll_end_ns)
        coll.extend((intervals.measure_in_windows(own, w0, w1) / 1e6).tolist())
        starts, ends = [], []
        for key, start, end in zip(r.coll_key, r.arrive_ns.tolist(), r.coll_end_ns.tolist()):
            if key in arrivals:
                starts.append(max(start, max(arrivals[key].values())))
                ends.append(end)
        after = intervals.union(np.array(starts, np.int64), np.array(ends, np.int64))
        link.extend((intervals.measure_in_windows(after, w0, w1) / 1e6).tolist())
        exposed.extend(_ref_tails_ms(r, arrivals))
        lat, n_last, n = _ref_lateness(r, arrivals)
        late.extend(lat)
        last, total = last + n_last, total + n
    return (
        node,
        [r.rank for r in ranks],
        Summary.of(step),
        Summary.of(inp),
        Summary.of(coll),
        Summary.of(link),
        Summary.of(exposed),
        Summary.of(late),
        100.0 * last / total if total else float("nan"),
    )


def _ref_tails_ms(r, arrivals):
    last_arrival = {}
    for (step, _), seen in arrivals.items():
        last_arrival[step] = max(last_arrival.get(step, max(seen.values())), max(seen.values()))
    last_end = {}
    for key, end in zip(r.coll_key, r.coll_end_ns.tolist()):
        if key in arrivals:
            last_end[key[0]] = max(last_end.get(key[0], end), end)
    return [max(0, last_end[n] - last_arrival[n]) / 1e6 for n in sorted(last_end)]


def _ref_lateness(r, arrivals):
    per_step = {}
    last = n = 0
    for key in r.coll_key:
        seen = arrivals.get(key)
        if seen is None or len(seen) < 2:
            continue
        mine = seen[r.rank]
        others = [v for k, v in seen.items() if k != r.rank]
        spread_ns = max(seen.values()) - min(seen.values())
        per_step.setdefault(key[0], []).append(
            ((mine - sum(others) / len(others)) / 1e6, spread_ns)
        )
        last += mine >= max(others)
        n += 1
    out = []
    for _, pairs in sorted(per_step.items()):
        total = sum(w for _, w in pairs)
        weighted = 0.0
        for x, w in pairs:  # in order, one addition at a time (Python 3.11's sum of floats)
            weighted += x * w
        out.append(float(weighted / total) if total > 0 else 0.0)
    return out, last, n


# -- random jobs
# ----------------------------------------------------------------------------------------


def random_job(
    rng: random.Random, base_ns: int, same_names: bool = False
) -> list[nodes.RankEvents]:
    n_nodes, steps, per_step = rng.randint(2, 4), rng.randint(1, 5), rng.randint(1, 4)
    grain = rng.choice([1, 7, 256, 1000, MS])  # coarse grains make ties
    ranks = []
    for node in range(n_nodes):
        for local in range(rng.randint(1, 3)):
            step_start = (
                base_ns + np.arange(steps, dtype=np.int64) * 100 * MS + rng.randint(0, 50) * grain
            )
            cs, ce, arrive, keys = [], [], [], []
            if rng.random() < 0.3:  # a collective before the first step: not matched
                keys.append((-1, 0))
                cs.append(base_ns - MS)
                ce.append(base_ns)
                arrive.append(base_ns - 2 * MS)
            for n in range(steps):
                for k in range(per_step):
                    if rng.random() < 0.12:  # missing on this rank
                        continue
                    t = int(step_start[n]) + 40 * MS + k * 5 * MS
                    a = t + rng.randint(0, 30) * grain
                    start = a + rng.randint(0, 3) * grain
                    keys.append((10 + n, k))
                    arrive.append(a)
                    cs.append(start)
                    ce.append(max(start, t + 20 * MS + rng.randint(0, 3) * grain))
            name = f"n{node}/rank{0 if same_names else local}"
            inp = intervals.union(step_start, step_start + rng.randint(0, 5) * MS)
            ranks.append(
                nodes.RankEvents(
                    f"n{node}",
                    name,
                    np.arange(steps, dtype=np.int64) + 10,
                    step_start,
                    step_start + 100 * MS,
                    np.array(cs, np.int64),
                    np.array(ce, np.int64),
                    keys,
                    inp,
                    np.array(arrive, np.int64) if rng.random() < 0.8 else None,
                )
            )
    return ranks


def figures(job: nodes.JobAnalysis) -> list:
    return [
        (
            s.node,
            s.ranks,
            s.step_ms,
            s.input_ms,
            s.collective_ms,
            s.link_ms,
            s.exposed_ms,
            s.lateness_ms,
            s.last_pct,
        )
        for s in job.nodes
    ] + [job.matched_collectives]


@pytest.mark.parametrize("base_ns", [EPOCH_NS, 0, 2**53 - 50 * MS, -(2**55)])
def test_the_table_gives_the_reference_figures_bit_for_bit(base_ns):
    rng = random.Random(base_ns % 1000 + 37)
    for trial in range(60):
        ranks = random_job(rng, base_ns, same_names=trial % 10 == 9)
        got = figures(nodes.reduce_job(nodes.JobEvents.of(ranks), [], {}))
        want = reference_job(ranks)
        assert repr(got) == repr(want), (
            trial,
            got,
            want,
        )  # repr: every float's exact digits, nan as nan


@pytest.mark.parametrize("chunk", [1, 2, 3])
def test_nodes_summarised_a_chunk_at_a_time_give_the_same_figures(chunk, monkeypatch):
    """reduce_job summarises SUMMARY_CHUNK_NODES nodes at a time: any chunk gives every node's
    figures, in the nodes' order, with each node's record figures (steady, intra-node) by name."""
    rng = random.Random(chunk)
    for _ in range(10):
        job = nodes.JobEvents.of(random_job(rng, EPOCH_NS))
        steady = {n: Summary.of([float(i), 2.0 * i]) for i, n in enumerate(job.nodes)}
        whole = nodes.reduce_job(job, [], {}, None, steady, {})
        monkeypatch.setattr(nodes.reduce, "SUMMARY_CHUNK_NODES", chunk)
        cut = nodes.reduce_job(job, [], {}, None, steady, {})
        monkeypatch.undo()
        assert repr(cut) == repr(whole)
        assert [s.steady_step_ms for s in cut.nodes] == [steady[n] for n in job.nodes]
        assert all(s.intra_node_ms is None for s in cut.nodes)


def test_the_nodes_are_held_as_a_table_and_read_back_as_made():
    """reduce_job holds each node's six measured Summary as numbers in one float64 array
    (NodeTable: 288 bytes a node, not six objects and their floats); each NodeSummary made from it
    is the same however it is asked for (iterated, indexed, sliced, after a pickle's round trip),
    with the record's figures by node name where a node has them."""
    rng = random.Random(11)
    for _ in range(10):
        job = nodes.JobEvents.of(random_job(rng, EPOCH_NS))
        steady = {n: Summary.of([float(len(n)), 2.5]) for n in job.nodes[::2]}
        got = nodes.reduce_job(job, [], {job.nodes[-1]: 8_000_000}, None, steady, {})
        table = got.nodes
        assert isinstance(table, nodes.NodeTable)
        assert table.summaries.shape == (len(job.nodes), 6, 6)
        made = list(table)  # (repr: every float's digits, nan as nan; nan != nan)
        assert [repr(table[i]) for i in range(len(table))] == [repr(n) for n in made]
        assert repr(table[1:]) == repr(made[1:]) and repr(table[-1]) == repr(made[-1])
        assert table == table and repr(table) == repr(made)
        assert repr(list(pickle.loads(pickle.dumps(table)))) == repr(made)
        assert [n.steady_step_ms for n in made] == [steady.get(n) for n in job.nodes]
        assert [n.bytes_per_step for n in made][-1] == 8_000_000
        assert all(n.bytes_per_step is None and n.intra_node_ms is None for n in made[:-1])
        with pytest.raises(IndexError):
            table[len(table)]


@pytest.mark.parametrize("seed", range(10))
def test_summary_rows_of_many_samples_are_each_summary_of(seed):
    """analyze/nodes.summary_rows (read back by summaries_in): the samples of one length summarised
    along the rows of one array, every float as Summary.of gives it alone (the pairwise sums of 8
    values or more, percentiles' interpolation, nan, one value, none)."""
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(60):
        n = int(rng.choice([0, 1, 2, 3, 5, 7, 8, 9, 16, 17, 100, 129, 1000]))
        scale = 10.0 ** int(rng.integers(-3, 13))
        values = rng.normal(size=n) * scale + float(rng.integers(0, 3)) * 1.7e12
        if n and rng.random() < 0.2:
            values[rng.integers(0, n)] = np.nan
        if rng.random() < 0.2:
            values = np.round(values / scale) * scale  # ties
        samples.append(values)
    summaries = nodes.summaries_in(nodes.summary_rows(samples))
    assert [repr(s) for s in summaries] == [repr(Summary.of(v)) for v in samples]


def test_a_mean_halfway_between_two_floats_rounds_as_pythons_division():
    """Past 2**53 the mean of the others can fall exactly halfway between two floats with a
    remainder
    above it: the exact division rounds up, the float of its whole part to even."""
    base = 2**60 + 128  # halfway between 2**60 and 2**60 + 256
    ranks = []
    for i, arrive in enumerate([base, base + 1, base + 2 * MS]):
        ranks.append(
            nodes.RankEvents(
                f"n{i}",
                f"n{i}/rank0",
                np.array([0]),
                np.array([base - MS]),
                np.array([base + 100 * MS]),
                np.array([arrive]),
                np.array([base + 5 * MS]),
                [(0, 0)],
                intervals.EMPTY,
            )
        )
    assert repr(figures(nodes.reduce_job(nodes.JobEvents.of(ranks), [], {}))) == repr(
        reference_job(ranks)
    )


def _big_job(n_ranks: int, per_node: int = 8) -> list[nodes.RankEvents]:
    rng = random.Random(5)
    steps = 4
    out = []
    for g in range(n_ranks):
        step_start = EPOCH_NS + np.arange(steps, dtype=np.int64) * 100 * MS
        keys = [(n, k) for n in range(steps) for k in range(3)]
        cs = np.array(
            [int(step_start[n]) + 40 * MS + k * MS + rng.randint(0, MS) for n, k in keys], np.int64
        )
        node = f"h{g // per_node}/node{g // per_node}"
        out.append(
            nodes.RankEvents(
                node,
                f"{node}/rank{g % per_node}",
                np.arange(steps, dtype=np.int64),
                step_start,
                step_start + 100 * MS,
                cs,
                cs + 10 * MS,
                keys,
                intervals.EMPTY,
            )
        )
    return out


def _merge(ranks: list[nodes.RankEvents]) -> nodes.JobAnalysis:
    aligned, offsets, _ = nodes.align(nodes.JobEvents.of(ranks), 100 * MS)
    return nodes.reduce_job(aligned, offsets, {})


def test_the_merge_is_linear_in_ranks():
    """Python lines run by align and reduce_job for 50 and 200 ranks (8 a node, 12 collectives
    each): 4x
    the ranks, at most about 4x the work. The merge before the table ran 8.2x (a max over every rank
    per collective per rank, each node's ranks found by a scan of every rank); this one 3.75x."""
    _merge(_big_job(16))  # what runs once a process (numpy's first calls) is not counted
    counts = {}
    for n in (50, 200):
        job, counts[n] = lines_run(_merge, _big_job(n))
        assert job.matched_collectives == 12 and len(job.nodes) == -(-n // 8)
    assert counts[200] < 4.6 * counts[50], counts


def test_a_copied_rank_is_refused_and_distinct_ranks_are_not():
    """job_merge.refuse_copies remembers each rank's instants by hash and compares ranks of one
    hash whole: a rank whose steps and collective ends are another's (a file copied into another
    node) is refused, naming both; ranks that differ anywhere are merged."""
    from scaldiag.analyze import job_merge
    from scaldiag.errors import ScaldiagError

    rng = random.Random(11)
    for _ in range(30):
        ranks = random_job(rng, EPOCH_NS)
        job_merge.refuse_copies(nodes.JobEvents.of(ranks))  # distinct: no error
        copy = replace(ranks[0], node="copied", rank="copied/rank0")
        with pytest.raises(ScaldiagError, match=f"copied/rank0 and {ranks[0].rank} are the same"):
            job_merge.refuse_copies(nodes.JobEvents.of([*ranks, copy]))


def _columns_one_rank_at_a_time(packed: list[nodes.PackedRank]) -> list[np.ndarray]:
    """PackedRank's nine columns of every rank, each rank's data cut by its counts and the pieces
    joined: the plain way."""
    pieces: list[list[np.ndarray]] = [[] for _ in range(9)]
    for p in packed:
        flat, at = np.frombuffer(p.data, np.int64), 0
        for c, n in enumerate([p.steps] * 3 + [p.collectives] * 4 + [p.inputs] * 2):
            pieces[c].append(flat[at : at + n])
            at += n
    return [np.concatenate(x) if x else np.empty(0, np.int64) for x in pieces]


@pytest.mark.parametrize("chunk, expected", [(1, 0), (2, 3), (3, None), (5, 1000), (1024, None)])
def test_the_columns_gathered_a_chunk_at_a_time_are_every_ranks_evidence(
    chunk, expected, monkeypatch
):
    """JobEvents.gathered (the pipeline's: the ranks copied into the columns as they are read, a
    chunk at a time, the columns sized from the ranks expected: none, too few, as many, too many,
    and grown where more come) gives every rank's evidence, one rank after the other, as its packed
    data holds it; and the ranks are let go of (``taken`` empties its list)."""
    monkeypatch.setattr(nodes.columns, "CHUNK_RANKS", chunk)
    rng = random.Random(chunk)
    for _ in range(10):
        packed = [nodes.pack(r) for r in random_job(rng, EPOCH_NS)]
        want = _columns_one_rank_at_a_time(packed)
        hint = len(packed) if expected is None else expected
        job = nodes.JobEvents.gathered(iter(packed), hint)
        got = [
            job.step_num,
            job.step_start_ns,
            job.step_end_ns,
            job.coll_step,
            job.coll_k,
            job.arrive_ns,
            job.end_ns,
            job.input_start_ns,
            job.input_end_ns,
        ]
        assert all(g.dtype == np.int64 and np.array_equal(g, w) for g, w in zip(got, want))
        assert job.ranks == [p.rank for p in packed]
        assert [job.nodes[k] for k in job.node_of.tolist()] == [p.node for p in packed]
        assert np.diff(job.coll_at).tolist() == [p.collectives for p in packed]
        held = list(packed)
        assert repr(nodes.JobEvents.taken(held)) == repr(job) and held == []


def test_the_job_shifted_in_place_is_the_job_shifted():
    """JobEvents.shifted(in_place=True) (the merge's, on columns made for it) moves the same times
    as the copy does, in the job's own columns."""
    rng = random.Random(5)
    for _ in range(10):
        ranks = random_job(rng, EPOCH_NS)
        job, mine = nodes.JobEvents.of(ranks), nodes.JobEvents.of(ranks)
        shift = np.array([rng.randint(-(10**9), 10**9) for _ in job.nodes], np.int64)
        copied, moved = job.shifted(shift), mine.shifted(shift, in_place=True)
        assert repr(moved) == repr(copied) and moved.arrive_ns is mine.arrive_ns


def test_the_rank_files_are_made_when_asked_as_the_tuples_they_stand_for():
    """analyze/job.RankFiles (the report's rank_files, held as indices and each path under its
    node's directory, the same words for every node held once): the (node, rank, path) tuples,
    however asked for, a path outside its node's directory as it was."""
    from array import array

    from scaldiag.analyze.job import RankFiles

    dirs, labels = ["/j/node0", "/j/node1"], ["h0/node0", "h1/node1"]
    paths = [
        ("/j/node0/trace/rank0.pt.trace.json.gz", 0),
        ("/j/node1/trace/rank0.pt.trace.json.gz", 1),
        ("/elsewhere/rank1.pt.trace.json", 1),
    ]
    names = ["h0/node0/rank0", "h1/node1/rank0", "h1/node1/rank1"]
    under = [RankFiles.under(dirs[k], p) for p, k in paths]
    files = RankFiles(labels, dirs, array("q", [k for _, k in paths]), names, under)
    want = [(labels[k], n, p) for (p, k), n in zip(paths, names)]
    assert list(files) == want and len(files) == 3 and files == want
    assert files[-1] == want[-1] and files[1:] == want[1:]
    assert under[0] is under[1]  # one string for every node's
    assert list(pickle.loads(pickle.dumps(files))) == want
