"""Small least-squares solvers in plain Python, for fitting a handful of coefficients.

Columns are scaled to unit RMS before solving the normal equations, since features differ by
many orders of magnitude (FLOPs ~1e12, bytes ~1e9, a constant 1).
"""
from __future__ import annotations

import math
from typing import Sequence

_RIDGE = 1e-12  # relative ridge that keeps the scaled normal equations solvable


def least_squares(rows: Sequence[Sequence[float]], targets: Sequence[float]) -> list[float]:
    """Coefficients x minimising `sum (row . x - target)^2`; unused columns get 0."""
    if len(rows) != len(targets) or not rows:
        raise ValueError(f"need as many targets as rows (>0), got {len(rows)} rows, {len(targets)} targets")
    num_cols = len(rows[0])
    scales = [math.sqrt(sum(r[j] ** 2 for r in rows) / len(rows)) for j in range(num_cols)]
    active = [j for j in range(num_cols) if scales[j] > 0]
    gram = [[sum(r[i] * r[j] for r in rows) / (scales[i] * scales[j]) for j in active] for i in active]
    rhs = [sum(r[i] * t for r, t in zip(rows, targets)) / scales[i] for i in active]
    for k in range(len(active)):
        gram[k][k] += _RIDGE * len(rows)
    solution = _solve(gram, rhs)
    x = [0.0] * num_cols
    for k, j in enumerate(active):
        x[j] = solution[k] / scales[j]
    return x


def nonnegative_least_squares(rows: Sequence[Sequence[float]], targets: Sequence[float]) -> list[float]:
    """Least squares with every coefficient >= 0, by dropping the most negative column and re-solving.

    A simple active-set loop; exact when at most the dropped columns would go negative, which is
    the case for step-time features (all costs are non-negative by nature).
    """
    num_cols = len(rows[0]) if rows else 0
    kept = list(range(num_cols))
    while True:
        sub_rows = [[r[j] for j in kept] for r in rows]
        sub_x = least_squares(sub_rows, targets) if kept else []
        worst = min(range(len(kept)), key=lambda k: sub_x[k], default=None)
        if worst is None or sub_x[worst] >= 0:
            x = [0.0] * num_cols
            for k, j in enumerate(kept):
                x[j] = sub_x[k]
            return x
        del kept[worst]


def _solve(matrix: list[list[float]], rhs: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting on a small dense system (inputs are copied)."""
    n = len(rhs)
    a = [row[:] + [b] for row, b in zip(matrix, rhs)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-300:
            raise ValueError("singular least-squares system")
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(col + 1, n):
            factor = a[r][col] / a[col][col]
            for c in range(col, n + 1):
                a[r][c] -= factor * a[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (a[r][n] - sum(a[r][c] * x[c] for c in range(r + 1, n))) / a[r][r]
    return x
