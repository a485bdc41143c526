"""idx_io.py — reads the IDX files of MNIST and Fashion-MNIST (gzipped, as
Debian's dataset-fashion-mnist installs them) into numpy arrays. Used by
make_fashion_cnn.py and the tests."""
import gzip

import numpy as np


def read_idx(path):
    """The array in a gzipped IDX file: uint8, its dimensions from the header."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)
