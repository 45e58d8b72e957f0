"""The payload runtime: small modules the training entry point (``payloads.train_keras``) composes.

Only the stdlib, numpy, h5py, TensorFlow/Keras 2 and Horovod are imported here (blosc2 and
matplotlib optionally), never ``gridml``: the payload runs on worker nodes without the controller.
TensorFlow is imported lazily, inside functions, so thread settings can be applied first.
"""
