"""Model definitions: CIFAR ResNet-18, small causal LMs, the masked diffusion LM."""
