"""Typed stubs of ling_bloom._core, the C extension (csrc/py).  Keep in step with the C code:
tests/test_typing.py checks that every public name of the built module is declared here."""

from types import TracebackType
from typing import (Any, BinaryIO, ClassVar, Dict, Iterable, Iterator, List, NoReturn, Optional,
                    Protocol, Sequence, SupportsIndex, Tuple, Type, TypedDict, TypeVar, Union,
                    overload)
import os

from typing_extensions import Buffer, Self

from .redisbloom import RedisBloomInfo

Key = Union[str, Buffer, int, SupportsIndex]
"""A key: a str (hashed as UTF-8), bytes, any C-contiguous buffer, or an int (hashed as its
decimal text: 42 and "42" are one key) or int-like (__index__: numpy's integer scalars, the
key of their int).  Never empty.  bool (an int to the type checker), float and the other
numbers (numpy's floating and bool scalars, Decimal, Fraction) are a TypeError at run time."""

class _ArrowArrayExporter(Protocol):
    def __arrow_c_array__(self, requested_schema: Any = ..., /) -> Tuple[Any, Any]: ...

class _ArrowStreamExporter(Protocol):
    def __arrow_c_stream__(self, requested_schema: Any = ..., /) -> Any: ...

Column = Union[Buffer, _ArrowArrayExporter, _ArrowStreamExporter]
"""A column of keys, read in place by the batch methods: a numpy array (any buffer) of
integers of one dimension, any dtype, byte order and stride (each the key of the same int);
or anything that exports Arrow (``__arrow_c_array__``, ``__arrow_c_stream__``: pyarrow
arrays and chunked arrays, pandas and polars Series, DuckDB results) of strings, binary
(string, large_string, string_view, binary, large_binary, binary_view) or integers, or
dictionary-encoded arrays of them (a pandas category, a polars Categorical).  A
buffer of other items (numpy's bytes or text) is iterated as before; floats and bools are a
TypeError."""

_Path = Union[str, "os.PathLike[str]", BinaryIO]
"""A path, or a binary file object (io.BytesIO, open(..., "rb"/"wb"))."""
_T = TypeVar("_T")

FORMAT_VERSION: int
"""Version of the saved-filter format that to_bytes() writes."""
MAX_BITS: int
"""The largest m (bits or counters) of any filter: 2**48."""
MAX_K: int
"""The largest number of hash functions: 64."""

# ---- errors --------------------------------------------------------------------------------

class BloomError(Exception):
    """Base of every ling_bloom error."""

class ClosedError(BloomError):
    """The filter was closed."""

class InvalidCapacityError(BloomError, ValueError):
    """The size is out of range: capacity or m zero, negative or too large (m at most
    MAX_BITS), or k not in 1..MAX_K."""

class InvalidFalsePositiveRateError(BloomError, ValueError):
    """The false-positive rate is not in (0, 1)."""

class EmptyKeyError(BloomError, ValueError):
    """The key is empty."""

class NotSupportedError(BloomError):
    """The operation is not supported by this filter."""

class GeometryMismatchError(BloomError, ValueError):
    """Two filters (or a filter and what Redis holds) differ in m, k or hash."""

class CorruptFileError(BloomError, ValueError):
    """The data is not a saved filter: garbage, truncated, damaged, of a newer format, or of
    another type than the one asked for."""

class RedisError(BloomError):
    """Base of the errors of the Redis filters."""

class RedisConnectionError(RedisError, ConnectionError):
    """Could not connect to Redis, or the connection was lost."""

class RedisTimeoutError(RedisError, TimeoutError):
    """Redis did not answer within the timeout."""

class RedisResponseError(RedisError):
    """Redis answered with an error."""

    reply: Optional[str]

class WrongTypeError(RedisResponseError):
    """A Redis key holds another type."""

    key: Any

class FilterFullError(RedisResponseError):
    """A non-scaling RedisBloom filter is full.

    processed: keys of the batch before the first one the filter rejected (all of them are
    in the filter; keys[processed:] were not added); added: how many of those were new.
    Both None when the server did not say."""

    processed: Optional[int]
    added: Optional[int]
    key: Any

