"""The OpenAI-compatible wire, one package for every caller (the agent's endpoint policy, the LLM user, the LLM
judge, the verl bridge): `client` (the HTTP seam: retries, concurrency, the key from the environment), `wire`
(our messages in the chat-completions format) and `parsing` (the one reader of assistant output: reasoning,
text, tool calls). No Hydra, no tool server: the judge can use it without the agent's side.
"""
