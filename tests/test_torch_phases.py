"""Several optimizers in one PyTorch script (issue 46): phases one after another, each with its own
optimizer, and optimizers stepping in turn within one pass of the loop (a GAN). A step is one pass
of the loop, whichever optimizers it steps; every phase's steps are recorded, and the record says
which optimizer led which steps, from torch.optim's own step hooks (never from durations)."""

import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from conftest import profile_one_thread  # noqa: E402

from scaldiag.analyze import recorded_steps  # noqa: E402
from scaldiag.collect.frameworks.torch_capture import parameter_bytes  # noqa: E402
from scaldiag.collect.frameworks.torch_optimizers import Optimizers  # noqa: E402
from scaldiag.pipeline import analyze_run_dir  # noqa: E402
from scaldiag.record.reader import read_record  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PHASES = Path(__file__).resolve().parent / "phases_two_optimizers.py"


profile = profile_one_thread


def optimizer_marks(record) -> list[dict]:
    return [m for m in record.marks if m["mark"] == "optimizer"]


# --- the rules, on real optimizers (no training loop) -------------------------------------------


def _adam(module):
    return torch.optim.Adam(module.parameters())


def test_a_second_optimizer_in_the_same_pass_steps_in_turn_and_ends_no_step():
    d, g = torch.nn.Linear(4, 1), torch.nn.Linear(2, 4)
    opt_d, opt_g = _adam(d), _adam(g)
    seen = Optimizers(parameter_bytes)
    assert seen.first_lead(opt_d, 0)["role"] == "leads"
    # G steps after D with no batch fetched since D's step: the same pass of the loop
    leads, facts = seen.other_step(opt_g, 1, fetched=False)
    assert not leads and facts["role"] == "in turn" and facts["with"] == 0
    assert facts["shares_parameters_with"] == []
    # D steps again (a boundary: the open step is now 2), then G: in turn again, nothing to mark
    assert seen.other_step(opt_g, 2, fetched=False) == (False, None)


def test_a_new_optimizer_over_a_fetched_batch_leads_a_new_phase():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    head, whole = torch.optim.SGD(model[1].parameters(), lr=0.1), _adam(model)
    seen = Optimizers(parameter_bytes)
    seen.first_lead(head, 0)
    leads, facts = seen.other_step(whole, 40, fetched=True)
    assert leads and facts["new"] and facts["after"] == 0 and facts["kind"] == "Adam"
    assert facts["shares_parameters_with"] == [0]  # the same model: unfrozen, not a new one
    del head  # the script frees its first optimizer: its parameters still say "the same model"
    other = _adam(torch.nn.Linear(3, 3))
    leads, facts = seen.other_step(other, 80, fetched=True)
    assert leads and facts["shares_parameters_with"] == []  # a new model (a new fold's)


def test_without_a_dataloader_a_new_optimizer_leads_once_it_steps_twice_in_a_row():
    first, second = _adam(torch.nn.Linear(2, 2)), _adam(torch.nn.Linear(2, 2))
    seen = Optimizers(parameter_bytes)
    seen.first_lead(first, 0)
    leads, facts = seen.other_step(second, 10, fetched=False)
    assert not leads and facts["role"] == "in turn"
    leads, facts = seen.other_step(second, 10, fetched=False)  # no step of the lead between
    assert leads and facts["role"] == "leads" and facts["new"]
    # the first comes back for one step (every step a change): a step, not a phase to mark
    assert seen.other_step(first, 11, fetched=True) == (True, None)


def test_a_new_optimizer_made_every_step_is_no_phase():
    model = torch.nn.Linear(2, 2)
    seen = Optimizers(parameter_bytes)
    seen.first_lead(torch.optim.SGD(model.parameters(), lr=0.1), 0)
    for step in range(1, 6):  # the lead changes at every step: steps, not phases to mark
        made = torch.optim.SGD(model.parameters(), lr=0.1)
        assert seen.other_step(made, step, fetched=True) == (True, None)
    assert seen.parameter_ids() == {id(p) for p in model.parameters()}


def test_phases_are_read_from_the_marks():
    marks = [
        {"mark": "optimizer", "t_ns": 1, "optimizer": 0, "kind": "SGD", "step": 0, "role": "leads"},
        {"mark": "optimizer", "t_ns": 2, "optimizer": 1, "kind": "Adam", "step": 5,
         "role": "in turn", "with": 0},
        {"mark": "optimizer", "t_ns": 3, "optimizer": 1, "kind": "Adam", "step": 5,
         "role": "leads", "new": True, "shares_parameters_with": [0]},
        {"mark": "optimizer", "t_ns": 4, "optimizer": 2, "kind": "Adam", "step": 9,
         "role": "leads", "new": True, "shares_parameters_with": []},
        {"mark": "optimizer", "t_ns": 5, "optimizer": 3, "kind": "Adam", "step": 10,
         "role": "in turn", "with": 2},
    ]  # fmt: skip
    found = recorded_steps.phases(marks)
    assert [(p.number, p.first_step, p.optimizer) for p in found] == [
        (1, 0, 0),
        (2, 5, 1),
        (3, 9, 2),
    ]
    assert found[0].in_turn == ()  # optimizer 1 stepped "in turn" once, then led from that step
    assert not found[1].new_model and found[2].new_model
    assert found[2].in_turn == ((3, "Adam"),)
    steps = [{"step": s, "epoch": 0, "begin_ns": 10 * s, "end_ns": 10 * s + 10} for s in range(12)]
    periods = recorded_steps.periods(steps, {"warmup_steps": 2}, marks)
    assert [p.phase for p in periods] == [1] * 5 + [2] * 4 + [3] * 3
    # each new phase's first steps are warm-up, as the run's first are
    warm = [p.step for p in periods if p.kind == recorded_steps.WARMUP]
    assert warm == [0, 1, 5, 6, 9, 10]


