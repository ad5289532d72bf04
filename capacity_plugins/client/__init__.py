"""The HTTP client of one request: `LLMUser`, the stream reader, token counting, backoff.

It knows how to send one request and time it; what to send when is the rehearsal's business, and
how many processes send is the swarm's.
"""
