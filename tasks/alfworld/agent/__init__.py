"""alfworld, agent side: the scripted recipe, the ReAct prompt protocol and its few-shot
examples."""
