"""``python -I -m rio_ci``: what the ``rio-ci`` command runs. The command is a shell script
(``bin/rio-ci``) that starts the interpreter beside it isolated, so nothing on ``PYTHONPATH``,
in the user site or in the working directory runs before this (docs/design.md, "The rio-ci
command"); from here on it is the same entry as ``python -m rio_ci.cli``."""

if __name__ == "__main__":
    from rio_ci.entry import main

    raise SystemExit(main())
