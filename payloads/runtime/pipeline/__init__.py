"""The input pipeline (framework-neutral): HDF5 files as one row space, the epoch's order, direct
reads, the RAM cache, reader processes, and the loaders both training loops consume."""
