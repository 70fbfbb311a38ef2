#!/usr/bin/env python3
"""The coefficients of the compiled f32 erf's large side (mlir/src/lower/elementwise.rs,
ERFC_SCALED): R(a) = erfc(a) * exp(a^2) on 1 <= a <= 4 as a polynomial of degree 8 in
t = (1/a - 0.625) / 0.375 (1/a on [1/4, 1] mapped to [-1, 1]), fitted by least squares on
4000 Chebyshev points, weighted for relative error. Prints the coefficients (t^0 first) and
the largest relative error of the fit on the points.

  python3 scripts/fit-erf.py        (needs numpy)
"""

import math

import numpy as np

DEGREE = 8
LO, HI = 0.25, 1.0  # 1/a for a in [1, 4]
POINTS = 4000


def main():
    nodes = np.cos(np.pi * (np.arange(POINTS) + 0.5) / POINTS)
    c, h = (LO + HI) / 2, (HI - LO) / 2
    u = c + h * nodes
    r = np.array([math.erfc(1 / x) * math.exp(1 / (x * x)) for x in u])
    v = np.vander(nodes, DEGREE + 1, increasing=True)
    coef, *_ = np.linalg.lstsq(v / r[:, None], np.ones_like(r), rcond=None)
    for k in coef:
        print(repr(float(k)))
    print(f"# largest relative error of the fit: {np.max(np.abs(v @ coef / r - 1)):.2e}")


if __name__ == "__main__":
    main()
