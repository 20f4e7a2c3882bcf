"""A one-line-per-city temperature report."""
from units import convert


def line(city, fahrenheit):
    return f"{city}: {convert(fahrenheit):.1f} C"


def report(readings):
    return "\n".join(line(city, fahrenheit) for city, fahrenheit in readings)


if __name__ == "__main__":
    print(report([("Lisbon", 70), ("Oslo", 41)]))