class FilterNotFoundError(RedisResponseError, KeyError):
    """No RedisBloom filter at the key, and it was not to be created (no_create=True); or
    info()/dump() of a missing key; or no RedisFilter at the key and no geometry given
    (RedisFilter.open, RedisFilter(key))."""

    key: Any

class FilterLostError(FilterNotFoundError):
    """The filter is gone from the Redis server although it was made without a ttl (the
    server restarted empty, was flushed or evicted the key): its answers would be wrong, so
    none is given. A warm-up, reset() or restore() builds it again."""

class EvictionWarning(RuntimeWarning):
    """The Redis server's maxmemory-policy can evict the filter's keys (allkeys-*, or
    volatile-* for a filter with a ttl): under memory pressure the filter may be lost (a
    filter without a ttl then raises FilterLostError). Warned once per filter, when its
    first check reads the server's INFO memory."""

class KeyNotOwnedError(RedisError, ValueError):
    """The Redis key holds data this library did not write (no meta key beside it)."""

    key: Any

class ModuleMissingError(RedisResponseError, NotSupportedError):
    """The Redis server has no RedisBloom module (no BF.* commands), or its BF.* commands
    lack one the call needs (BF.SCANDUMP and BF.LOADCHUNK on valkey-bloom, say), an option
    (BF.INSERT's NOCREATE) or a BF.INFO field; the message names it and the server."""

class RedisProtocolError(RedisError):
    """Redis answered something that does not fit the command sent; the connection was
    dropped."""

# ---- functions ------------------------------------------------------------------------------

def _set_hooks(**hooks: Any) -> None:
    """The package's callables the binding uses (atomic_write, read_file, umask, html,
    connection_kwargs, bloom_info), handed over once by ling_bloom's __init__."""

def peek_header(data: Buffer) -> Dict[str, Any]:
    """The header of the saved filter that starts with data (its first 48 bytes are enough),
    read as it is: version, kind (the type's name: "MemoryFilter", "CountingFilter",
    "ScalableFilter", "BlockedFilter"), kind_code, hash, header_bytes; m, k, capacity,
    error_rate (None when not set) and live for the fixed types; initial_capacity,
    error_rate, growth_ratio, fpr_ratio and stages for ScalableFilter.  Only the prefix
    (magic, version, kind, hash) is checked; CorruptFileError when data is not a saved
    filter."""

def _saved_length(head: bytes, have: Optional[int] = None) -> Tuple[int, bool]:
    """(total, whole): the length of the saved filter that starts with head (its first 48
    bytes), worked out as far as have bytes allow (whole False: total is the least a
    chain's stages need, more than have)."""

def estimate(n: int, p: float) -> Tuple[int, int]:
    """The ling-base Go library's Estimate: (m, k) for n keys at false-positive rate p (the bare arithmetic:
    m may exceed MAX_BITS and k MAX_K)."""

def geometry(n: int, p: float, hash: Optional[str] = ...) -> Tuple[int, int]:
    """(m, k) of a filter built for n keys at rate p: estimate's, or more bits for small n.
    InvalidCapacityError past MAX_BITS, InvalidFalsePositiveRateError past MAX_K."""

def indices(key: Key, m: int, k: int, hash: Optional[str] = ...) -> List[int]:
    """The k bit indices of key in a filter of m bits."""

