"""The shop's defaults, each written once: `alprl/WebShop-v0` takes them when `gym.make` names none, and the run
config's `env.*` keys take them as their defaults (trainer/config/train_config.py).

A module of its own, outside envs/webshop/, so that importing the config does not load the shop (its catalog, BM25
index and Gymnasium env), as envs/tir_defaults.py does for the math envs.
"""

DEFAULT_NUM_PRODUCTS = 1000
"""Products in the generated catalog (`env.num_products`)."""
