"""CPU rehearsal of CUDA-only training code on the local stack: `LANDFALL_CPU_REHEARSAL=1 landfall up`.

Code written for GPUs (`init_process_group("nccl")`, `torch.cuda.set_device(local_rank)`, `model.to(local_rank)`,
`DDP(model, device_ids=[local_rank])`, `torch.load(..., map_location="cuda:0")`) stops on a machine without CUDA. With
the switch on, the launcher puts this folder first on the Python path of a team's script or package, so that every
process of it, before the team's first line runs, maps:

- every CUDA device it names (a device argument or keyword of any torch function or tensor method: "cuda", "cuda:N",
  torch.device("cuda", N), or a bare GPU index given to `.to(N)` / `.cuda(N)`) to the CPU, through one
  torch.overrides.TorchFunctionMode;
- the nccl backend to gloo in torch.distributed.init_process_group;
- DistributedDataParallel's device_ids and output_device to None (what DDP requires of a CPU module);
- torch.cuda.set_device, torch.cuda.synchronize and torch.cuda.empty_cache to no-ops; torch.cuda.current_device to 0;
- torch.load's CUDA map_location to the CPU.

torch.cuda.is_available() still says False, so code that asks picks the CPU itself. Nothing changes on a machine with
CUDA, or without the switch: it is a local rehearsal aid, never part of a job on Vertex (the CustomJob is the same).
What it cannot map (CUDA kernels a package builds, torch.cuda streams and events, custom CUDA extensions) still stops
the code; docs/trainer-contract.md says so. It runs the next `sitecustomize` on the path, if any, after itself.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

REHEARSAL_ENV = "LANDFALL_CPU_REHEARSAL"
_HERE = Path(__file__).resolve().parent


def _cpu_device(value: Any, torch: Any) -> Any:
    if isinstance(value, str) and value.split(":", 1)[0] == "cuda":
        return "cpu"
    if isinstance(value, torch.device) and value.type == "cuda":
        return torch.device("cpu")
    return value


def apply() -> bool:
    """Install the mappings in this process; False (nothing installed) on a machine with CUDA."""
    import torch
    import torch.distributed as dist
    from torch.overrides import TorchFunctionMode

    if torch.cuda.is_available():
        return False
    moves = {torch.Tensor.to: 1, torch._C._nn._parse_to: 0}
    """The functions that take a device as a positional argument (Module.to parses its arguments with _parse_to),
    and where: after the tensor for Tensor.to, first for _parse_to."""

    class CudaToCpu(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = dict(kwargs or {})
            if func is torch.Tensor.cuda:
                return args[0]
            if "device" in kwargs:
                kwargs["device"] = _cpu_device(kwargs["device"], torch)
            at = moves.get(func)
            if at is not None and len(args) > at and not isinstance(args[at], (bool, torch.Tensor, torch.dtype)):
                device = "cpu" if isinstance(args[at], int) else _cpu_device(args[at], torch)
                args = (*args[:at], device, *args[at + 1 :])
            return func(*args, **kwargs)

    CudaToCpu().__enter__()  # for the life of the process: the mode stays on the stack

    init = dist.init_process_group

    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(backend, str) and "nccl" in backend:
            backend = "gloo"
        return init(backend, *args, **kwargs)

    dist.init_process_group = init_process_group
    ddp_init = torch.nn.parallel.DistributedDataParallel.__init__

    def ddp(self: Any, module: Any, device_ids: Any = None, output_device: Any = None, *args: Any, **kw: Any) -> None:
        ddp_init(self, module, None, None, *args, **kw)

    torch.nn.parallel.DistributedDataParallel.__init__ = ddp  # type: ignore[method-assign]
    torch.cuda.set_device = lambda device: None
    torch.cuda.synchronize = lambda device=None: None
    torch.cuda.empty_cache = lambda: None
    torch.cuda.current_device = lambda: 0
    load = torch.load

    def torch_load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(map_location, (str, torch.device)):
            map_location = _cpu_device(map_location, torch)
        elif map_location is not None and not callable(map_location) and not isinstance(map_location, dict):
            map_location = "cpu"
        return load(f, map_location, *args, **kwargs)

    torch.load = torch_load
    if os.environ.get("RANK", "0") == "0":
        print(f"{REHEARSAL_ENV}=1: CUDA devices run on the CPU, nccl on gloo (CPU rehearsal)", file=sys.stderr)
    return True


def _next_sitecustomize() -> None:
    """Run the sitecustomize this one shadows, as Python would have without it."""
    path = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if __name__ == "sitecustomize":  # run by Python at start-up; imported by name (trainer.cpu_rehearsal), it does nothing
    if os.environ.get(REHEARSAL_ENV) == "1":
        apply()
    _next_sitecustomize()
