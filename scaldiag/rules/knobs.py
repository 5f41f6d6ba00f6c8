"""One value per knob in a report, fitted to the machine (issue 35).

Several findings advise the same knobs: SD101's and SD207's fixes both set a DataLoader's
``num_workers``, SD211's sets it and the intra-op threads. Written one rule at a time they
contradicted each other (SD101 ``num_workers=1``, SD207 ``num_workers=8`` in one report). Here a
captured run's findings, run and trace together, get one *plan*: a value per knob from the run's
machine (the cores the training process may use, its ranks, whether it has a GPU) and from what the
script already set (training.json's ``knobs``, collect/frameworks/knob_facts.py), and every fix text
is rewritten to it:

- ``num_workers`` and ``PyDataset(workers=)``: the cores per rank less one for the training loop
  (rules/machine.py ``CpuBudget.workers``);
- intra-op threads (``OMP_NUM_THREADS=``, ``torch.set_num_threads()``,
  ``set_intra_op_parallelism_threads()``): the cores the run has per rank (the cores less what the
  rest of the machine used, measured), less the input workers the plan keeps;
- ``steps_per_execution``: what the fix says, or the script's own where it is already as large;
- a run without a GPU gets no GPU advice: no ``pin_memory`` (PyTorch warns of it without a GPU), no
  augmentation moved "onto the GPU";
- a knob the script already sets to the plan's value is said to be in place, in the fix's first
  line; an input finding whose workers are in place leads with the next lever (cheaper samples)
  instead.
Any other knob that two findings set differently takes the value of the first finding (ranked) in
every fix. ``values`` reads a text's knobs: the test of a report's agreement uses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from scaldiag.analyze.run import RunAnalysis
from scaldiag.rules.base import Finding

# Each knob's assignments in a fix's text: the value is the group ``v`` (numbers, True/False only:
# ``num_workers=N`` names the knob, not a value).
KNOBS: dict[str, list[re.Pattern]] = {
    "num_workers": [re.compile(r"(?<=num_workers=)(?P<v>\d+)\b")],
    "pydataset_workers": [re.compile(r"(?<=PyDataset\(workers=)(?P<v>\d+)\b")],
    "pin_memory": [re.compile(r"(?<=pin_memory=)(?P<v>True|False)\b")],
    "persistent_workers": [re.compile(r"(?<=persistent_workers=)(?P<v>True|False)\b")],
    "prefetch_factor": [re.compile(r"(?<=prefetch_factor=)(?P<v>\d+)\b")],
    "use_multiprocessing": [re.compile(r"(?<=use_multiprocessing=)(?P<v>True|False)\b")],
    "steps_per_execution": [re.compile(r"(?<=steps_per_execution=)(?P<v>\d+)\b")],
    # a tf.data pipeline's parallel map, named by the value it is given
    "tf_data_autotune": [re.compile(r"(?<=num_parallel_calls=)(?P<v>tf\.data\.AUTOTUNE)\b")],
    "intra_op_threads": [
        re.compile(r"(?<=OMP_NUM_THREADS=)(?P<v>\d+)\b"),
        re.compile(r"(?<=set_num_threads\()(?P<v>\d+)(?=\))"),
        re.compile(r"(?<=set_intra_op_parallelism_threads\()(?P<v>\d+)(?=\))"),
    ],
}

# Advice that only a GPU can take, and what a run without one is told instead.
_CPU_ONLY = [
    (re.compile(r"pin_memory=True,\s*"), ""),
    (re.compile(r",\s*pin_memory=True"), ""),
    (
        re.compile(
            r"; move random augmentation onto the GPU \(torchvision\.transforms\.v2 on the batched"
            r" tensor "
            r"after \.to\(device\)\)"
        ),
        (
            "; apply random augmentation to the whole batch at once (torchvision.transforms.v2 on"
            " the batched tensor)"
        ),
    ),
    (
        re.compile(r"\(keras\.layers\.RandomFlip \.\.\.\) so it runs on the GPU\."),
        "(keras.layers.RandomFlip ...) so it runs in the compiled step, not in Python.",
    ),
]
GPU_WORDS = re.compile(r"pin_memory|\bcuda\b|CUDA graph|onto the GPU|on the GPU")

# The next lever where the input's workers are already in place: the workers are slower than the
# step.
_NEXT_INPUT = {
    "pytorch": (
        "The DataLoader already runs num_workers={w} (in place: this machine's cores allow {w} a"
        " rank, one core left for the training loop), and the step still waits for its batches: the"
        " workers themselves are too slow. Next: make each sample cheaper: decode once and cache"
        " what does not change; apply random augmentation to the whole batch at once"
        " (torchvision.transforms.v2 on the batched tensor{after}); move Python per-sample work"
        " into tensor ops."
    ),
    "keras": (
        "The PyDataset already runs workers={w} (in place), and the step still waits for its"
        " batches. Next: move augmentation into the model (keras.layers.RandomFlip ..., or a layer"
        " of keras.ops), or feed a tf.data pipeline with num_parallel_calls=tf.data.AUTOTUNE and"
        " .prefetch(tf.data.AUTOTUNE)."
    ),
}


def values(text: str) -> dict[str, set[str]]:
    """The values each knob is given in ``text``."""
    found: dict[str, set[str]] = {}
    for knob, patterns in KNOBS.items():
        for p in patterns:
            for m in p.finditer(text):
                found.setdefault(knob, set()).add(m.group("v"))
    return found


@dataclass(frozen=True)
class Machine:
    cores: int  # the cores the run may use (affinity, else the host samples')
    ranks: int
    gpu: bool
    other_cores: float  # what the rest of the machine used through the steady window (0 unknown)
    script: dict  # training.json's knobs: what the script set

    @property
    def workers(self) -> int:
        return max(1, self.cores // self.ranks - 1)

    def threads(self, workers: int) -> int:
        """Intra-op threads a rank: its cores (less the others' use) less its input workers, at
        least 1."""
        free = max(0.0, self.cores - self.other_cores) / self.ranks
        return max(1, round(free) - workers)


def machine(run: RunAnalysis) -> Machine:
    from scaldiag.rules.machine import budget  # (machine.py imports nothing of this module)

    knobs = run.training.get("knobs") or {}
    cpu = budget(run)
    host_cores = cpu.cores if cpu else (run.host.cores if run.host else 0)
    usable = knobs.get("cores_usable") or 0
    cores = min(c for c in (host_cores, usable) if c) if (host_cores or usable) else 1
    gpu = bool(
        run.gpus
        or run.inventory.get("gpus")
        or (run.trace is not None and any(u.kind == "gpu" for u in run.trace.units))
    )
    return Machine(
        cores=max(1, cores),
        ranks=cpu.ranks if cpu else 1,
        gpu=gpu,
        other_cores=cpu.other_cores if cpu else 0.0,
        script=knobs,
    )


def script_workers(m: Machine) -> int | None:
    """The input worker processes a rank of the script runs, where recorded."""
    loader = m.script.get("dataloader") or {}
    if isinstance(loader.get("num_workers"), int):
        return loader["num_workers"]
    data = m.script.get("pydataset") or {}
    if isinstance(data.get("workers"), int):
        # threads share the rank's cores
        return data["workers"] if data.get("use_multiprocessing") else 0
    return None


def _in_place(m: Machine, plan: dict[str, str]) -> dict[str, str]:
    """The plan's knobs the script already sets to the plan's value."""
    loader, data = m.script.get("dataloader") or {}, m.script.get("pydataset") or {}
    have = {
        "num_workers": loader.get("num_workers"),
        "pin_memory": loader.get("pin_memory"),
        "persistent_workers": loader.get("persistent_workers"),
        "prefetch_factor": loader.get("prefetch_factor") if loader.get("num_workers") else None,
        "pydataset_workers": data.get("workers"),
        "use_multiprocessing": data.get("use_multiprocessing"),
        "intra_op_threads": m.script.get("intra_op_threads"),
    }
    return {k: v for k, v in plan.items() if have.get(k) is not None and str(have[k]) == v}


def plan(
    m: Machine, findings: list[Finding], steps_per_execution: int | None = None
) -> dict[str, str]:
    """A value per knob for this report."""
    p = {"num_workers": str(m.workers), "pydataset_workers": str(m.workers)}
    input_advised = any(f.category == "input" for f in findings)
    workers = m.workers if input_advised else (script_workers(m) or 0)
    p["intra_op_threads"] = str(m.threads(workers))
    if m.gpu:
        p["pin_memory"] = "True"
    if steps_per_execution and steps_per_execution > 1:
        said = [
            int(v)
            for f in findings
            for t in f.fix.values()
            for v in values(t).get("steps_per_execution", ())
        ]
        if said and steps_per_execution >= max(said):
            p["steps_per_execution"] = str(steps_per_execution)
    # Any other knob: the first (ranked) finding's value.
    for f in findings:
        for text in f.fix.values():
            for knob, vals in values(text).items():
                if knob not in p and len(vals) == 1:
                    p[knob] = next(iter(vals))
    return p


def _rewrite(text: str, p: dict[str, str], gpu: bool) -> str:
    if not gpu:
        for pattern, instead in _CPU_ONLY:
            text = pattern.sub(instead, text)
    for knob, patterns in KNOBS.items():
        if knob in p:
            for pattern in patterns:
                text = pattern.sub(p[knob], text)
    return text


def agree(findings: list[Finding], run: RunAnalysis) -> list[Finding]:
    """The findings with one value per knob, fitted to the run's machine and to what the script
    set."""
    m = machine(run)
    p = plan(m, findings, run.training.get("steps_per_execution"))
    in_place = _in_place(m, p)
    out = []
    for f in findings:
        fix = {fw: _rewrite(text, p, m.gpu) for fw, text in f.fix.items()}
        if f.category == "input":
            fix = _next_lever(fix, in_place, m)
        said = sorted(
            {
                f"{_spelled(k)}={v}"
                for k, v in in_place.items()
                if any(k in values(t) for t in fix.values())
            }
        )
        if said:
            fix = {
                fw: f"In place already (the script sets it): {', '.join(said)}.\n{text}"
                for fw, text in fix.items()
            }
        out.append(replace(f, fix=fix) if fix != f.fix else f)
    return out


def _spelled(knob: str) -> str:
    return {"pydataset_workers": "PyDataset(workers)", "intra_op_threads": "intra-op threads"}.get(
        knob, knob
    )


def _next_lever(fix: dict[str, str], in_place: dict[str, str], m: Machine) -> dict[str, str]:
    """An input finding whose workers the script already runs: the next lever, not the same advice
    again."""
    out = dict(fix)
    if "num_workers" in in_place:
        out["pytorch"] = _NEXT_INPUT["pytorch"].format(
            w=in_place["num_workers"], after=" after .to(device), on the GPU" if m.gpu else ""
        )
    if "pydataset_workers" in in_place:
        for fw in ("tensorflow", "jax"):
            out[fw] = _NEXT_INPUT["keras"].format(w=in_place["pydataset_workers"])
    return out
