"""Layer core: the machinery every other layer stands on.

Configuration and profiles, the chapter registry, the model cache, the cost log, a run's results
file and provenance, progress bars and their relay to ``memlab run``, notices, atomic files and
locked publishing, the network guard, and what this process's training loops compiled.

May import: nothing else of memlab.
"""