class _BuildInfo(TypedDict):
    """What ``build_info()`` returns (every key is always there)."""

    hiredis: str
    """hiredis's version, from the headers compiled against ("0.14.1"; hiredis has no
    run-time version call)."""
    hiredis_source: str
    """"system" (the system's library, linked) or "vendored" (the pinned sources, compiled
    in: the wheels and the sdist)."""
    xxhash: str
    """xxHash's version at run time (XXH_versionNumber: the library loaded)."""
    xxhash_headers: str
    """xxHash's version in the headers compiled against."""
    xxhash_source: str
    """"system" or "vendored", as hiredis_source."""
    openssl: Optional[str]
    """The OpenSSL library loaded at run time (OpenSSL_version(OPENSSL_VERSION)); None
    without TLS."""
    openssl_headers: Optional[str]
    """OPENSSL_VERSION_TEXT of the headers compiled against; None without TLS."""
    openssl_source: str
    """"static" (linked into the extension, its symbols private: the wheels), "system" (the
    system's libssl, loaded at run time) or "none" (built without TLS)."""
    tls: bool
    """rediss:// is available."""
    avx2: bool
    """BlockedFilter's AVX2 code is compiled in (x86-64); the CPU decides whether it runs."""
    simd: str
    """The BlockedFilter implementation this process runs: "avx2" or "portable"."""
    compiler: str
    """The C compiler that built the extension ("GCC 12.2.0", "clang 16.0.6 ...")."""
    python: str
    """The CPython version whose headers the extension was built with."""
    free_threaded: bool
    """Built for a free-threaded CPython (Py_GIL_DISABLED)."""

def build_info() -> _BuildInfo:
    """What this build of the extension was made with: the versions of the C libraries it
    uses (hiredis, xxHash, OpenSSL: compiled in or the system's, and OpenSSL as loaded at
    run time), TLS, the AVX2 code, the compiler, and the Python it was built for.  A plain
    dict, for a user or a scanner to read: ``python -c "import ling_bloom;
    print(ling_bloom.build_info())"``."""

def hash_pair(key: Key, hash: Optional[str] = ...) -> Tuple[int, int]:
    """The two 64-bit hashes double hashing starts from; hash="xxh3-block" gives
    BlockedFilter's pair (XXH3-64 of the key, and a word derived from it)."""

def key_bytes(key: Key) -> bytes:
    """The bytes every filter hashes for key: a str's UTF-8, an int's (or int-like's)
    decimal text, a buffer's bytes.  A key no filter takes raises what add(key) raises
    (TypeError, EmptyKeyError, ValueError)."""

def key_bytes_many(keys: Any, *, skip_nulls: bool = ...) -> List[bytes]:
    """key_bytes of each key of keys, in order: an iterable, or a column read in place as
    update() reads it (a numpy array of integers, an Arrow array, anything with
    __arrow_c_array__ or __arrow_c_stream__).  A bad key raises as update(keys) does;
    skip_nulls=True leaves a column's nulls out."""

def _key(key: Key) -> Union[str, bytes]:
    """key as the filters read it: a str as an exact str, an int or int-like as its decimal
    text (a str), a buffer as bytes; bad keys raise as in key_bytes."""

class BoolArray:
    """The answers of a batch on a column (add_many, test_many) where numpy is not installed:
    one byte per key, exported by the buffer protocol as format '?', so
    ``numpy.asarray(answers)`` is a boolean array over the same memory (no copy)."""
    def __len__(self) -> int: ...
    def __getitem__(self, i: int, /) -> bool: ...
    def __iter__(self) -> Iterator[bool]: ...
    def __invert__(self) -> "BoolArray":
        """The negation, a new BoolArray."""
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def count(self) -> int:
        """How many answers are True."""
    def tolist(self) -> List[bool]: ...

# ---- what every filter has ------------------------------------------------------------------

