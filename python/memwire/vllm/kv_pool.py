"""vLLM's KV cache tensors as one memwire pool, registered once.

vLLM hands the worker one tensor per layer. Each is cut into vLLM's blocks along the dimension
of length num_blocks: the first ([num_blocks, ...], e.g. [blocks, 2, block_size, heads *
head_dim]) gives one region per layer, a leading K/V dimension ([2, num_blocks, ...]) two. A
layer may be a strided view of one buffer (layers interleaved per block): a region's stride is
the tensor's. Pool blocks are numbered region by region, so vLLM block b of region r is pool
block r * num_blocks + b.
"""

from ..errors import InvalidArgumentError
from ..pool import BlockRegion


class KvPool:
    def __init__(self, kv_caches, num_blocks):
        if not kv_caches:
            raise InvalidArgumentError("no KV caches to register")
        self.num_blocks = num_blocks
        self.regions = []
        self.layers = list(kv_caches)
        self.layer_regions = {}  # layer name -> its regions' indexes
        for name, tensor in kv_caches.items():
            for view in _block_views(name, tensor, num_blocks):
                self.layer_regions.setdefault(name, []).append(len(self.regions))
                self.regions.append(_region(name, view, num_blocks))
        self.block_bytes = sum(r.block_size for r in self.regions)

    def pool_blocks(self, block_ids):
        """vLLM block ids -> this pool's block indexes, every region's."""
        n = self.num_blocks
        return [r * n + b for r in range(len(self.regions)) for b in block_ids]

    def pairs(self, remote, remote_ids, local_ids, regions=None):
        """(remote, local) vLLM block pairs -> pool block pairs, every region's (or those of
        ``regions``, indexes). ``remote``: the remote pool's metadata, whose regions must match
        these (layer for layer, block size for block size) though its engine may have another
        number of blocks."""
        theirs = remote.regions
        if [r["block_size"] for r in theirs] != [r.block_size for r in self.regions]:
            raise InvalidArgumentError(
                f"the remote KV pool's regions ({len(theirs)}, blocks of "
                f"{sorted({r['block_size'] for r in theirs})} bytes) do not match this engine's "
                f"({len(self.regions)}, {sorted({r.block_size for r in self.regions})} bytes): "
                "another model, dtype or layout")
        n, m = self.num_blocks, theirs[0]["count"]
        which = range(len(self.regions)) if regions is None else regions
        return [(r * m + rb, r * n + lb) for r in which for rb, lb in zip(remote_ids, local_ids)]


def _block_views(name, tensor, num_blocks):
    if tensor.device.type != "cpu":
        raise InvalidArgumentError(f"layer {name}: KV cache on {tensor.device}; memwire.vllm takes "
                                   "host memory (GPU pools: see README 'What does not run here')")
    if tensor.dim() >= 2 and tensor.shape[0] == num_blocks:
        return [tensor]
    if tensor.dim() >= 3 and tensor.shape[0] == 2 and tensor.shape[1] == num_blocks:
        return [tensor[0], tensor[1]]
    raise InvalidArgumentError(f"layer {name}: shape {tuple(tensor.shape)} has no block dimension "
                               f"of {num_blocks} first (or after a K/V dimension of 2)")


def _region(name, view, num_blocks):
    item = view.element_size()
    block = view[0]
    if not block.is_contiguous():
        raise InvalidArgumentError(f"layer {name}: a block is not contiguous in memory")
    block_size = block.numel() * item
    stride = view.stride(0) * item
    if stride < block_size:
        raise InvalidArgumentError(f"layer {name}: blocks overlap (stride {stride} < {block_size} bytes)")
    size = (num_blocks - 1) * stride + block_size
    return BlockRegion((view.data_ptr(), size, "cpu", view), block_size, stride, num_blocks)
