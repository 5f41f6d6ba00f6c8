"""The parts a clock's figure adds up to, in words (render/terminal/printed.parts_words): each with
its unit, and a rest below zero said as what it is (issue 48: the demo printed "169 ms a step =
training step 171 + epoch edges, compiles and the loop's other work -2.08")."""

import math

from scaldiag.render.terminal.printed import parts_words

REST = "epoch edges, compiles and the loop's other work"


def test_each_part_has_its_unit_and_a_part_under_half_a_percent_is_left_out():
    words = parts_words([("validation", 12.5), ("the loop's other work", 0.4)], 200.0)
    assert words == " + validation 12.5 ms"


def test_a_rest_below_zero_is_said_as_such_within_or_beyond_the_steps_range():
    # The README's run: Keras's bar 169 ms a step, the steady step 171 ms (±15.6 ms).
    words = parts_words([(REST, -2.08)], 169.0, 15.6)
    assert words == (
        f" - 2.08 ms ({REST}: below zero, the steps measured alone above this figure, within the"
        " step's ±15.6 ms)"
    )
    assert "-2.08" not in words
    beyond = parts_words([(REST, -20.0)], 169.0, 15.6)
    assert beyond.startswith(" - 20 ms (") and "within" not in beyond
    assert "within" not in parts_words([(REST, -2.08)], 169.0, math.nan)
