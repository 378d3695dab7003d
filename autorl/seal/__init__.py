"""Sealed cells (SPEC §4, §10): the agent under test runs in a bubblewrap sandbox, in a cgroup of its own.

- :mod:`autorl.seal.bwrap`: the sandbox's command line (namespaces, bind mounts, uid drop).
- :mod:`autorl.seal.launch`: one cell's sealed launch (what is bound, sockets, forwarder, uid).
- :mod:`autorl.seal.forward`: the in-sandbox forwarder, TCP on loopback to the cell's unix sockets.
- :mod:`autorl.seal.cgroups`: the cell's cgroup (v1 and v2): limits, freeze and kill at the budget.
- :mod:`autorl.seal.toolchain`: the agent's own Python environment, without autorl or tasks/.
- :mod:`autorl.seal.preflight`: checks before any cell starts; nothing is silently downgraded.
"""
