"""Summary statistics with their spread. Small samples are the norm (5-20 steps)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Two-sided 95% Student-t quantiles by degrees of freedom; 1.96 beyond 30.
_T95 = [
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
]


def t95(dof: int) -> float:
    if dof < 1:
        return math.inf
    return _T95[dof - 1] if dof <= len(_T95) else 1.96


def ci95_half_width(values: np.ndarray) -> float:
    """Half-width of the 95% confidence interval of the mean (inf for n < 2)."""
    n = len(values)
    if n < 2:
        return math.inf
    return t95(n - 1) * float(np.std(values, ddof=1)) / math.sqrt(n)


@dataclass(frozen=True)
class Summary:
    """Distribution of one quantity over steps."""

    mean: float
    p50: float
    p90: float
    stdev: float
    n: int
    ci95: float  # half-width of the 95% confidence interval of the mean

    @classmethod
    def of(cls, values) -> Summary:
        values = np.asarray(values, float)
        if len(values) == 0:
            return cls(math.nan, math.nan, math.nan, math.nan, 0, math.inf)
        return cls(
            mean=float(values.mean()),
            p50=float(np.percentile(values, 50)),
            p90=float(np.percentile(values, 90)),
            stdev=float(values.std(ddof=1)) if len(values) > 1 else 0.0,
            n=len(values),
            ci95=ci95_half_width(values),
        )
