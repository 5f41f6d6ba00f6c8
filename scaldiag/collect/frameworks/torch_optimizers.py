"""Which ``optimizer.step()`` calls are the loop's steps, when a script has several optimizers.

A step is one pass of the loop, whichever optimizers it steps. The optimizer whose steps end the
steps is the *lead*: the first one to step, until another takes over. Another optimizer's step is

- *in turn* with the lead (a GAN's generator after its discriminator, two optimizers over parts of
  one model): no batch was fetched since the lead's step, so it is the same pass of the loop, and
  it ends no step;
- the *lead from here* (a new phase: "train the head, then unfreeze with a new optimizer", a new
  fold's model, layer-wise training): a batch was fetched since the last step's end (a new pass
  of the loop that stepped this optimizer, not the lead), or, in a loop that fetches through no
  DataLoader, it stepped twice with no step of the lead between. Its step then ends a step.

An optimizer whose ``step()`` runs inside another's (a wrapper's inner optimizer: ZeRO's
``ZeroRedundancyOptimizer``, a Lookahead) is part of that step: it never leads (role ``inside``).

The record gets one ``optimizer`` mark for each optimizer the first time it steps or leads, and one
each time the lead changes back to an earlier optimizer (a fold's model trained again), except
where the lead changes at every step (two optimizers each fetching their own batch): then the
changes are steps, not phases, and only the first ones are marked. Optimizers are held weakly:
their state stays the script's to free, and so are their parameters (weak references, to tell
a new model from the same one after its first optimizer is gone).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

# Lead changes marked at most: beyond, optimizers that take turns every few steps are not phases.
MAX_LEAD_MARKS = 200


@dataclass
class Seen:
    index: int  # 0: the first optimizer to step
    kind: str  # its class's name (Adam, SGD...)
    parameter_bytes: int | None
    last_step: int  # the recorder's open step at its last step()
    led: bool = False
    inside: bool = False  # its step() runs inside another optimizer's
    shares_with: tuple[int, ...] = ()  # earlier optimizers whose parameters it updates too


class Optimizers:
    """The optimizers seen, and the lead's changes, as marks' facts (the capture writes them)."""

    def __init__(self, parameter_bytes):
        self._parameter_bytes = parameter_bytes  # torch_capture.parameter_bytes
        self._seen: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        # id(parameter) -> (a weak reference to it, the first optimizer seen updating it): the id
        # alone can be a freed parameter's; one entry a parameter, however many optimizers
        self._owners: dict[int, tuple[weakref.ref, int]] = {}
        self.count = 0  # optimizers seen: torch_modes reads its cache again when this grows
        self.lead: Seen | None = None
        self._lead_marks = 0
        self._lead_since = -1  # the step the lead took over at

    def first_lead(self, optimizer, step: int) -> dict:
        """The first optimizer to step leads: its mark's facts."""
        seen = self._see(optimizer, step)
        return self._lead(seen, step)

    def other_step(
        self, optimizer, step: int, fetched: bool, inside=lambda optimizer: False
    ) -> tuple[bool, dict | None]:
        """A step() of an optimizer that is not the lead: (does it lead from here, the mark to
        write or None). ``step``: the recorder's open step; ``fetched``: a batch was fetched since
        the last step's end; ``inside(optimizer)``: does its step() run inside another's (asked
        once, the first time it steps)."""
        seen = self._seen.get(optimizer)
        new = seen is None
        if new:
            seen = self._see(optimizer, step)
            seen.inside = bool(inside(optimizer))
            again = False
        else:
            again = seen.last_step == step  # no step of the lead since its own last one
            seen.last_step = step
        if seen.inside:
            return False, (
                {**self._facts(seen, step), "role": "inside", "with": self.lead.index}
                if new
                else None
            )
        if fetched or again:
            return True, self._lead(seen, step)
        if new:
            return False, {**self._facts(seen, step), "role": "in turn", "with": self.lead.index}
        return False, None

    def parameter_ids(self) -> set[int]:
        """The live parameters of every optimizer seen (a model they update is trained)."""
        return {key for key, (ref, _) in self._owners.items() if ref() is not None}

    def _see(self, optimizer, step: int) -> Seen:
        shares = set()
        for group in optimizer.param_groups:
            for p in group["params"]:
                owner = self._owners.get(id(p))
                if owner is not None and owner[0]() is p:
                    shares.add(owner[1])
                elif (ref := _ref(p)) is not None:
                    self._owners[id(p)] = (ref, self.count)
        seen = Seen(
            self.count,
            type(optimizer).__name__,
            self._parameter_bytes(optimizer),
            step,
            shares_with=tuple(sorted(shares)),
        )
        self._seen[optimizer] = seen
        self.count += 1
        return seen

    def _lead(self, seen: Seen, step: int) -> dict | None:
        first = not seen.led
        previous, self.lead = self.lead, seen
        seen.led = True
        # The lead changing again at the next step (a new optimizer made every step, two optimizers
        # each fetching a batch): steps, not phases, unmarked.
        flapping = step - self._lead_since < 2
        self._lead_since = step
        if previous is not None and (flapping or self._lead_marks >= MAX_LEAD_MARKS):
            return None
        self._lead_marks += 1
        facts = {**self._facts(seen, step), "role": "leads", "new": first}
        if previous is not None:
            facts["after"] = previous.index
        return facts

    def _facts(self, seen: Seen, step: int) -> dict:
        return {
            "optimizer": seen.index,
            "kind": seen.kind,
            "parameter_bytes": seen.parameter_bytes,
            "step": step,
            "shares_parameters_with": list(seen.shares_with),
        }


def _ref(tensor) -> weakref.ref | None:
    try:
        return weakref.ref(tensor)
    except TypeError:
        return None


def inside_another_step(optimizer, frame) -> bool:
    """Is ``optimizer.step()`` running inside another optimizer's (a frame up the stack, from
    ``frame``, of torch's step wrapper or a ``step`` method, whose ``self`` is another optimizer)?
    """
    for _ in range(64):
        if frame is None:
            return False
        if frame.f_code.co_name in ("wrapper", "step"):
            owner = frame.f_locals.get("self")
            if owner is not None and owner is not optimizer and hasattr(owner, "param_groups"):
                return True
        frame = frame.f_back
    return False
