"""A job's report goes through the one pipeline: pipeline.diagnose_job, the readers, render/'s
writers
through commands/output.emit. Every format renders it; its JSON carries the schema version; rank
files gzipped or not are read by the readers (their caps). The job: the two ranks of a real CPU DDP
run (fixtures/kineto/cpu_ddp_gloo), one rank a "node"."""

from __future__ import annotations

import gzip
import io
import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES

from scaldiag.cli import main
from scaldiag.pipeline import diagnose, diagnose_job, job_trace
from scaldiag.readers import files as trace_files
from scaldiag.render import FORMATS, VIEW_FORMATS, write
from scaldiag.render import json as json_format
from scaldiag.rules.report import JobReport

GLOO = FIXTURES / "kineto" / "cpu_ddp_gloo" / "plugins" / "profile" / "torch"


def make_job(root: Path, gzipped: bool = True) -> list[Path]:
    dirs = []
    for k in range(2):
        d = root / f"node{k}"
        (d / "trace").mkdir(parents=True)
        (d / "run.json").write_text(
            json.dumps(
                {
                    "node": {"nnodes": 2, "node_rank": k, "host": f"h{k}"},
                    "status": "finished",
                    "exit_code": 0,
                }
            )
        )
        source = GLOO / f"rank{k}.pt.trace.json.gz"
        if gzipped:
            shutil.copy(source, d / "trace" / source.name)
        else:
            (d / "trace" / source.name.removesuffix(".gz")).write_bytes(
                gzip.decompress(source.read_bytes())
            )
        dirs.append(d)
    return dirs


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> tuple[list[Path], JobReport]:
    dirs = make_job(tmp_path_factory.mktemp("job"))
    return dirs, diagnose_job([str(d) for d in dirs])


def test_the_pipeline_gives_a_job_report_for_node_directories(job):
    dirs, report = job
    assert isinstance(report, JobReport)
    assert isinstance(
        diagnose([str(dirs[0].parent)]), JobReport
    )  # the shared --out holding both nodes
    assert [n.node for n in report.analysis.nodes] == ["h0/node0", "h1/node1"]
    assert all(
        path.endswith(".pt.trace.json.gz") for _, _, path in report.rank_files
    )  # gzipped ranks read


def test_a_job_reports_json_carries_the_schema_version(job, tmp_path, capsys):
    _, report = job
    doc = json.loads(json_format.render(report))
    assert doc["schema_version"] == json_format.SCHEMA_VERSION and doc["kind"] == "job"
    assert [n["node"] for n in doc["analysis"]["nodes"]] == ["h0/node0", "h1/node1"]
    assert set(doc["analysis"]["nodes"][0]["step_ms"]) == {
        "mean",
        "p50",
        "p90",
        "stdev",
        "n",
        "ci95",
    }
    assert [f["id"] for f in doc["findings"]] == [f.id for f in report.findings]
    dirs = make_job(tmp_path)
    assert main(["report", *map(str, dirs), "--format", "json", "--engine", "local:1"]) == 0
    assert json.loads(capsys.readouterr().out)["schema_version"] == json_format.SCHEMA_VERSION


def test_plain_and_gzipped_rank_files_give_the_same_job(job, tmp_path):
    _, gzipped = job
    plain = diagnose_job([str(d) for d in make_job(tmp_path, gzipped=False)])
    assert all(path.endswith(".pt.trace.json") for _, _, path in plain.rank_files)
    assert plain.analysis.matched_collectives == gzipped.analysis.matched_collectives
    assert [n.step_ms.mean for n in plain.analysis.nodes] == [
        n.step_ms.mean for n in gzipped.analysis.nodes
    ]


def test_a_gzip_bomb_as_a_rank_file_is_refused_under_the_readers_cap(job, tmp_path):
    _, report = job
    dirs = make_job(tmp_path)
    bomb = next((dirs[1] / "trace").iterdir())
    bomb.write_bytes(
        gzip.compress(b" " * (trace_files.GZIP_SLACK_BYTES * 4))
    )  # 4 MiB of spaces: ~1000x
    with pytest.raises(Exception, match="nothing to merge") as refused:
        diagnose_job([str(d) for d in dirs])
    assert (
        "expands past" in str(refused.value)
        or "cap" in str(refused.value)
        or "gzip" in str(refused.value)
    )


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_format_renders_a_job(job, fmt):
    _, report = job
    views = {"merged": job_trace(report)} if fmt == "perfetto" else {}
    out = io.StringIO()
    write(report, fmt, out, 120, all_fixes=True, **views)
    text = out.getvalue()
    if fmt == "terminal":
        assert text.startswith("scaldiag job report: 2 nodes") and "h1/node1" in text
        assert "Per node" in text and ("Findings (" in text)
    elif fmt == "json":
        assert json.loads(text)["kind"] == "job"
    elif fmt == "html":
        assert text.startswith("<!DOCTYPE html>") and "Per node" in text and "h1/node1" in text
    else:
        events = json.loads(text)["traceEvents"]
        names = {
            e["args"]["name"]
            for e in events
            if e.get("ph") == "M" and e.get("name") == "process_name"
        }
        assert any(n.startswith("h1/node1/rank1: ") for n in names), names
    assert fmt in VIEW_FORMATS or not views


def test_the_perfetto_writer_without_the_merged_trace_says_what_it_needs(job):
    _, report = job
    with pytest.raises(Exception, match="merged trace"):
        write(report, "perfetto", io.StringIO())


@pytest.mark.parametrize(
    "fmt, opens",
    [
        ("term", "scaldiag job report"),
        ("html", "<!DOCTYPE html>"),
        ("perfetto", '{"traceEvents"'),
        ("json", "{"),
    ],
)
def test_report_writes_each_format_of_a_job_through_emit(tmp_path, capsys, fmt, opens):
    dirs = make_job(tmp_path)
    out, also = tmp_path / f"job.{fmt}", tmp_path / "job.json"
    code = main(
        [
            "report",
            *map(str, dirs),
            "--format",
            fmt,
            "-o",
            str(out),
            "--json",
            str(also),
            "--engine",
            "local:1",
        ]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert out.read_text().startswith(opens)
    assert json.loads(also.read_text())["schema_version"] == json_format.SCHEMA_VERSION
    assert f"{fmt} report written to {out}" in err
