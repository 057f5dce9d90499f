"""Loading and launching a linked cubin with the CUDA driver API (cuda.bindings.driver).

The manifest gives the entry, grid, block, dynamic shared memory and the parameter layout (one
pointer per operand, packed into the kernel's single __grid_constant__ parameter struct), which is
read as the kernel's ABI (pipelink/abi.py: ``KernelABI.from_manifest``, typed ``Param`` members).
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass, replace

from .abi import KernelABI, Param
from .errors import DeviceError


def _check(result, what: str):
    err, *rest = result if isinstance(result, tuple) else (result,)
    from cuda.bindings import driver
    if err != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(err)
        raise DeviceError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}")
    return rest[0] if len(rest) == 1 else rest


def load_function(cubin: bytes, entry: str, dynamic_smem: int) -> tuple:
    """(device, context, module, function): the device's primary context (the one torch uses) made current on this
    thread, the cubin loaded in it, and its kernel ``entry`` allowed ``dynamic_smem`` bytes of dynamic shared memory."""
    from cuda.bindings import driver
    _check(driver.cuInit(0), "cuInit")
    dev = _check(driver.cuDeviceGet(0), "cuDeviceGet")
    context = _check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    _check(driver.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    module = _check(driver.cuModuleLoadData(cubin), "cuModuleLoadData")
    function = _check(driver.cuModuleGetFunction(module, entry.encode()), f"cuModuleGetFunction({entry})")
    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    _check(driver.cuFuncSetAttribute(function, attr, dynamic_smem),
           f"setting {dynamic_smem} bytes of dynamic shared memory")
    return dev, context, module, function


# The compute capability each target runs on (device profiles: spec.py DEVICES).
CAPABILITY = {"sm_90a": (9, 0), "sm_100a": (10, 0), "sm_103a": (10, 3), "sm_120a": (12, 0)}


def gpu_available(arch: str = "sm_90a") -> tuple[bool, str]:
    """(True, device name) when a CUDA device that runs ``arch`` code (its compute capability) is usable here."""
    try:
        from cuda.bindings import driver
        if driver.cuInit(0)[0] != driver.CUresult.CUDA_SUCCESS:
            return False, "no CUDA driver"
        err, count = driver.cuDeviceGetCount()
        if err != driver.CUresult.CUDA_SUCCESS or count == 0:
            return False, "no CUDA device"
        err, dev = driver.cuDeviceGet(0)
        attr = driver.CUdevice_attribute
        major = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)[1]
        minor = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)[1]
        name = driver.cuDeviceGetName(64, dev)[1].split(b"\0")[0].decode()
        if (major, minor) != CAPABILITY[arch]:
            return False, (f"{name} is not sm_90 (Hopper)" if arch == "sm_90a" else
                           f"{name} (sm_{major}{minor}) does not run {arch} code")
        return True, name
    except Exception as exc:  # no driver library, no bindings
        return False, f"no CUDA driver here ({type(exc).__name__})"


@dataclass(frozen=True)
class Arguments:
    """A kernel's parameter block (``blob``, the __grid_constant__ struct) and the one-entry kernelParams array
    pointing at it: kept together, as the driver reads both at each launch. ``address`` is the array's, worked
    out once (a launch passes it)."""
    blob: object
    pointer: object
    address: int


def _launch_kernel(function, dims: tuple, stream: int, params: int) -> int:
    """cuLaunchKernel(function, grid, block, dynamic smem, stream, params) as an int CUresult. Through the
    cuda.bindings call: on an H100 it took 3.9 us a launch against 5.0 through ctypes on libcuda (bench/NOTES.md,
    thirtieth session). The bound function is looked up once (an import statement in a launch costs a lookup a
    call)."""
    global _cu_launch_kernel
    if _cu_launch_kernel is None:
        from cuda.bindings import driver
        _cu_launch_kernel = driver.cuLaunchKernel
    return int(_cu_launch_kernel(function, *dims, stream, params, 0)[0])


_cu_launch_kernel = None


@dataclass
class HostMapped:
    host: int
    device: int
    nbytes: int

    def clear(self) -> None:
        ctypes.memset(self.host, 0, self.nbytes)

    def words(self, n: int) -> list[int]:
        return list((ctypes.c_uint32 * n).from_address(self.host))

    def free(self) -> None:
        from cuda.bindings import driver
        _check(driver.cuMemFreeHost(self.host), "cuMemFreeHost")


def workspace_layout(manifest: dict) -> list[tuple[str, int, str]]:
    """A linked kernel's workspaces as (parameter, bytes, when the runtime clears it: "each launch", "first
    launch" or "never"), in order."""
    def cleared(workspace: dict) -> str:
        return "each launch" if workspace.get("zero") else "first launch" if workspace.get("zero_once") else "never"
    return [(p.name, int(p.shape[0]), cleared(p.workspace)) for p in KernelABI.from_manifest(manifest).workspaces]


