"""Exceptions for broken infrastructure. Expected outcomes (a rejected patch, a failing
script, a timeout) are values, never exceptions: a refused patch is a
``rio_ci.core.admission.Rejection``; ``Rejected`` is the same idea where an API raises.

    RioError                  base; ``exit_code`` is the CLI status it maps to
    ├── UsageError            bad command-line input (exit 2)
    ├── Rejected              an input the contract refuses: message, Timer, Turn (exit 3)
    ├── StorageError          the Session file or its lock cannot be trusted (exit 4)
    │   ├── OwnershipError    another Owner holds the Session
    │   ├── UncertainCommit   a COMMIT's outcome is unknown: reopen before doing anything
    │   └── ArtifactError     a Session artifact failed a check (zip entries, manifest, checksum,
    │                         integrity, schema); the previous generation may still be good
    ├── RecoveryError         surviving Workers could not be proven stopped (exit 4)
    ├── NamespaceError        a thread could not return from a Cell's network namespace: the
    │                         Owner stops (exit 4)
    ├── RunEnded              the run is terminal; nothing new is accepted (exit 1)
    ├── ForgeError            a call to the code host failed (exit 1); ``status`` is its HTTP code
    └── ModelError            a model attempt got no usable answer (transient or not)
"""

from __future__ import annotations


class RioError(Exception):
    """Base of every rio_ci exception."""

    exit_code = 1


class UsageError(RioError):
    exit_code = 2


class Rejected(RioError):
    """A rejection raised: the input was refused for ``reason`` and nothing was committed.
    Admission returns its rejections as values (``rio_ci.core.admission.Rejection``: a
    refused patch is a result, recorded by digest and size); a Session method that has no
    such result to return raises this instead: ``receive`` for a full Inbox, ``step`` for an
    unknown or closed Turn. The CLI prints either as ``{"rejected": reason}`` and exits 3."""

    exit_code = 3

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class StorageError(RioError):
    exit_code = 4


class OwnershipError(StorageError):
    pass


class UncertainCommit(StorageError):
    """An error at or after COMMIT: the process must stop, reopen and inspect."""


class ArtifactError(StorageError):
    """A Session artifact was refused; the message is a one-line reason."""


class RecoveryError(RioError):
    exit_code = 4


class NamespaceError(RioError):
    """A thread that entered a Cell's network namespace (``rio_ci.egress.netns``) could not
    return to the host's. It stays where nothing is reachable (it fails closed); the Owner
    must stop rather than go on from a thread that cannot reach what it expects."""

    exit_code = 4


class RunEnded(RioError):
    exit_code = 1


class ForgeError(RioError):
    """A code-host call failed. The message says which operation; ``status`` is the HTTP
    status when the host answered (None for network failures)."""

    exit_code = 1

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status


class ModelError(RioError):
    """A model attempt got no usable answer. ``transient`` says the provider may answer if
    asked again (connection, timeout, 408, 409, 429, 5xx, 529); ``retry_after`` (seconds) is
    the provider's hint when it gave one."""

    def __init__(
        self,
        message: str,
        *,
        transient: bool,
        retry_after: float | None = None,
        status: int | None = None,
    ):
        super().__init__(message)
        self.transient = transient
        self.retry_after = retry_after
        self.status = status  # the HTTP status when the provider answered (not billed)
