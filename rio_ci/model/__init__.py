"""Models answer a Turn with one ``step`` call. See ``base.Model``."""