class _Filter:
    @property
    def closed(self) -> bool:
        """Whether close() was called."""
    def add(self, key: Key, /) -> bool:
        """Add key; True when it was not present."""
    def test(self, key: Key, /) -> bool:
        """False: never added.  True: probably added."""
    def __contains__(self, key: object, /) -> bool: ...
    def __len__(self) -> int:
        """Distinct keys added, estimated: approximate_count() (RedisBloomFilter: card(),
        BF.CARD); a round trip for the Redis types.  ClosedError once closed."""
    def __bool__(self) -> bool:
        """Always True (even empty or closed): ``if f:`` asks nothing of the filter."""
    @overload
    def add_many(self, keys: Union[List[Key], Tuple[Key, ...]], /, *,
                 skip_nulls: bool = ...) -> List[bool]:
        """add() for each key; a bad key raises before anything changes.  A list of answers
        (True: the key was new); for a column (see Column) a boolean array: numpy's array
        over a BoolArray (no copy) where numpy is installed, else the BoolArray.  A column's
        null raises ValueError naming its position; skip_nulls=True skips nulls (answer
        False)."""
    @overload
    def add_many(self, keys: Column, /, *, skip_nulls: bool = ...) -> Any: ...
    @overload
    def add_many(self, keys: Iterable[Key], /, *, skip_nulls: bool = ...) -> List[bool]: ...
    def update(self, keys: Union[Iterable[Key], Column], /, *, skip_nulls: bool = ...) -> None:
        """Add every key (no per-key result); a bad key raises before anything changes.
        keys may be a column (see Column), read in place; a column's null raises ValueError
        naming its position, skip_nulls=True skips nulls."""
    @overload
    def test_many(self, keys: Union[List[Key], Tuple[Key, ...]], /, *,
                  skip_nulls: bool = ...) -> List[bool]:
        """test() for each key: a list of answers; for a column (see Column) a boolean array,
        numpy's array over a BoolArray (no copy) where numpy is installed, else the BoolArray,
        usable as a mask: ``df[~f.test_many(df["id"])]``.  A column's null raises
        ValueError naming its position; skip_nulls=True skips nulls (answer False)."""
    @overload
    def test_many(self, keys: Column, /, *, skip_nulls: bool = ...) -> Any: ...
    @overload
    def test_many(self, keys: Iterable[Key], /, *, skip_nulls: bool = ...) -> List[bool]: ...
    def reset(self) -> None:
        """Remove every key."""
    def close(self) -> None:
        """Release the filter; later calls raise ClosedError.  Idempotent."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
        /,
    ) -> bool: ...

class _Saved(_Filter):
    def to_bytes(self) -> bytes:
        """The filter in the saved format (versioned header, checksum)."""
    @classmethod
    def from_bytes(cls, data: Buffer, /) -> Self:
        """Rebuild a filter from to_bytes(); CorruptFileError for damaged input."""
    def save(self, path: _Path, /) -> None:
        """Write to_bytes() to path atomically, with the mode open() gives a new file
        (0o666 minus the umask); an OSError names path.  A file object gets the bytes
        written at its position (not flushed, not closed)."""
    @classmethod
    def load(cls, path: _Path, /) -> Self:
        """Read a filter written by save(); CorruptFileError for damaged input.  From a file
        object: read from its position, exactly the filter's bytes."""
    def copy(self) -> Self: ...
    def __copy__(self) -> Self: ...
    def __eq__(self, other: object, /) -> bool:
        """Same type, geometry and contents.  A filter equals itself even closed; a closed
        filter compared with another raises ClosedError."""
    def __ne__(self, other: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]
    def __reduce__(self) -> Tuple[Any, Tuple[bytes]]: ...
    def _repr_html_(self) -> str: ...
    def approximate_count(self) -> int:
        """Distinct keys added, estimated."""
    def current_error_rate(self) -> float:
        """The false-positive rate now."""

class _Fixed(_Saved):
    @property
    def m(self) -> int:
        """Bits (or counters)."""
    @property
    def k(self) -> int:
        """Hash functions."""
    @property
    def hash(self) -> str:
        """Hashing scheme: "xxh3-mix" (the default), "xxh3" (the unmixed walk, for filters written before the mixing) or "ling-base"."""
    @property
    def capacity(self) -> Optional[int]:
        """The capacity it was sized for, or None (built from m and k)."""
    @property
    def error_rate(self) -> Optional[float]:
        """The rate it was sized for, or None."""
    @property
    def nbytes(self) -> int: ...
    def fill_ratio(self) -> float:
        """Cells in use / m."""

# ---- the in-memory filters ------------------------------------------------------------------

