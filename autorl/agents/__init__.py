"""Agent adapters: how each agent is launched in a workspace. Registered by
``conf/agent/*.yaml``."""
