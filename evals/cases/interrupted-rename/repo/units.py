"""Unit conversions."""


def convert(fahrenheit):
    """Degrees Fahrenheit in degrees Celsius."""
    return (fahrenheit - 32) * 5 / 9
