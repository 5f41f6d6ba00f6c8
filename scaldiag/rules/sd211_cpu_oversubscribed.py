"""SD211 CPU oversubscribed: the training job runs more busy processes than the machine has cores.

When every core is busy through the steady steps and the training process
tree holds more processes than there are cores (DataLoader or PyDataset
workers, ranks), the processes take turns on the cores: the training loop
waits for a core as much as for data. A worker count copied from another
machine does this (``num_workers=8`` on a 2-core machine ran 0.47x, issue
23), and then no trace share names it: the step is slower everywhere.

Evidence: the host samples of the steady window (collect/host.py): the
all-core busy share, with its 95% interval over the samples, and the
process tree's size. Busy means the interval's low end is at or above
``BUSY_PCT``: Linux accounts a core busy when any task runs on it, so a
core shared by many processes reads 100% however they wait.
"""

from __future__ import annotations

import math

from scaldiag.analyze.run import RunAnalysis
from scaldiag.rules.base import Evidence, Finding, same_fix
from scaldiag.rules.machine import budget

BUSY_PCT = 90.0  # all cores busy, less the sampler's own jitter (10 Hz /proc/stat ticks: +-10% a sample)


class _Oversubscribed:
    id = "SD211"

    def check(self, run: RunAnalysis) -> Finding | None:
        host, cpu = run.host, budget(run)
        if host is None or cpu is None or host.processes_max <= host.cores:
            return None
        spread = 0.0 if math.isnan(host.core_pct_mean_ci95) else host.core_pct_mean_ci95
        if host.core_pct_mean - spread < BUSY_PCT:
            return None
        fix = (f"Run at most as many busy processes as cores: here {cpu.cores} cores and {cpu.ranks} rank(s), so "
               f"{cpu.workers} input worker(s) per rank (DataLoader(num_workers={cpu.workers}), "
               f"keras.utils.PyDataset(workers={cpu.workers}), tf.data's AUTOTUNE sizes itself); compare the "
               "steady samples/s with the run before the change.")
        return Finding(
            id=self.id, title="CPU oversubscribed: more busy processes than cores", severity="high",
            category="host_overhead",
            summary=f"{host.processes_max} processes of the training job on {host.cores} cores, every core "
                    f"{host.core_pct_mean:.0f}% busy: the training loop waits for a core",
            evidence=[Evidence("cores busy (mean over the steady window)", round(host.core_pct_mean, 1), "%",
                               threshold=BUSY_PCT, spread=round(spread, 1)),
                      Evidence("processes of the training job", host.processes_max, "", threshold=host.cores)],
            fix=same_fix(fix), predicted_speedup=None,
            notes=[f"the training processes used {cpu.training_cores:.1f} cores, the rest of the machine "
                   f"{cpu.other_cores:.1f} ({host.samples} host samples)"])


RULE = _Oversubscribed()
