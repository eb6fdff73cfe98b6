"""Fleet runs: every selected cell built at once, cold, with each builder sampled every
second; the run folder they write, the pages that show it, and publishing to a docs branch.

A fleet run answers "what does a full cold build look like": its figures are throughput
under contention. They are never written to the bench results store, so no bench median
ever mixes them in.
"""
