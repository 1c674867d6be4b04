"""Quantiles and tail probabilities of the normal, Student's t, F and chi-square
distributions, as the statistics ask for them tens of thousands of times in a simulation:
remembered, or read off scipy's special functions without scipy.stats' argument checks.

Look here for a ``t_ppf`` or ``normal_ppf`` another module calls; each returns exactly what
scipy.stats returns for the same arguments.
"""

from __future__ import annotations

import math
from functools import lru_cache

from scipy import special
from scipy import stats as scipy_stats


# Quantiles at a few distinct arguments (an alpha, a power, counts of launches), asked for
# at every plan and look - tens of thousands of times in a simulation - remembered:
# scipy.stats spends some 50 microseconds checking its arguments on each call.
@lru_cache(maxsize=256)
def normal_ppf(q: float) -> float:
    return float(scipy_stats.norm.ppf(q))


@lru_cache(maxsize=256)
def normal_isf(q: float) -> float:
    return float(scipy_stats.norm.isf(q))


@lru_cache(maxsize=8192)
def t_isf(q: float, df: float) -> float:
    return float(scipy_stats.t.isf(q, df))


@lru_cache(maxsize=8192)
def f_isf(q: float, dfn: float, dfd: float) -> float:
    return float(scipy_stats.f.isf(q, dfn, dfd))


@lru_cache(maxsize=8192)
def f_ppf(q: float, dfn: float, dfd: float) -> float:
    return float(scipy_stats.f.ppf(q, dfn, dfd))


@lru_cache(maxsize=8192)
def chi2_ppf(q: float, df: float) -> float:
    return float(scipy_stats.chi2.ppf(q, df))


# Student's t at one point, its degrees of freedom a measured (unrepeated) value: inside the
# support scipy.stats.t returns what these special functions return (t.ppf(q, df) is
# stdtrit(df, q) * 1 + 0) after some 100 microseconds of checking its arguments, so they are
# called directly there; at the edges and on invalid arguments scipy.stats answers.
def t_ppf(q: float, df: float) -> float:
    if 0 < q < 1 and df > 0:
        return float(special.stdtrit(df, q)) + 0.0  # + 0.0: scipy's -0.0 * 1 + 0 is 0.0
    return float(scipy_stats.t.ppf(q, df))


def t_sf(x: float, df: float) -> float:
    if math.isfinite(x) and df > 0:
        return float(special.stdtr(df, -x))
    return float(scipy_stats.t.sf(x, df))


def t_cdf(x: float, df: float) -> float:
    if math.isfinite(x) and df > 0:
        return float(special.stdtr(df, x))
    return float(scipy_stats.t.cdf(x, df))
