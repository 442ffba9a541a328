"""The fixtures several integration test modules share, made available to every one of them here
(rather than imported into each, where a test's argument would redefine the imported name): the
Docker engine and CPU base (tests/docker_images.py), mnist-cnn's image the container tests build
(test_containers.py), the SLURM cluster (test_slurm_cluster.py) and the generated cassava-resnet
data (tests/cassava_data.py)."""
from cassava_data import cassava_data_dir, keras_backbone_file  # noqa: F401
from docker_images import cpu_base, engine  # noqa: F401
from test_containers import mnist_image  # noqa: F401
from test_slurm_cluster import slurm_cluster, two_nodes  # noqa: F401
