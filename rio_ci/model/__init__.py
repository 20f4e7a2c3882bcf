"""Models answer a Turn with one ``step`` call. See ``base.Model``; ``build_model`` turns a
``--model`` spec into one."""

from rio_ci.model.providers import build_model

__all__ = ["build_model"]
