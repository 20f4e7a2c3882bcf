"""``python -I -m rio_ci``: what the ``rio-ci`` command runs, the one entry of rio-ci's command
line. The command is a shell script (``bin/rio-ci``) that starts the interpreter beside it
isolated, so nothing on ``PYTHONPATH``, in the user site or in the working directory runs
before this (docs/design.md, "The rio-ci command"). First what the process does before the
command line is imported (``rio_ci.start``), then the command line (``rio_ci.cli``)."""

if __name__ == "__main__":
    import sys

    from rio_ci.start.early import begin

    begin(sys.argv[1:])  # does not return when the process re-executes
    from rio_ci.cli import main

    raise SystemExit(main())
