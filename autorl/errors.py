"""Domain exceptions. Each message says what is wrong and how to fix it."""


class AutorlError(Exception):
    """Base class of every error autorl raises on purpose."""


class ConfigError(AutorlError):
    """A CLI override or config file names something that does not exist or is invalid."""


class PrerequisiteError(AutorlError):
    """Something the requested feature needs is not installed or not reachable."""


class TaskError(AutorlError):
    """A task folder is malformed or its data cannot be built."""