def check_same_workspaces(mine: dict, theirs: dict) -> None:
    """Two kernels can launch on one set of workspaces only where they declare the same ones."""
    a, b = workspace_layout(mine), workspace_layout(theirs)
    if a != b:
        raise DeviceError(f"kernel {mine['entry']} cannot use the workspaces of {theirs['entry']}: "
                          f"it declares {a or 'none'}, the other {b or 'none'} (parameter, bytes, zeroed)")


class Runtime:
    """One loaded linked kernel on device 0 (primary context)."""

    def __init__(self, cubin: bytes, manifest: dict):
        from cuda.bindings import driver
        self.driver = driver
        self.manifest = manifest
        self.abi = KernelABI.from_manifest(manifest)
        self._tensor_maps: dict[tuple, bytes] = {}
        self._workspaces: dict[str, int] = {}  # the link's workspaces: name -> device address
        self._allocations: list[int] = []  # what this runtime allocated (not another's shared workspaces): close frees
        self._zeroed: tuple[int, int] | None = None  # the zeroed workspaces' one allocation: (address, bytes)
        self._launched = False  # the zero_once workspaces are cleared before this runtime's first launch
        # What a caller passes: every parameter but the workspaces, which this runtime owns.
        self.params = list(self.abi.launch_params)
        dev, self.context, self.module, self.function = load_function(cubin, manifest["entry"],
                                                                      manifest["dynamic_smem"])
        self._dims = (*manifest["grid"], *manifest["block"], manifest["dynamic_smem"])
        if manifest.get("coordinated_by"):
            self._check_all_resident(dev)

    def resident_clusters(self) -> int | None:
        """How many clusters of this kernel the GPU places at once (the driver's occupancy answer: a cluster's
        blocks share a GPC, so a GPC's SMs past a multiple of the cluster size stay empty); None without clusters.
        A persistent grid of more clusters than this runs the extra ones after the first finish."""
        d, m = self.driver, self.manifest
        if m.get("cluster", 1) == 1:
            return None
        config = d.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = m["grid"][0], 1, 1
        config.blockDimX, config.blockDimY, config.blockDimZ = m["block"][0], 1, 1
        config.sharedMemBytes = m["dynamic_smem"]
        return _check(d.cuOccupancyMaxActiveClusters(self.function, config), f"cuOccupancyMaxActiveClusters({m['entry']})")

    def _check_all_resident(self, dev) -> None:
        """Blocks that wait on each other (grid barriers, tile tables) hang unless every block is resident at
        once. The link checked one block an SM; here the driver says how many fit, and in clusters how many
        clusters it can place at once: a cluster's blocks share a GPC, so a GPC's odd SM can stay empty."""
        d, m = self.driver, self.manifest
        grid, cluster = m["grid"][0], m.get("cluster", 1)
        why = ", ".join(m["coordinated_by"])
        if cluster > 1:
            fits = self.resident_clusters()
            if grid // cluster > fits:
                raise DeviceError(f"kernel {m['entry']}: its blocks wait on each other ({why}), so all {grid // cluster} "
                                  f"clusters of {cluster} must be resident at once, but this GPU places at most {fits}, "
                                  f"over by {grid // cluster - fits}",
                                  hint=f"link with a grid of {fits * cluster} blocks or fewer ([launch] grid), or "
                                       "smaller clusters")
            return
        per_sm = _check(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(self.function, m["block"][0], m["dynamic_smem"]),
                        f"cuOccupancyMaxActiveBlocksPerMultiprocessor({m['entry']})")
        sms = _check(d.cuDeviceGetAttribute(d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
                     "cuDeviceGetAttribute(multiprocessor count)")
        if grid > per_sm * sms:
            raise DeviceError(f"kernel {m['entry']}: its blocks wait on each other ({why}), so all {grid} must be "
                              f"resident at once, but this GPU holds {per_sm} a multiprocessor x {sms} = {per_sm * sms}, "
                              f"over by {grid - per_sm * sms}",
                              hint="link for this GPU (its SM count), or with a smaller [launch] grid")

    # -- launch ------------------------------------------------------------------------------
    def launch_arrays(self, arrays: list, stream: int | None = None, shapes: dict | None = None) -> None:
        """Launch on device arrays in manifest order: torch tensors, anything with
        ``__cuda_array_interface__`` (CuPy, Numba) or ``__dlpack__``. Shapes, dtypes and contiguity
        are checked against the manifest, or against ``shapes`` (parameter name -> shape) where given:
        pipelink.op launches a kernel linked for a bound fact's bucket on smaller operands, whose TMA
        maps are then encoded with the shapes at hand. With torch tensors and no stream given, the
        launch goes on torch's current stream (so it is captured into CUDA graphs like any torch op)."""
        params = [replace(p, shape=tuple(shapes[p.name])) if shapes and p.name in shapes else p for p in self.params]
        if len(arrays) != len(params):
            names = ", ".join(p.name for p in params)
            raise DeviceError(f"kernel {self.manifest['entry']} takes {len(params)} operands ({names}), got {len(arrays)}")
        pointers = [device_pointer(a, p) for a, p in zip(arrays, params)]
        if stream is None:
            stream = _torch_stream(arrays)
        self.launch(pointers, stream, shapes)

    def launch(self, pointers: list[int], stream: int = 0, shapes: dict | None = None) -> None:
        """Launch with the caller's operands (``self.params``, in order) on ``stream``; the
        workspaces are added here, cleared first on the same stream where the contract says so.
        ``shapes`` (parameter name -> shape) gives the TMA maps of those operands their shapes at
        hand instead of the manifest's (launch_arrays has checked them)."""
        if len(pointers) != len(self.params):
            names = ", ".join(p.name for p in self.params)
            raise DeviceError(f"kernel {self.manifest['entry']} takes {len(self.params)} operands ({names}), "
                              f"got {len(pointers)}")
        self.launch_prepared(self.arguments(pointers, shapes), stream)

    def arguments(self, pointers: list[int], shapes: dict | None = None) -> "Arguments":
        """The kernel's parameter block for these operands (``self.params`` order; alignment checked, TMA maps
        encoded, the workspaces' addresses filled in), which ``launch_prepared`` launches as often as wanted:
        pipelink.op keeps one per set of addresses, so a call repeated on the same tensors builds nothing."""
        check_alignment(self.params, pointers)
        if self._zeroed is None:  # the first use allocates (a kernel may have no workspace at all)
            self._allocate_workspaces()
        given = iter(pointers)
        blob = ctypes.create_string_buffer(max(self.abi.size, 8))
        for param in self.abi.params:
            ptr = next(given) if param.workspace is None else self._workspaces[param.name]
            if param.tma is not None and shapes and param.name in shapes:
                param = replace(param, shape=tuple(shapes[param.name]))
            value = self.tensor_map(param, ptr) if param.tma is not None else struct.pack("<Q", ptr)
            ctypes.memmove(ctypes.addressof(blob) + param.offset, value, len(value))
        pointer = (ctypes.c_void_p * 1)(ctypes.addressof(blob))
        return Arguments(blob, pointer, ctypes.addressof(pointer))

    def launch_prepared(self, arguments: "Arguments", stream: int = 0) -> None:
        """Launch on a parameter block from ``arguments``. The workspaces whose contract says `zero` share one
        allocation, cleared by one memset before each launch: each memset is a GPU operation of its own (about a
        microsecond between it and the kernel, 0.9 % of the Qwen GEMM at M = 128), which a decode step of ten
        would feel. Those whose kernel leaves them as it found them (`zero_once`: a split's tile counts) are
        cleared before this runtime's first launch only."""
        if not self._launched:
            for param in self.abi.workspaces:
                if param.workspace.get("zero_once"):
                    _check(self.driver.cuMemsetD8Async(self._workspaces[param.name], 0, int(param.shape[0]),
                                                       stream), f"clearing workspace {param.name}")
            self._launched = True
        if self._zeroed[1]:
            _check(self.driver.cuMemsetD8Async(self._zeroed[0], 0, self._zeroed[1], stream), "clearing the workspaces")
        status = _launch_kernel(self.function, self._dims, stream, arguments.address)
        if status:
            _check(self.driver.CUresult(status), f"cuLaunchKernel({self.manifest['entry']})")

    @property
    def workspace_addresses(self) -> dict[str, int]:
        """Where this runtime's workspaces lie (device addresses by parameter; empty before the first launch)."""
        return dict(self._workspaces)

    def share_workspaces(self, other: "Runtime") -> None:
        """Launch on ``other``'s workspaces instead of allocations of this runtime's own. For timing
        two loads of one link, or a link and its monolithic control: each would otherwise have its
        grid-barrier counter and partial sums at an address of its own, and where that memory lies
        may cost more than linking does (bench/NOTES.md, the fifth session). Both must declare the
        same workspaces (``check_same_workspaces``), and their launches must not overlap: each clears
        the zeroed ones before it runs, on its own stream."""
        check_same_workspaces(self.manifest, other.manifest)
        if other._zeroed is None:
            other._allocate_workspaces()
        self._workspaces, self._zeroed = dict(other._workspaces), other._zeroed

    def _allocate_workspaces(self) -> None:
        """One device allocation per kept workspace, and one for all the zeroed ones (256-byte aligned)."""
        zeroed, at = {}, 0
        for param in self.abi.workspaces:
            nbytes = int(param.shape[0])
            if param.workspace.get("zero"):
                zeroed[param.name] = at
                at += -(-nbytes // 256) * 256
            else:
                self._workspaces[param.name] = int(_check(self.driver.cuMemAlloc(nbytes),
                                                          f"allocating workspace {param.name}"))
                self._allocations.append(self._workspaces[param.name])
        base = int(_check(self.driver.cuMemAlloc(at), "allocating the zeroed workspaces")) if at else 0
        self._allocations += [base] if at else []
        self._workspaces.update({name: base + offset for name, offset in zeroed.items()})
        self._zeroed = (base, at)

    def tensor_map(self, param: Param, pointer: int) -> bytes:
        """The operand's TMA tensor map (128 bytes), encoded once per device address and shape."""
        key = (param.name, pointer, tuple(param.shape))
        if key not in self._tensor_maps:
            if len(self._tensor_maps) >= 4096:  # an operator called on ever new activations and sizes
                self._tensor_maps.clear()
            self._tensor_maps[key] = encode_tensor_map(param, pointer)
        return self._tensor_maps[key]

    def host_mapped(self, nbytes: int) -> "HostMapped":
        """Pinned host memory the kernel can write (it stays readable after the kernel traps)."""
        d = self.driver
        host = _check(d.cuMemHostAlloc(nbytes, d.CU_MEMHOSTALLOC_DEVICEMAP), "cuMemHostAlloc")
        device = _check(d.cuMemHostGetDevicePointer(host, 0), "cuMemHostGetDevicePointer")
        return HostMapped(int(host), int(device), nbytes)

    def synchronize(self) -> None:
        _check(self.driver.cuCtxSynchronize(), "kernel execution (cuCtxSynchronize)")

    def close(self) -> None:
        """Unload the cubin and free the workspaces this runtime allocated, after its launches finished: a process
        that loads kernel after kernel (the verify child serving job after job) would otherwise keep them all. A
        runtime on another's workspaces (``share_workspaces``) leaves them to their owner. Unusable afterwards."""
        if self.module is None:
            return
        self.synchronize()
        for address in self._allocations:
            _check(self.driver.cuMemFree(address), "freeing a workspace")
        _check(self.driver.cuModuleUnload(self.module), "cuModuleUnload")
        self._allocations, self._workspaces, self._zeroed, self.module = [], {}, None, None



TORCH_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp8e4m3": "float8_e4m3fn",
                "fp8e5m2": "float8_e5m2", "int32": "int32", "int8": "int8", "uint8": "uint8",
                "uint64": "int64", "uint32": "int32", "int64": "int64"}  # torch has few unsigned kernels; same bytes
_TYPESTR = {"fp32": "<f4", "fp16": "<f2", "int32": "<i4", "int8": "|i1", "uint8": "|u1", "uint64": "<u8", "int64": "<i8"}


def torch_dtype(dtype: str):
    import torch
    return getattr(torch, TORCH_DTYPES[dtype])


def check_alignment(params: list[Param], pointers: list[int]) -> None:
    """Refuse a pointer its operand cannot take: misaligned for the contract's `align` (the
    component's vector accesses), or for TMA (16 bytes)."""
    for param, ptr in zip(params, pointers):
        align = param.align or (16 if param.tma is not None else 0)
        if align and ptr % align:
            raise DeviceError(f"operand '{param.name}' is at address {ptr:#x}, which is not {align}-byte aligned "
                              f"(off by {ptr % align} bytes); the component accesses it {align} bytes at a time",
                              hint="pass a tensor that starts at an aligned address (a fresh allocation, not an "
                                   "offset view)")


def device_pointer(array, param: Param) -> int:
    """The device address of ``array``, after checking it against the manifest's ``param``."""
    name, shape = param.name, list(param.shape)
    if isinstance(array, int):
        return array
    if hasattr(array, "data_ptr") and hasattr(array, "is_cuda"):  # torch
        problems = []
        if not array.is_cuda:
            problems.append("is not on the GPU")
        if list(array.shape) != shape:
            problems.append(f"has shape {list(array.shape)}, expected {shape}")
        if array.dtype != torch_dtype(param.dtype):
            problems.append(f"has dtype {array.dtype}, expected {torch_dtype(param.dtype)}")
        if not array.is_contiguous():
            problems.append("is not contiguous")
        if problems:
            raise DeviceError(f"operand '{name}' " + " and ".join(problems),
                              hint="pass a contiguous CUDA tensor of the manifest's shape and dtype")
        return array.data_ptr()
    cai = getattr(array, "__cuda_array_interface__", None)
    if cai is not None:
        if list(cai["shape"]) != shape:
            raise DeviceError(f"operand '{name}' has shape {list(cai['shape'])}, expected {shape}")
        if cai.get("strides") not in (None,):
            raise DeviceError(f"operand '{name}' is not contiguous (strides {cai['strides']})")
        want = _TYPESTR.get(param.dtype)
        if want and cai["typestr"] != want:
            raise DeviceError(f"operand '{name}' has typestr {cai['typestr']}, expected {want}")
        return int(cai["data"][0])
    if hasattr(array, "__dlpack__"):
        import torch
        return device_pointer(torch.from_dlpack(array), param)
    raise DeviceError(f"operand '{name}': cannot take a device pointer from {type(array).__name__}",
                      hint="pass a torch tensor, an object with __cuda_array_interface__ or __dlpack__, or an int")


_TMA_DTYPES = {"fp32": "FLOAT32", "fp16": "FLOAT16", "bf16": "BFLOAT16", "int32": "INT32", "uint8": "UINT8",
               "int8": "UINT8", "fp8e4m3": "UINT8", "fp8e5m2": "UINT8"}


def encode_tensor_map(param: Param, pointer: int) -> bytes:
    """cuTensorMapEncodeTiled for a row-major operand: dimensions innermost first, byte strides of the
    outer dimensions, the contract's box and swizzle, no interleave, 256-byte L2 promotion, zero fill
    out of bounds. The bytes go into the kernel's parameter struct."""
    from cuda.bindings import driver as d
    shape, box, esize = list(param.shape), param.tma["box"], param.element_bytes
    rank = len(shape)
    strides, acc = [], esize
    for extent in reversed(shape[1:]):
        acc *= extent
        strides.append(acc)
    # Box, swizzle span and row pitch were checked at link time (check._check_tma_operands); only
    # the caller's address is new here.
    if pointer % 16:
        raise DeviceError(f"operand '{param.name}' cannot be described by a TMA tensor map: its address "
                          f"{pointer:#x} is not 16-byte aligned",
                          hint="pass a contiguous tensor from the CUDA allocator (not an offset view)")
    span = param.tma["swizzle"]
    swizzle = getattr(d.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_" + (f"{span}B" if span else "NONE"))
    result = d.cuTensorMapEncodeTiled(
        getattr(d.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_" + _TMA_DTYPES[param.dtype]), rank, pointer,
        [d.cuuint64_t(x) for x in reversed(shape)], [d.cuuint64_t(x) for x in strides],
        [d.cuuint32_t(x) for x in reversed(box)], [d.cuuint32_t(1)] * rank,
        d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
        d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    tensor_map = _check(result, f"cuTensorMapEncodeTiled for operand '{param.name}' (shape {shape}, box {box})")
    return struct.pack("<16Q", *[int(x) for x in tensor_map.opaque])


def _torch_stream(arrays) -> int:
    for a in arrays:
        if hasattr(a, "is_cuda"):
            import torch
            return torch.cuda.current_stream(a.device).cuda_stream
    return 0
