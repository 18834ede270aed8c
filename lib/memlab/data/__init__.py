"""Data access: CIFAR images, text corpora and tokenizers, synthetic sets, splits."""
