"""The terminal's line layout (render/terminal/common.py): what a line may never break."""

import io

from rich.console import Console

from scaldiag.render.terminal.common import (
    Keep,
    add_row,
    code_lines,
    fix_block,
    own,
    pack,
    say,
    table,
    tokens,
)


def printed(width: int, draw) -> list[str]:
    console = Console(file=io.StringIO(), width=width)
    draw(console)
    return console.file.getvalue().splitlines()


def test_a_kept_token_moves_whole_to_the_next_line():
    lines = printed(
        24, lambda c: say(c, "framework: PyTorch;", Keep("replicas: 1;"), Keep("global batch: 32"))
    )
    assert lines == ["framework: PyTorch;", "replicas: 1;", "global batch: 32"]


def test_a_number_stays_with_its_unit_and_a_call_with_its_arguments():
    words = [
        k.text
        for k in tokens(
            ["waits 115.54 ms of 1047.69 ms; use torch.optim.AdamW(..., fused=True) now"]
        )
    ]
    assert "115.54 ms" in words and "1047.69 ms;" in words
    assert "torch.optim.AdamW(..., fused=True)" in words


def test_a_word_wider_than_the_line_is_alone_and_whole():
    path = "/very/long/" + "d" * 100 + "/vm.xplane.pb"
    lines = [
        "".join(k.text for k in line) for line in pack(tokens(["trace:", Keep(path), "end"]), 40)
    ]
    assert lines == ["trace:", path, "end"]


def test_a_path_or_command_is_never_folded():
    command = "tensorboard --logdir " + "x/" * 60
    assert printed(40, lambda c: own(c, command)) == ["    " + command]


def test_a_code_line_stays_one_line_its_comment_moves_above():
    line = (
        "  model = torch.compile(model, mode='reduce-overhead')   # and replays the step as CUDA"
        " graphs"
    )
    assert code_lines(line, 80) == [
        "    # and replays the step as CUDA graphs",
        "    model = torch.compile(model, mode='reduce-overhead')",
    ]
    assert code_lines("  x = f(y)   # short", 80) == ["    x = f(y)   # short"]


def test_a_fix_is_printed_without_a_box():
    fix = "Load in workers:\n  loader = DataLoader(ds, num_workers=8)\nthen measure."
    lines = printed(30, lambda c: fix_block(c, fix))
    assert "    loader = DataLoader(ds, num_workers=8)" in lines
    assert not any(set(line) & set("│┃╭╰") for line in lines)


def test_a_table_cell_never_parts_a_number_from_its_unit():
    def draw(c):
        t = table("copies")
        t.add_column("H2D", overflow="fold")
        t.add_column("other")
        add_row(t, "16.25 KiB in 2.0 copies (pinned 16.25 KiB)", "y" * 40)
        c.print(t)

    flat = " ".join(printed(60, draw)).replace("\u00a0", " ")
    assert "16.25 KiB" in flat and "2.0 copies" in flat


def test_a_fix_shown_twice_is_named_the_second_time():
    from scaldiag.render.terminal.common import print_findings
    from scaldiag.rules.base import Finding

    fix = {"pytorch": "Load batches in workers:\n  loader = DataLoader(ds, num_workers=8)"}
    findings = [Finding(id, "t", "high", "input", "s", [], fix, None) for id in ("SD101", "SD207")]
    lines = printed(80, lambda c: print_findings(c, findings, "pytorch", verbose=True))
    assert lines.count("    loader = DataLoader(ds, num_workers=8)") == 1
    assert "  fix (PyTorch): as SD101 above" in lines


def test_an_input_ceiling_under_one_is_no_speedup(tmp_path):
    """A real CPU run whose input alone is made slower than what training consumed (its record
    edited):
    the run report says no speed-up, never "at most 0.98x"."""
    import json
    import shutil

    from conftest import ROOT

    from scaldiag.pipeline import diagnose
    from scaldiag.render import terminal

    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests/golden/runs/torch_cpu_input_bound", run)
    consumed = diagnose(run).analysis.steps.samples_per_s
    training = json.loads((run / "training.json").read_text())
    training["input_ceiling"]["samples_per_s"] = 0.98 * consumed
    (run / "training.json").write_text(json.dumps(training))
    lines = printed(200, lambda c: terminal.render(diagnose(run), c))
    (line,) = [line for line in lines if line.startswith("input ceiling:")]
    assert line.endswith(
        "throughput more devices can reach: no speed-up (its ceiling, 0.98x, is under 1x)"
    )
