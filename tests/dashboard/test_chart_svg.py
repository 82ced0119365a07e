"""The series chart's y axis holds every point, whatever the spread of the platforms' levels."""
import pytest

from app.web.chart_svg import covering_ticks


@pytest.mark.parametrize("low, high", [(600.0, 8400.0), (132.0, 8900.0), (0.5, 0.93), (-3.0, 17.0), (4150.0, 4160.0), (0.0, 1.0)])
def test_the_axis_ticks_reach_below_the_lowest_and_above_the_highest_value(low, high):
    ticks = covering_ticks(low, high)
    assert ticks[0] <= low and ticks[-1] >= high
    steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:])}
    assert len(steps) == 1, "evenly spaced"
    assert len(ticks) <= 12
