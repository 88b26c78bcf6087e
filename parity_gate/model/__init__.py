"""The typed result model every stage after the worker reads.

numpy- and torch-free on purpose: the Action, shard merging and report
readers import it on machines (and in processes) that never run a model.
"""