class MemoryFilter(_Fixed):
    """A Bloom filter in one bit array of m bits with k hash functions."""

    def __new__(
        cls,
        capacity: float = ...,
        error_rate: float = ...,
        *,
        m: int = ...,
        k: int = ...,
        hash: Optional[str] = ...,
    ) -> Self: ...
    @property
    def bits_set(self) -> int:
        """Number of bits set."""
    def union(self, other: MemoryFilter, /) -> Self:
        """A new filter with the keys of both (same m, k and hash)."""
    def intersection(self, other: MemoryFilter, /) -> Self:
        """A new filter with the bits both have set."""
    def __or__(self, other: MemoryFilter, /) -> Self: ...
    def __and__(self, other: MemoryFilter, /) -> Self: ...
    def __ior__(self, other: MemoryFilter, /) -> Self: ...
    def __iand__(self, other: MemoryFilter, /) -> Self: ...
    def to_bitmap(self) -> bytes:
        """The raw bits: bit i is byte i//8, mask 0x80 >> i%8 (Redis's SETBIT order)."""
    @classmethod
    def from_bitmap(cls, data: Buffer, m: int, k: int, hash: Optional[str] = ...) -> Self:
        """A filter over raw bits; a shorter bitmap is padded with zeros, as Redis does."""
    @classmethod
    def open(
        cls,
        path: Union[str, "os.PathLike[str]"],
        mode: str = ...,
        capacity: Optional[float] = ...,
        error_rate: Optional[float] = ...,
        *,
        m: Optional[int] = ...,
        k: Optional[int] = ...,
        hash: Optional[str] = ...,
    ) -> Self:
        """A filter whose bits are a file mapped by every process that opens it.

        mode: "r" (read-only: changes raise NotSupportedError), "r+" (read and add), "w"
        (create: a new file renamed over path), "x" (create; FileExistsError if path
        exists).  "w" and "x" need capacity (and error_rate) or m and k; with "r"/"r+",
        a geometry given must be the file's (GeometryMismatchError).  Adds from several
        processes are atomic.  The file loads with load() and uploads with
        RedisFilter.load()."""
    def flush(self) -> None:
        """Write a mapped filter's changed pages to its file now (msync)."""
    @property
    def path(self) -> Optional[str]:
        """The mapped file (open()), or None for a filter in memory."""
    @property
    def mode(self) -> Optional[str]:
        """The mode open() was given, or None for a filter in memory."""
    def __sizeof__(self) -> int: ...

class BlockedFilter(_Fixed):
    """A split-block Bloom filter: each key sets k bits in one 64-byte block (one cache
    line), k/8 in each of the block's eight 64-bit lanes.  Sized with its own rate (higher
    than a standard filter's at equal memory): error_rate holds at capacity.  Keys are
    hashed with XXH3-64 (the same on every machine and process)."""

    def __new__(
        cls,
        capacity: float = ...,
        error_rate: float = ...,
        *,
        m: int = ...,
        k: int = ...,
    ) -> Self:
        """capacity and error_rate, or m (a positive multiple of 512, at most MAX_BITS) and
        k (a multiple of 8 in 8..64); InvalidCapacityError otherwise."""
    @property
    def hash(self) -> str:
        """"xxh3-block": XXH3-64 of the key and the split-block walk (csrc/core/blocked.h)."""
    @property
    def bits_set(self) -> int:
        """Number of bits set."""
    def union(self, other: BlockedFilter, /) -> Self:
        """A new filter with the keys of both (same m and k)."""
    def intersection(self, other: BlockedFilter, /) -> Self:
        """A new filter with the bits both have set."""
    def __or__(self, other: BlockedFilter, /) -> Self: ...
    def __and__(self, other: BlockedFilter, /) -> Self: ...
    def __ior__(self, other: BlockedFilter, /) -> Self: ...
    def __iand__(self, other: BlockedFilter, /) -> Self: ...
    def current_error_rate(self) -> float:
        """The rate now, from each block's lanes: the mean over blocks of the product over
        lanes of (bits set / 64) ** (k / 8)."""
    @classmethod
    def geometry(cls, n: int, p: float, /) -> Tuple[int, int]:
        """(m, k) of BlockedFilter(n, p): the fewest blocks whose ideal rate after n keys is
        at most p, over k = 8..64 (least memory, then the smallest k)."""
    @classmethod
    def ideal_false_positive_rate(cls, m: int, k: int, n: int, /) -> float:
        """The expected rate after n distinct keys with ideal hashing (each block's load
        Binomial(n, 512/m); the eight lanes independent)."""
    @classmethod
    def _simd(cls, name: Optional[str] = ..., /) -> str:
        """The implementation in use ("avx2" or "portable"); name switches it process-wide."""
    def __sizeof__(self) -> int: ...

