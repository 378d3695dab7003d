"""Base models: the offline ``tiny`` model and hub models, resolved to a local folder."""
