"""The code host seen through one interface (``base.Forge``), one host per module:

- ``local``: a directory (issues, comments and pull requests in one JSON file), the default
  where there is no GitHub, and the demo's;
- ``github``: GitHub through PyGithub, with its parts ``github_pages`` (reads once per job,
  conditionally), ``github_limits`` (rate limits waited out), ``github_reviews``,
  ``github_runs``, ``github_probe`` and ``github_download``;
- ``issues``: what rio makes of an issue on any host (its branch, the goal quoted from it).

The rule of this folder: a Forge knows nothing of a Session, the Owner, the harness or the CI
environment. It is told what to publish and answers what the host holds; no module here serves
two hosts. ``tests/quality/test_architecture.py`` checks the imports.
"""
