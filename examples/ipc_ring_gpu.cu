// ipc_ring built as CUDA: the same source, with kernels on each worker's own stream in its own context.
#include "ipc_ring.cpp"
