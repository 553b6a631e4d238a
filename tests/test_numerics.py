"""float64 -> every small float format, rounded to nearest even, against exact rational arithmetic."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_mgit.tensors.numerics import can_compute, from_float64, to_float64

# name: (exponent bits, mantissa bits, bias, infinities?, largest finite value)
FORMATS = {
    "F64": (11, 52, 1023, True, 1.7976931348623157e308),
    "F32": (8, 23, 127, True, (2 - 2**-23) * 2.0**127),
    "F16": (5, 10, 15, True, 65504.0),
    "BF16": (8, 7, 127, True, (2 - 2**-7) * 2.0**127),
    "F8_E5M2": (5, 2, 15, True, 57344.0),
    "F8_E4M3": (4, 3, 7, False, 448.0),  # E4M3FN
    "F8_E4M3FNUZ": (4, 3, 8, False, 240.0),
    "F8_E5M2FNUZ": (5, 2, 16, False, 57344.0),
}


def reference(name: str, x: float) -> float:
    """x rounded to the format, ties to even, by exact arithmetic (a different method)."""
    _, m_bits, bias, has_inf, max_finite = FORMATS[name]
    fnuz = name.endswith("FNUZ")
    if math.isnan(x) or (math.isinf(x) and not has_inf):
        return math.nan
    if math.isinf(x):
        return x
    a = Fraction(abs(x))
    if a == 0:
        r = Fraction(0)
    else:
        e = a.numerator.bit_length() - a.denominator.bit_length()
        while Fraction(2) ** e > a:
            e -= 1
        while Fraction(2) ** (e + 1) <= a:
            e += 1
        quantum = Fraction(2) ** (max(e, 1 - bias) - m_bits)
        r = round(a / quantum) * quantum  # round() on a Fraction: half to even
    if r > Fraction(max_finite):
        return math.copysign(math.inf, x) if has_inf else math.nan
    if r == 0 and fnuz:
        return 0.0  # no negative zero
    return math.copysign(float(r), x)


def roundtrip(name: str, x: float) -> float:
    out = to_float64(name, from_float64(name, np.array([x])))
    assert out is not None
    return float(out[0])


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (
        a == b and math.copysign(1, a) == math.copysign(1, b)
    )


def midpoints(name: str) -> list[float]:
    """Values exactly halfway between neighbouring codes: every tie, and the overflow edge."""
    width = 2 if name in ("BF16", "F16") else 1
    if width == 1:
        codes = np.arange(256, dtype=np.uint8).tobytes()
    else:
        codes = np.arange(0, 65536, 97, dtype=np.uint16).tobytes()  # a spread of the grid
    values = to_float64(name, codes)
    assert values is not None
    v = np.unique(values[np.isfinite(values)])
    mids = list((v[:-1] + v[1:]) / 2)
    top = FORMATS[name][4]
    step = (
        top - v[v < top][-1]
        if width == 1
        else 2.0 ** (math.floor(math.log2(top)) - FORMATS[name][1])
    )
    with np.errstate(over="ignore"):  # F64's edges overflow to inf, as they should
        return [*mids, top + step / 2, -(top + step / 2), top + step / 4]


@pytest.mark.parametrize("name", list(FORMATS))
def test_ties_and_overflow_edges_round_like_exact_arithmetic(name: str) -> None:
    for x in midpoints(name):
        assert same(roundtrip(name, x), reference(name, x)), x


@pytest.mark.parametrize("name", list(FORMATS))
@given(x=st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True))
@settings(max_examples=300, deadline=None)
def test_any_float64_rounds_like_exact_arithmetic(name: str, x: float) -> None:
    assert same(roundtrip(name, x), reference(name, x))


@pytest.mark.parametrize("name", ["F8_E5M2", "F8_E4M3", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "BF16"])
def test_every_code_survives_float64_and_back(name: str) -> None:
    dtype = "<u2" if name == "BF16" else "u1"
    codes = np.arange(65536 if name == "BF16" else 256).astype(dtype)
    values = to_float64(name, codes.tobytes())
    assert values is not None
    back = np.frombuffer(from_float64(name, values), dtype=dtype)
    finite = ~np.isnan(values)
    assert np.array_equal(back[finite], codes[finite])
    assert np.all(np.isnan(to_float64(name, back[~finite].tobytes())))


def test_integers_round_half_to_even_and_must_fit() -> None:
    got = np.frombuffer(from_float64("I8", np.array([0.5, 1.5, -2.5, 127.4, -128.0])), "i1")
    assert got.tolist() == [0, 2, -2, 127, -128]
    for bad in (127.6, -128.6, math.nan, math.inf):
        with pytest.raises(ValueError, match="does not fit"):
            from_float64("I8", np.array([bad]))
    with pytest.raises(ValueError, match="does not fit"):
        from_float64("I64", np.array([2.0**63]))  # int64 max is not a float64: the bound is 2**63
    assert np.frombuffer(from_float64("U64", np.array([2.0**64 - 2048])), "<u8")[0] == 2**64 - 2048


def test_types_without_arithmetic_are_refused() -> None:
    for dtype in ("BOOL", "F4", "F6_E2M3", "F8_E8M0"):
        assert not can_compute(dtype)
        with pytest.raises(ValueError, match="cannot hold computed values"):
            from_float64(dtype, np.array([1.0]))
