"""URL slugs for article titles."""


def slugify(title):
    """The URL slug of ``title``: lowercase ASCII words joined by single hyphens."""
    return title.lower().replace(" ", "_")
