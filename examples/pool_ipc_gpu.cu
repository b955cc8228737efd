// pool_ipc built as CUDA: the same source, with the children filling their buffers by kernels.
#include "pool_ipc.cpp"
