"""alpacaeval, agent side: the scripted recipe and the prompt protocol it trains on."""
