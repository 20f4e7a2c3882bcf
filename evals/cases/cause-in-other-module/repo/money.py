"""Money helpers: amounts are Decimals rounded to whole cents."""
from decimal import Decimal

CENT = Decimal("0.01")


def to_cents(amount):
    """``amount`` (Decimal, int or str) rounded to whole cents, halves away from zero."""
    return Decimal(round(float(amount), 2)).quantize(CENT)
