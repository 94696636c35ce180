// memwire's one GPU kernel: many copies between device addresses in one launch (the block runs
// of a pool request). Compiled to PTX at build time when nvcc is found (sdk/CMakeLists.txt),
// embedded in the library as text and loaded through the driver API (cuModuleLoadData); no
// CUDA runtime is linked. The layout of CopyRunEntry is kernel_copies.cpp's too.
struct CopyRunEntry {
  unsigned long long from;
  unsigned long long to;
  unsigned long long length;
  unsigned long long first_tile;  // tiles of all runs before this one
};

// Each thread block copies tiles of `tile_bytes` (the last of a run may be shorter), found by a
// binary search over first_tile; 16-byte words when both ends and the length allow, else bytes.
extern "C" __global__ void __launch_bounds__(256)
    memwire_copy_runs(const CopyRunEntry* runs, unsigned count, unsigned long long tiles,
                      unsigned long long tile_bytes) {
  for (unsigned long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    unsigned low = 0, high = count - 1;
    while (low < high) {
      const unsigned middle = (low + high + 1) / 2;
      if (runs[middle].first_tile <= tile)
        low = middle;
      else
        high = middle - 1;
    }
    const CopyRunEntry run = runs[low];
    const unsigned long long offset = (tile - run.first_tile) * tile_bytes;
    const unsigned long long left = run.length - offset;
    const unsigned long long length = left < tile_bytes ? left : tile_bytes;
    const char* from = reinterpret_cast<const char*>(run.from) + offset;
    char* to = reinterpret_cast<char*>(run.to) + offset;
    if (((reinterpret_cast<unsigned long long>(from) | reinterpret_cast<unsigned long long>(to) |
          length) & 15) == 0) {
      const uint4* words_from = reinterpret_cast<const uint4*>(from);
      uint4* words_to = reinterpret_cast<uint4*>(to);
      const unsigned long long words = length / 16;
      constexpr unsigned kInFlight = 4;
      for (unsigned long long base = threadIdx.x; base < words; base += kInFlight * blockDim.x) {
        uint4 held[kInFlight];
#pragma unroll
        for (unsigned k = 0; k < kInFlight; ++k) {
          const unsigned long long at = base + k * blockDim.x;
          if (at < words) held[k] = words_from[at];
        }
#pragma unroll
        for (unsigned k = 0; k < kInFlight; ++k) {
          const unsigned long long at = base + k * blockDim.x;
          if (at < words) words_to[at] = held[k];
        }
      }
    } else {
      for (unsigned long long at = threadIdx.x; at < length; at += blockDim.x) to[at] = from[at];
    }
  }
}
