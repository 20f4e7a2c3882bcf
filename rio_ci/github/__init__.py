"""The GitHub layer (docs/github.md): the action's phases (``action``, ``job``, ``finish``,
``prune``) and the state the run step hands the others (``job_state``),
intake of events, comments and reviews (``triggers``, ``intake``, ``listen``, ``starts``), the
Session artifact's generations (``generations``, ``newest``, ``provenance``), the launch record's
pushes (``record``), the working tree on a branch (``workspace``, ``git``; what of it git may
open, ``survey``; the checkout's ``.git`` rebuilt when a step ends, ``gitdirs``), pictures from
issues (``images``), the progress comment with the run's link, the step summary and its
pace between rounds (``comment``), Timers and the sweep, and the runner the job runs on
(``runner``, with what rio-ci assumes of each image in ``runners.json``).

The rule of this folder: it is the only code that reads the Actions environment (``GITHUB_*``
and ``RUNNER_*`` variables, and the image's ``ImageOS`` and ``ImageVersion``); everything
below it (the Session, the Owner, the harness, the reports and the Forges) works the same on
a laptop. ``tests/quality/test_architecture.py`` checks it.
"""
