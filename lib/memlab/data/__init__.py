"""Layer data: CIFAR images, text corpora and tokenizers, synthetic sets, splits, downloads.

May import: core.
"""