# --- a real script under `scaldiag profile` ------------------------------------------------------


@pytest.mark.slow
def test_every_phase_is_recorded_and_named(tmp_path):
    run_dir = profile(tmp_path, PHASES, "--steps", "12", "--gan")
    record = read_record(run_dir)
    marks = optimizer_marks(record)
    leads = [(m["optimizer"], m["step"], m.get("new")) for m in marks if m["role"] == "leads"]
    # phase 1 (the head's Adam), phase 2 (a new Adam over the whole model), phase 3 (the GAN's D)
    assert leads == [(0, 0, True), (1, 12, True), (2, 24, True)]
    by_index = {m["optimizer"]: m for m in marks}
    assert by_index[1]["shares_parameters_with"] == [0]  # phase 2 unfreezes the same model
    assert by_index[2]["shares_parameters_with"] == []  # the GAN's models are new
    # the GAN's G steps in turn with D in each pass: it ends no step
    assert by_index[3]["role"] == "in turn" and by_index[3]["with"] == 2
    # every phase's steps: 12 + 12 + 12 passes of the loop (before: phase 1's 12 alone)
    assert len(record.steps) == 36
    analysis = analyze_run_dir(run_dir)
    assert analysis.steps.recorded == 36
    assert [(p.number, p.first_step, p.steps) for p in analysis.phases] == [
        (1, 0, 12),
        (2, 12, 12),
        (3, 24, 12),
    ]
    assert analysis.phases[2].in_turn == ((3, "Adam"),)
    periods = recorded_steps.periods(record.steps, record.training, record.marks)
    warmup = int(record.training["warmup_steps"])
    for phase in analysis.phases[1:]:  # a new optimizer's first steps: its state is made there
        first = [p for p in periods if phase.first_step <= p.step < phase.first_step + warmup]
        assert {p.kind for p in first} == {recorded_steps.WARMUP}


LOOP_PHASES = textwrap.dedent("""
    import torch, torch.nn as nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    x, y = torch.randn(32, 16), torch.randint(0, 4, (32,))
    for lr, steps in ((0.1, 10), (0.01, 10)):  # no DataLoader: batches held in memory
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        for _ in range(steps):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
""")


@pytest.mark.slow
def test_a_phase_without_a_dataloader_leads_from_its_second_step(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(LOOP_PHASES)
    run_dir = profile(tmp_path, script)
    record = read_record(run_dir)
    leads = [(m["optimizer"], m["step"]) for m in optimizer_marks(record) if m["role"] == "leads"]
    # the second optimizer's first step could be in turn (no batch fetched says otherwise); its
    # second, with no step of the first between, makes it the lead: the open step 10 holds both
    assert leads == [(0, 0), (1, 10)]
    assert len(record.steps) == 19  # 20 passes, two of them in step 10


class Lookahead(torch.optim.Optimizer):
    """A wrapper whose step() runs another optimizer's (as ZeRO's ZeroRedundancyOptimizer does)."""

    def __init__(self, base):
        self.base = base
        super().__init__(base.param_groups, {})

    def step(self, closure=None):
        return self.base.step()


WRAPPED = textwrap.dedent("""
    import torch, torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset
    class Lookahead(torch.optim.Optimizer):  # its step() runs another optimizer's
        def __init__(self, base):
            self.base = base
            super().__init__(base.param_groups, {})
        def step(self, closure=None):
            return self.base.step()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = Lookahead(torch.optim.SGD(model.parameters(), lr=0.1))
    data = TensorDataset(torch.randn(24 * 20, 16), torch.randint(0, 4, (24 * 20,)))
    for x, y in DataLoader(data, batch_size=24):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
""")


def test_an_optimizer_stepped_inside_another_is_part_of_its_step():
    from scaldiag.collect.frameworks.torch_optimizers import inside_another_step

    model = torch.nn.Linear(2, 2)
    outer = Lookahead(torch.optim.SGD(model.parameters(), lr=0.1))
    found = []
    from torch.optim.optimizer import register_optimizer_step_post_hook

    handle = register_optimizer_step_post_hook(
        lambda o, a, k: found.append((type(o).__name__, inside_another_step(o, sys._getframe())))
    )
    try:
        outer.step()
    finally:
        handle.remove()
    assert found == [("SGD", True), ("Lookahead", False)]


@pytest.mark.slow
def test_a_wrapped_optimizer_is_no_phase(tmp_path):
    script = tmp_path / "wrapped.py"
    script.write_text(WRAPPED)
    run_dir = profile(tmp_path, script)
    record = read_record(run_dir)
    roles = [(m["kind"], m["role"]) for m in optimizer_marks(record)]
    assert roles == [("Lookahead", "leads"), ("SGD", "inside")]
    assert len(record.steps) == 20
    assert len(analyze_run_dir(run_dir).phases) == 1
