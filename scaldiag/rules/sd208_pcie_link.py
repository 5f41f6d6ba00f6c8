"""SD208 PCIe link below its maximum: a GPU trained on a slower or narrower link.

The link's current generation and width are read once a second while
training (idle GPUs lower them to save power, so a reading at rest means
nothing) and compared with the maximum the card and slot support. A link at
Gen3 x8 instead of Gen5 x16 moves host-to-device data 8x slower.
"""

from __future__ import annotations

from scaldiag.analyze.run import RunAnalysis
from scaldiag.rules.base import Evidence, Finding, RuleFacts, same_fix

_RESEAT = (
    "Check the slot and card: nvidia-smi -q -d PCIE shows the link generation and width now and at"
    " most; a card in an x8 slot, a riser, a BIOS setting or a bad seat lowers them. Reseat the"
    " card or move it to a full-width slot."
)
FIX = same_fix(_RESEAT)


class _PcieLink(RuleFacts):
    id = "SD208"
    title = "PCIe link below its maximum while training"
    category = "h2d"

    def check(self, run: RunAnalysis) -> Finding | None:
        maxima = {g.get("index"): g for g in run.inventory.get("gpus", [])}
        slow = []
        for g in run.gpus:
            limit = maxima.get(g.index, {})
            gen_max, width_max = limit.get("pcie_gen_max"), limit.get("pcie_width_max")
            if (
                g.pcie_gen_max_seen
                and gen_max
                and (
                    g.pcie_gen_max_seen < gen_max
                    or (width_max and g.pcie_width_max_seen < width_max)
                )
            ):
                slow.append((g, gen_max, width_max))
        if not slow:
            return None
        return self.finding(
            severity="medium",
            summary="; ".join(
                f"GPU {g.index}: Gen{g.pcie_gen_max_seen} x{g.pcie_width_max_seen} "
                f"(supports Gen{gm} x{wm})"
                for g, gm, wm in slow
            ),
            evidence=[
                Evidence(
                    f"PCIe generation of GPU {g.index} while training",
                    g.pcie_gen_max_seen,
                    "gen",
                    threshold=gm,
                )
                for g, gm, _ in slow
            ],
            fix=FIX,
            notes=[
                "a slower link costs only where host-to-device copies are on the critical path (see"
                " SD102)"
            ],
        )


RULE = _PcieLink()
