"""The per-cell driver gateway: the agent's only way to its driver LLM.

Each cell's Workspace actor starts one :class:`~autorl.gateway.app.Gateway` on loopback before the
agent. The agent's CLI is pointed at it with a per-cell token; the gateway forwards every call to
the driver's provider with the real key (read from the environment variable the driver config
names), retries provider 429/5xx with exponential backoff, enforces the optional token and cost
budgets, and records every call (latency, tokens in/out, cost) through a sink.

Every byte the agent sends is hostile (docs/threat-model.md): only an allow-list of each
protocol's fields and a few headers reach the provider, each call reserves its worst case of the
budgets before it is forwarded, and a stream the agent cuts short is still charged.

Modules: ``settings`` (the driver config as a typed object), ``requests`` (each protocol's
request body as a pydantic model: the allow-list), ``budget`` (reservations against the token
and cost budgets), ``usage`` (token counts from JSON and SSE bodies of each protocol),
``upstream`` (where and how a call is forwarded), ``translate`` (LiteLLM, for a protocol the
provider does not speak), ``count`` (the CLIs' token-count calls, answered locally), ``app`` (the
FastAPI app and server).
"""
