"""What the capture measured of its own cost in this run, and what it could not.

Measured in the run: the sampler process's own CPU time (run.json ``samplers``: each sampler
thread's ``cpu_s``, in the launcher's process, beside the training's), the trace window's wall
time and its share of the run (the profiler's marks), and scaldiag's own time the accounting
shows (start-up, measurements after training). Not measured in a run: what the step hook costs
the training thread outside the window (one clock read and two appends a step: 0.6-0.9 us a call
measured apart, bench/results/step_hook.md), nor the training's slow-down from the samplers'
share of the cores; bench/gpu/run_capture_cost.sh measures both together on public scripts'
own clocks.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CaptureCost:
    sampler_cpu_s: float | None  # the samplers' threads' CPU seconds, all together
    wall_s: float | None  # the run's wall time
    window_s: float | None  # the trace window's wall, the profiler's start and stop included

    @property
    def sampler_core_pct(self) -> float | None:
        """The samplers' CPU as a share of one core over the run."""
        if self.sampler_cpu_s is None or not self.wall_s:
            return None
        return 100 * self.sampler_cpu_s / self.wall_s


def capture_cost(
    samplers: dict | None, wall_s: float | None, window_s: float | None
) -> CaptureCost | None:
    """From run.json's ``samplers`` (name -> {"cpu_s": ...}), the run's wall and the window's."""
    cpu = [
        float(s["cpu_s"])
        for s in (samplers or {}).values()
        if isinstance(s, dict)
        and isinstance(s.get("cpu_s"), (int, float))
        and not isinstance(s.get("cpu_s"), bool)
    ]
    if not cpu and window_s is None:
        return None
    return CaptureCost(sum(cpu) if cpu else None, wall_s, window_s)
