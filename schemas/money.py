"""US dollars as every message, table and page prints them (the CLI, the dashboard and the functions' messages):
one function, so that a run costing a third of a cent reads "$0.0031", not "$0.00".

- from a dollar up: to the cent, with thousands separated: $1,234.50;
- under a dollar: SIGNIFICANT_DIGITS significant digits, at least two decimals, no trailing zeros past them: $0.50,
  $0.03, $0.0512, $0.0031; below SMALLEST (past MAX_DECIMALS) "under $0.000001";
- zero: $0.00; a negative amount with its sign first: -$0.0031; a value that is not a finite number: "$?".
"""

from __future__ import annotations

import math

SIGNIFICANT_DIGITS = 3
"""Significant digits of an amount under a dollar."""
MAX_DECIMALS = 6
"""Decimals shown at most: amounts below SMALLEST read as "under" it."""
SMALLEST = 10.0**-MAX_DECIMALS


def usd_text(value: float) -> str:
    """An amount of US dollars as the module's docstring says."""
    if not math.isfinite(value):
        return "$?"
    sign, amount = ("-", -value) if value < 0 else ("", float(value))
    if amount >= 1 or amount == 0:
        return f"{sign}${amount:,.2f}"
    if amount < SMALLEST:
        return f"{sign}under ${SMALLEST:.{MAX_DECIMALS}f}"
    decimals = min(MAX_DECIMALS, max(2, SIGNIFICANT_DIGITS - 1 - math.floor(math.log10(amount))))
    whole, _, fraction = f"{amount:.{decimals}f}".partition(".")
    fraction = fraction[:2] + fraction[2:].rstrip("0")
    return f"{sign}${whole}.{fraction}"
