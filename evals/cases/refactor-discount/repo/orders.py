"""Order totals and quotes. Both apply discount codes, each with its own copy of the rules."""


def order_total(lines, code=None):
    """Total of ``lines`` (quantity, unit price) after the discount ``code``, in 2 decimals."""
    total = sum(quantity * price for quantity, price in lines)
    if code == "SAVE10":
        total = total * 0.9
    elif code == "HALF":
        total = total * 0.5
    elif code == "FIVEOFF":
        total = max(0, total - 5)
    return round(total, 2)


def quote(price, quantity, code=None):
    """What ``quantity`` items at ``price`` cost after the discount ``code``, in 2 decimals."""
    total = price * quantity
    if code == "SAVE10":
        total = total * 0.9
    elif code == "HALF":
        total = total * 0.5
    elif code == "FIVEOFF":
        total = max(0, total - 5)
    return round(total, 2)
