# cython: language_level=3
"""What other compiled modules share with the record codec (``msgstore/wire/_native.pyx``
transcodes SendRequest bytes straight into records): the record's constants, its big-endian
field writers and readers, the offset message id, the index hash and the prepared batch."""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t, uintptr_t

# A CRC-32 function with zlib's signature (zlib-ng's zng_crc32), called straight from C.
ctypedef uint32_t (*crc32_c)(uint32_t crc, const uint8_t* buf, uint32_t length) nogil


cdef inline crc32_c crc_pointer(object crc_fn):
    """The C function when the caller passed its address (an int), else NULL (a callable)."""
    if type(crc_fn) is int:  # (exactly: True is an int too)
        return <crc32_c><uintptr_t>(<object>crc_fn)
    return NULL

cdef enum:
    MAGIC_V1 = -626843481
    MAGIC_V2 = -626843477
    BLANK_MAGIC = -875286124
    FLAG_BORNHOST_V6 = 0x10
    FLAG_STOREHOST_V6 = 0x20
    TRANSACTION_MASK = 0xC
    TRANSACTION_COMMIT = 0x8
    MAX_PROPERTIES = 32767
    MIN_RECORD_SIZE = 92


cdef inline void put32(char* p, int32_t v) nogil:
    cdef uint32_t u = <uint32_t>v
    p[0] = <char>(u >> 24)
    p[1] = <char>(u >> 16)
    p[2] = <char>(u >> 8)
    p[3] = <char>u


cdef inline void put64(char* p, int64_t v) nogil:
    cdef uint64_t u = <uint64_t>v
    cdef int i
    for i in range(8):
        p[i] = <char>(u >> (56 - 8 * i))


cdef inline int32_t get32(const uint8_t* p) nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3])


cdef inline int64_t get64(const uint8_t* p) nogil:
    cdef uint64_t u = 0
    cdef int i
    for i in range(8):
        u = (u << 8) | p[i]
    return <int64_t>u

cdef inline Py_ssize_t hex_message_id(char* out, const uint8_t* host, Py_ssize_t host_len, int64_t phy) nogil:
    """The offset message id into ``out``: hex of the store host (address, port), then of the
    commit-log offset; returns its length (at most 56)."""
    cdef const char* digits = b"0123456789ABCDEF"
    cdef Py_ssize_t n = 0, i
    for i in range(host_len):
        out[n] = digits[host[i] >> 4]
        out[n + 1] = digits[host[i] & 15]
        n += 2
    for i in range(8):
        out[n] = digits[((<uint64_t>phy) >> (60 - 8 * i)) & 15]
        out[n + 1] = digits[((<uint64_t>phy) >> (56 - 8 * i)) & 15]
        n += 2
    return n

cdef inline int64_t index_hash(uint32_t h):
    cdef int32_t v = <int32_t>h
    if v == <int32_t>0x80000000:
        return 0
    return -v if v < 0 else v


cdef class Prepared:
    cdef public object data
    cdef public list sizes
    cdef public list tags_codes
    cdef public list sys_flags
    cdef public list takes_offset
    cdef public list key_hashes
    cdef public list key_owner
    cdef public long long total
    cdef public Py_ssize_t count_offsets
    cdef public bint wait_flush
    cdef public str topic
    cdef public int queue_id
    cdef Py_ssize_t n
    cdef int32_t* c_sizes
    cdef int32_t* c_flags
