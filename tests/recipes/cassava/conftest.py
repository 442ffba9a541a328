"""Fixtures of the cassava-resnet tests: a prepared TFDS `cassava` directory of generated photos and a
ResNet50 backbone weights file (tests/cassava_data.py, shared with tests/integration)."""
from cassava_data import cassava_data_dir, keras_backbone_file  # noqa: F401 (fixtures)
