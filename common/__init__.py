"""Shared machinery for the tf-recipes training scripts: launchers, the training loop, data sharding
and measurement. Everything that differs between launchers lives here; the recipes stay plain."""
