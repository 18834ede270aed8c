"""memlab: the shared library of the memorization and unlearning companion book."""
import os as _os

__version__ = "0.1.0"

if _os.environ.get("MEMLAB_OFFLINE") == "1":  # tests run chapters with the network off
    from memlab import netguard as _netguard

    _netguard.install()
