"""The swarm: a master and its workers — messages, handshake, shipping records home, membership,
and supervision (signals, the dead parent, Locust's own shutdown).
"""
