"""The rehearsal: which load, when — step authority, shapes, arrivals, steps, search, sessions,
workload classes, cache arms, and the results folder a run writes.
"""
