"""A Cell's way out (docs/network.md): the network namespace it runs in, the policy that decides
where it may connect, the forward proxy that is its only way out, and the ledger that turns
the proxy's account of each connection into what the Journal keeps.

- ``policy``: host patterns (``name``, ``*.domain``, an IP literal, each with an optional
  ``:port``), the modes ``allowlist``, ``open`` and ``none``, the rule for loopback and
  link-local addresses, and :meth:`~rio_ci.egress.policy.Policy.admits`;
- ``default_allow``: the default allowlist, a data file (``default_allow.txt``) with the reason
  for every entry;
- ``netns``: a network namespace with only its own loopback and the proxy's listening socket,
  entered by one thread around one ``Popen``; ``problem()`` says why none can be made;
- ``proxy``: the forward proxy (``CONNECT`` and plain HTTP) on a thread of its own, one account
  (:class:`~rio_ci.egress.proxy.Connection`) per connection, tagged with the Execution that
  was running when it was accepted; the variables that point a Cell's tools at it;
- ``ledger``: per Execution, the first few identical connections as entries of their own and
  the rest counted, so a loop cannot flood the Journal; the refused hosts for the Cell's result.

The rule of this folder: no Session, no Journal, no Forge, no CI environment. It knows nothing
of Cells beyond a tag; the Owner decides what to commit, and when.
``tests/quality/test_architecture.py`` checks the imports.
"""