class CountingFilter(_Fixed):
    """A Bloom filter of m 4-bit saturating counters that can remove keys."""

    def __new__(
        cls,
        capacity: float = ...,
        error_rate: float = ...,
        *,
        m: int = ...,
        k: int = ...,
        hash: Optional[str] = ...,
    ) -> Self: ...
    def remove(self, key: Key, /) -> None:
        """Remove one occurrence; KeyError when the key tests absent (nothing changes)."""
    def discard(self, key: Key, /) -> bool:
        """remove() without the KeyError; True when something was removed."""
    def count(self, key: Key, /) -> int:
        """The smallest of key's counters (0..15)."""
    def union(self, other: CountingFilter, /) -> Self:
        """The saturating sum of the counters (same m, k and hash): the filter that had
        every add of both, so remove() stays sound."""
    def intersection(self, other: CountingFilter, /) -> Self:
        """The smaller of each pair of counters: keys of both test present."""
    def __or__(self, other: CountingFilter, /) -> Self: ...
    def __and__(self, other: CountingFilter, /) -> Self: ...
    def __ior__(self, other: CountingFilter, /) -> Self: ...
    def __iand__(self, other: CountingFilter, /) -> Self: ...

class ScalableFilter(_Saved):
    """A scalable Bloom filter: a chain of bit arrays that grows.  error_rate bounds the
    whole chain."""

    def __new__(
        cls,
        initial_capacity: float,
        error_rate: float = ...,
        growth_ratio: float = ...,
        fpr_ratio: float = ...,
        *,
        hash: Optional[str] = ...,
    ) -> Self: ...
    @property
    def initial_capacity(self) -> int: ...
    @property
    def error_rate(self) -> float:
        """The bound the whole chain keeps."""
    @property
    def growth_ratio(self) -> float: ...
    @property
    def fpr_ratio(self) -> float: ...
    @property
    def hash(self) -> str: ...
    @property
    def num_sub_filters(self) -> int:
        """Number of stages."""
    @property
    def capacity(self) -> int:
        """Keys the present stages take."""
    @property
    def nbytes(self) -> int: ...
    def stages(self) -> List[Dict[str, Any]]:
        """capacity, count, m, k, error_rate, bits_set of each stage."""
    def union(self, other: ScalableFilter, /) -> NoReturn:
        """NotSupportedError: a chain of stages has no sound union."""
    def intersection(self, other: ScalableFilter, /) -> NoReturn:
        """NotSupportedError: a chain of stages has no sound intersection."""
    def __or__(self, other: ScalableFilter, /) -> NoReturn: ...
    def __and__(self, other: ScalableFilter, /) -> NoReturn: ...

# ---- the Redis filters ----------------------------------------------------------------------

