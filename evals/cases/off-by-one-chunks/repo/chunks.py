"""Split a sequence into consecutive chunks."""


def chunks(items, size):
    """Consecutive slices of ``items``, each ``size`` long except perhaps the last."""
    if size < 1:
        raise ValueError("size must be at least 1")
    return [items[start:start + size] for start in range(0, len(items) - size, size)]
