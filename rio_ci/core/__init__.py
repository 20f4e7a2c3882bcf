"""The pure core: State, admission and the fold, and the exception tree (``errors``). Nothing
here touches a file, a process, a clock or the network — ``tests/core/test_core_purity.py`` checks
the imports."""
