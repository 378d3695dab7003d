"""What every interactive task shares: the reset/step contract, the clients that play episodes, the
rollout loop and the agent's training sessions. Each task's environment lives in its folder
(``tasks/<id>/env.py``, named by the manifest's ``env`` entry point).

Nothing in this package imports Ray: :mod:`autorl.actors.env_pool` hosts the environments in
Ray actors, and :class:`autorl.envs.host.LocalEnvClient` runs them in-process (tests, benches).
"""
