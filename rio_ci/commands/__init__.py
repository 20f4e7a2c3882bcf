"""Product commands built on the harness and the core: ``rio-ci eval`` (and, as the package
is restructured, ``show``, ``demo`` and ``bench``)."""
