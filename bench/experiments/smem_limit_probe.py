"""Probe: how much dynamic shared memory a linked cubin can opt into, next to its static smem.
nvJitLink-linked sm_90 kernels show 1 KB of static shared memory; this says whether it counts
against the 227 KB opt-in limit. Usage: python bench/experiments/smem_limit_probe.py CUBIN ENTRY"""

import sys

from cuda.bindings import driver as d

cubin, entry = open(sys.argv[1], "rb").read(), sys.argv[2].encode()
d.cuInit(0)
_, dev = d.cuDeviceGet(0)
_, ctx = d.cuDevicePrimaryCtxRetain(dev)
d.cuCtxSetCurrent(ctx)
_, mod = d.cuModuleLoadData(cubin)
_, fn = d.cuModuleGetFunction(mod, entry)
A = d.CUfunction_attribute
print("static smem", d.cuFuncGetAttribute(A.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn)[1])
print("optin per block", d.cuDeviceGetAttribute(d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev)[1])
print("reserved per block", d.cuDeviceGetAttribute(d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, dev)[1])
for size in (232448, 232448 - 1024, 230400):
    err = d.cuFuncSetAttribute(fn, A.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, size)[0]
    print("dynamic", size, err.name)