class RedisFilter(_Filter):
    """A Bloom filter in a Redis bitmap, hashed on the client.

    layout="blocked": BlockedFilter's split-block layout (sized as BlockedFilter sizes; the
    string holds a BlockedFilter's bytes): a test reads one 64-byte block (GETRANGE), an add
    sets k bits in it (one BITFIELD); with shards, every shard is such a string, sized for
    its share of capacity.  Not with adopt, mode="setbit" or a hash other than "xxh3-block";
    a standard and a blocked filter at one key refuse each other (GeometryMismatchError)."""

    # the sans-IO side that ling_bloom.aio carries (not public API)
    def _wire_config(self) -> Dict[str, Any]: ...
    def _wire_opened(self) -> None: ...
    def _wire_closed(self) -> None: ...
    def _wire_check(self, keys: Sequence[Any]) -> Sequence[Any]: ...
    def _wire_begin(self, kind: int, keys: Optional[Sequence[Any]]) -> None: ...
    def _wire_next(self) -> Optional[bytes]: ...
    def _wire_feed(self, data: bytes) -> bool: ...
    def _wire_done(self) -> None: ...
    def _wire_result(self) -> List[bool]: ...
    def _wire_drops(self) -> int: ...
    def _wire_live(self, shard: int, node: int) -> bool: ...
    @property
    def _wire_connected(self) -> bool: ...

    def __new__(
        cls,
        key: Union[str, bytes],
        capacity: Optional[float] = ...,
        error_rate: Optional[float] = ...,
        *,
        m: Optional[int] = ...,
        k: Optional[int] = ...,
        hash: Optional[str] = ...,
        ttl: Optional[float] = ...,
        mode: Optional[str] = ...,
        chunk_size: Optional[int] = ...,
        adopt: bool = ...,
        max_bytes: Optional[int] = ...,
        shards: Optional[int] = ...,
        layout: Optional[str] = ...,
        url: Optional[str] = ...,
        host: Optional[str] = ...,
        port: Optional[int] = ...,
        db: Optional[int] = ...,
        username: Optional[str] = ...,
        password: Optional[str] = ...,
        unix_socket_path: Optional[str] = ...,
        socket_timeout: Optional[float] = ...,
        socket_connect_timeout: Optional[float] = ...,
        ssl: bool = ...,
        ssl_ca_certs: Optional[str] = ...,
        ssl_ca_path: Optional[str] = ...,
        ssl_certfile: Optional[str] = ...,
        ssl_keyfile: Optional[str] = ...,
        ssl_cert_reqs: Union[str, int, None] = ...,
        ssl_check_hostname: bool = ...,
        wait_replicas: Optional[int] = ...,
        wait_timeout: Optional[float] = ...,
    ) -> Self: ...
    @classmethod
    def from_url(
        cls, url: str, key: Union[str, bytes], capacity: Optional[float] = ...,
        error_rate: Optional[float] = ..., **options: Any
    ) -> Self: ...
    @classmethod
    def open(cls, url: str, key: Union[str, bytes], **options: Any) -> Self:
        """An existing filter, with the geometry (and layout) stored next to it; layout= given
        and not the stored one: GeometryMismatchError."""
    @classmethod
    def from_redis(
        cls, client: Any, key: Union[str, bytes], capacity: Optional[float] = ...,
        error_rate: Optional[float] = ..., **options: Any
    ) -> Self: ...
    @property
    def key(self) -> Union[str, bytes]: ...
    @property
    def m(self) -> int: ...
    @property
    def k(self) -> int: ...
    @property
    def hash(self) -> str:
        """The hashing scheme; "xxh3-block" (BlockedFilter's) for layout="blocked"."""
    @property
    def layout(self) -> str:
        """"standard" (k bits anywhere in m) or "blocked" (one 64-byte block per key)."""
    @property
    def capacity(self) -> Optional[int]: ...
    @property
    def error_rate(self) -> Optional[float]: ...
    @property
    def ttl(self) -> Optional[float]: ...
    @property
    def shards(self) -> int:
        """Bitmaps the filter is spread over, each under its own hash tag (1: one bitmap)."""
    @property
    def nparts(self) -> int:
        """Redis strings the bitmap spans (2**32 bits each)."""
    @property
    def nbytes(self) -> int: ...
    def remaining_ttl(self) -> Optional[float]:
        """Seconds until the key expires (PTTL, a round trip); None when it has no expiry or
        does not exist."""
    def bits_set(self) -> int:
        """BITCOUNT over every part."""
    def fill_ratio(self) -> float: ...
    def current_error_rate(self) -> float:
        """(bits set / m) ** k; NotSupportedError for layout="blocked" (its rate depends on
        each block: snapshot().current_error_rate())."""
    def approximate_count(self) -> int:
        """Distinct keys, estimated from the bits set (the standard formula, as
        BlockedFilter.approximate_count for layout="blocked")."""
    def load(self, memory_filter: Union[MemoryFilter, BlockedFilter], /) -> None:
        """OR a MemoryFilter of the same m, k and hash into the bitmap (layout="blocked": a
        BlockedFilter of the same m and k, its bytes as they are)."""
    def snapshot(self) -> Union[MemoryFilter, BlockedFilter]:
        """A local copy of the bitmap: a MemoryFilter, or a BlockedFilter for
        layout="blocked"."""
    def key_names(self) -> List[bytes]: ...

