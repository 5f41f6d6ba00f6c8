"""The record's types: a run directory's contents as plain data, nothing computed."""

from __future__ import annotations

from dataclasses import dataclass, field

from scaldiag.record.run_json import RunJson


@dataclass(frozen=True)
class RunRecord:
    """The run directory's contents as plain data."""

    run: RunJson  # run.json
    training: dict
    inventory: dict
    steps: list[dict]
    gpu_samples: list[dict]
    host_samples: list[dict]
    # {"mark", "t_ns"}: fit, epoch, validation bounds...
    marks: list[dict] = field(default_factory=list)
    # {"step", "device_ms": [...]}: the device's clock
    device_steps: list[dict] = field(default_factory=list)
    # scaldiag try's result where it ran on this run (try.json): the finding, what was set, the
    # measured speed-up; {} where not tried
    tried: dict = field(default_factory=dict)
    # The script's printed segments with a digit (printed.jsonl: {"t_ns", "stream", "text", "end"},
    # a last {"dropped": N}); None where the run has no such file (runs from before it was kept)
    printed: list[dict] | None = None
