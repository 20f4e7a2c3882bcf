"""Invoices: lines of (quantity, unit price) plus tax."""
from decimal import Decimal

from money import to_cents


def total(lines, tax_rate="0.05"):
    """Sum of quantity x unit price, plus tax at ``tax_rate``, rounded to cents."""
    net = sum((Decimal(quantity) * Decimal(price) for quantity, price in lines), Decimal(0))
    return to_cents(net * (1 + Decimal(tax_rate)))
