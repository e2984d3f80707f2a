"""The desktop app's Qt side: one package per feature, the leaves they share beside them."""
