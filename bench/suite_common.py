"""What bench/suite.py and its report share: the sizes and runs measured, and small helpers."""
import sys

MiB = 1 << 20
SIZES = "4K,64K,1M,16M,64M,256M,1G"
UCX_SIZES = [16 * MiB, 64 * MiB]
# Throughput runs: name -> (title, transfer_bench options).
THROUGHPUT_RUNS = {
    "tcp": ("tcp", ["--transport", "tcp"]),
    "shm": ("shm (plain memory: process_vm_readv/writev)", ["--transport", "shm"]),
    "shm-shared": ("shm (the peer's buffers in a SharedBuffer, mapped by the driver)",
                   ["--transport", "shm", "--memory", "shared"]),
}


def log(text):
    print(text, file=sys.stderr, flush=True)


def size_name(size):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return str(size)


def median(values):
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2] if ordered else None


def summary(values):
    # Same rule as the C++ programs: the sample at index q * (n - 1).
    return {"median": median(values), "min": min(values), "max": max(values)} if values else None
