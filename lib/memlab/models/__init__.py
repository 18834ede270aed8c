"""Layer models: the networks and the loops that train them.

CIFAR ResNet-18 and the ViT control, small causal LMs (one and stacked), the masked diffusion LM,
pretrained models from their wheels; ``train`` (classifiers) and ``lm`` (language models) hold the
training loops.

May import: core, data.
"""
