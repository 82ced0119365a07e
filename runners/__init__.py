"""runners: the agent that runs on GPU/CPU machines and talks HTTP to the service.

Never imports `app`: a GPU box needs requests and its own torch, not Flask and a database. The
results-document schema lives here (`runners.results`) and the service imports it from here.
"""
