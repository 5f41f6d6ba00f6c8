"""SD204 throttled clocks: a GPU ran below its clocks for power or heat.

NVML's clocks-event reasons during the steady-state window other than idle
or an application clock setting: software power cap, thermal slowdown,
hardware slowdown or power brake. A throttled GPU is a straggler that every
all-reduce waits for.
"""

from __future__ import annotations

from scaldiag.analyze.run import RunAnalysis
from scaldiag.rules.base import Evidence, Finding, RuleFacts, Speedup, same_fix

# The reasons that mean "held down": nvmlClocksEventReason* in nvml.h.
THROTTLE_REASONS = {
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
}

_CHECK = (
    "Check cooling and power: nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE; a power cap below the"
    " board's default (nvidia-smi -pl) or a hot card slows every replica that waits for it."
)
FIX = same_fix(_CHECK)


class _ThrottledClocks(RuleFacts):
    id = "SD204"
    title = "GPU clocks throttled"
    category = "clocks"

    def check(self, run: RunAnalysis) -> Finding | None:
        throttled = [g for g in run.gpus if THROTTLE_REASONS & set(g.clock_event_reasons)]
        if not throttled:
            return None
        worst = min(throttled, key=lambda g: g.sm_clock_mhz_min or 0)
        evidence = [
            Evidence(
                f"clocks-event reasons of GPU {g.index}",
                len(g.clock_event_reasons),
                "reasons",
                device=", ".join(sorted(THROTTLE_REASONS & set(g.clock_event_reasons))),
            )
            for g in throttled
        ]
        speedup = None
        if (
            worst.sm_clock_mhz_min
            and worst.sm_clock_mhz_max
            and worst.sm_clock_mhz_min < worst.sm_clock_mhz_max
        ):
            ratio = worst.sm_clock_mhz_max / worst.sm_clock_mhz_min
            evidence.append(
                Evidence(
                    f"SM clock range of GPU {worst.index}",
                    worst.sm_clock_mhz_min,
                    "MHz",
                    threshold=worst.sm_clock_mhz_max,
                )
            )
            speedup = Speedup(
                ratio,
                1.0,
                ratio,
                f"SM clock {worst.sm_clock_mhz_min}-{worst.sm_clock_mhz_max} MHz: "
                f"at most {ratio:.2f}x if every step ran at the top clock",
            )
        return self.finding(
            severity="medium",
            summary=f"{len(throttled)} GPU(s) throttled during steady state: "
            + ", ".join(f"GPU {g.index} ({', '.join(g.clock_event_reasons)})" for g in throttled),
            evidence=evidence,
            fix=FIX,
            predicted_speedup=speedup,
        )


RULE = _ThrottledClocks()
