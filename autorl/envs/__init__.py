"""Interactive environments (ALFWorld, WebShop, DeepSearchQA) behind one reset/step contract.

Nothing in this package imports Ray: :mod:`autorl.actors.env_pool` hosts these environments in
Ray actors, and :class:`autorl.envs.host.LocalEnvClient` runs them in-process (tests, benches).
"""
