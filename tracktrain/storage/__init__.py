"""Where runs and checkpoints live: one place for every fsspec URL (a local path, `file://`, `memory://`, `s3://`,
`gs://`, ...).

- `url`: locations as text (join, split, local or remote) — the one place that reads how a location is written;
- `filesystems`: the fsspec file system of a URL, with bounded request times on object stores;
- `files`: reading, listing and crash-consistent writing (this package re-exports them: `storage.join(...)`);
- `check`: the write probe before a run, and storage errors that say the cause and the fix.

Checkpoints are written through it; what makes one complete (its manifest, the lease, finding the newest) is
`tracktrain.checkpoint`. Loggers, the profiler and the plots write their files through it too.

Error messages leave credentials out: URL passwords and the values of secret-named variables and options are
replaced by `***` (`tracktrain.storage.redaction`).
"""

from tracktrain.storage.files import (
    AtomicCommit,
    atomic_commit_strategy,
    create_exclusive,
    exists,
    file_sizes,
    isdir,
    listdir,
    makedirs,
    read_bytes,
    remove,
    remove_tree,
    subdirectories,
    write_bytes,
    write_bytes_atomic,
    write_file_atomic,
)
from tracktrain.storage.filesystems import (
    ATTEMPTS_VARIABLE,
    CONNECT_TIMEOUT_VARIABLE,
    OBJECT_STORE_PROTOCOLS,
    READ_TIMEOUT_VARIABLE,
    is_local,
    local_dir,
    local_path,
    open_filesystem,
    protocols_of,
    storage_timeouts,
)
from tracktrain.storage.url import PathOrURL, basename, is_remote, is_url, join, split

__all__ = [
    "ATTEMPTS_VARIABLE",
    "AtomicCommit",
    "CONNECT_TIMEOUT_VARIABLE",
    "OBJECT_STORE_PROTOCOLS",
    "PathOrURL",
    "READ_TIMEOUT_VARIABLE",
    "atomic_commit_strategy",
    "basename",
    "create_exclusive",
    "exists",
    "file_sizes",
    "is_local",
    "is_remote",
    "is_url",
    "isdir",
    "join",
    "listdir",
    "local_dir",
    "local_path",
    "makedirs",
    "open_filesystem",
    "protocols_of",
    "read_bytes",
    "remove",
    "remove_tree",
    "split",
    "storage_timeouts",
    "subdirectories",
    "write_bytes",
    "write_bytes_atomic",
    "write_file_atomic",
]
