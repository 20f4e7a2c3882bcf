"""The rio-ci commands that do more than call the Session: run, work, show, output, demo,
bench and eval. ``rio_ci.cli`` parses arguments and hands over to these."""
