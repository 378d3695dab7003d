"""Sealed cells (docs/design.md#a-cells-life, docs/threat-model.md): the agent under test runs in a
sandbox backend chosen by ``sandbox.mode``, by default bubblewrap in a cgroup of its own.

- :mod:`autorl.seal.launch`: the backend interface (:class:`~autorl.seal.launch.SandboxBackend`,
  :class:`~autorl.seal.launch.CellSeal`), its registry (``conf/sandbox/<name>.yaml``) and ``none``.
- :mod:`autorl.seal.bwrap_seal`: the ``bwrap`` backend (what is bound, sockets, forwarder, uid).
- :mod:`autorl.seal.bwrap`: the sandbox's command line (namespaces, bind mounts, uid drop).
- :mod:`autorl.seal.forward`: the in-sandbox forwarder, TCP on loopback to the cell's unix sockets.
- :mod:`autorl.seal.cgroups`: the cell's cgroup (v1 and v2): limits, freeze and kill at the budget.
- :mod:`autorl.seal.toolchain`: the agent's own Python environment, without autorl or tasks/.
- :mod:`autorl.seal.preflight`: checks before any cell starts; nothing is silently downgraded.
"""