class RedisBloomFilter(_Filter):
    """A filter in the RedisBloom module (BF.* commands)."""

    def __new__(
        cls,
        key: Union[str, bytes],
        capacity: Optional[int] = ...,
        error_rate: Optional[float] = ...,
        *,
        expansion: Optional[int] = ...,
        non_scaling: bool = ...,
        no_create: bool = ...,
        ttl: Optional[float] = ...,
        chunk_size: Optional[int] = ...,
        max_bytes: Optional[int] = ...,
        shards: Optional[int] = ...,
        url: Optional[str] = ...,
        host: Optional[str] = ...,
        port: Optional[int] = ...,
        db: Optional[int] = ...,
        username: Optional[str] = ...,
        password: Optional[str] = ...,
        unix_socket_path: Optional[str] = ...,
        socket_timeout: Optional[float] = ...,
        socket_connect_timeout: Optional[float] = ...,
        ssl: bool = ...,
        ssl_ca_certs: Optional[str] = ...,
        ssl_ca_path: Optional[str] = ...,
        ssl_certfile: Optional[str] = ...,
        ssl_keyfile: Optional[str] = ...,
        ssl_cert_reqs: Union[str, int, None] = ...,
        ssl_check_hostname: bool = ...,
        wait_replicas: Optional[int] = ...,
        wait_timeout: Optional[float] = ...,
    ) -> Self: ...
    @classmethod
    def from_url(
        cls, url: str, key: Union[str, bytes], capacity: Optional[int] = ...,
        error_rate: Optional[float] = ..., **options: Any
    ) -> Self: ...
    @classmethod
    def from_redis(
        cls, client: Any, key: Union[str, bytes], capacity: Optional[int] = ...,
        error_rate: Optional[float] = ..., **options: Any
    ) -> Self: ...
    @property
    def key(self) -> Union[str, bytes]: ...
    @property
    def shards(self) -> int:
        """RedisBloom keys the filter is spread over, each under its own hash tag (1: one)."""
    @property
    def capacity(self) -> int: ...
    @property
    def error_rate(self) -> float: ...
    @property
    def expansion(self) -> Optional[int]: ...
    @property
    def non_scaling(self) -> bool: ...
    @property
    def no_create(self) -> bool: ...
    @property
    def ttl(self) -> Optional[float]: ...
    @property
    def chunk_size(self) -> int: ...
    @property
    def is_reserved(self) -> bool: ...
    def reserve(self) -> bool:
        """Create the filter now (BF.RESERVE on a missing key); True when it created it,
        False when a matching one was there; GeometryMismatchError when it does not match."""
    def info(self) -> RedisBloomInfo:
        """BF.INFO, read by field name."""
    def remaining_ttl(self) -> Optional[float]:
        """Seconds until the key expires (PTTL, a round trip); None when it has no expiry or
        does not exist."""
    def _exists(self) -> bool:
        """Whether the key exists (PTTL; one round trip, nothing written)."""
    def card(self) -> int:
        """BF.CARD: items added (0 for a missing key; FilterLostError for a filter made
        without a ttl that this client saw and that is gone)."""
    def dump(self) -> List[Tuple[int, bytes]]:
        """The filter as BF.SCANDUMP's (iterator, chunk) steps."""
    def restore(self, chunks: Iterable[Tuple[int, bytes]], *, replace: bool = ...) -> None:
        """Replace the filter by a dump, atomically."""
