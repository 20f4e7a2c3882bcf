"""The GitHub layer (docs/github.md): the action's phases, intake of events and comments, Session
artifacts and their generations, the progress comment, the working tree on a branch, and the
Forge (GitHub through PyGithub)."""
