"""deepsearchqa, agent side: the scripted recipe and the ReAct prompt protocol it trains on."""
