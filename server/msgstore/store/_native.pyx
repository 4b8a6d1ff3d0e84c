# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Compiled hot paths of the record codec.

Python spends several microseconds of bookkeeping per message on this hardware, which caps a
pure-Python store far below the throughput we promise. These loops do the same work as their
reference implementations in ``codec.py`` (which remain the fallback and the test oracle):
preparing a batch of records, fixing their positions inside the append lock, hashing keys the
way Java does, and walking records for recovery and dispatch.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memchr, memcmp, memcpy, memset

cdef extern from "Python.h":
    int PyBuffer_FillInfo(Py_buffer* view, object obj, void* buf, Py_ssize_t len, int readonly, int flags) except -1
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL
    object PyUnicode_DecodeUTF8(const char* s, Py_ssize_t size, const char* errors)
    object PyMemoryView_FromMemory(char* mem, Py_ssize_t size, int flags)
    int PyBUF_READ

DEF MAGIC_V1 = -626843481
DEF MAGIC_V2 = -626843477
DEF BLANK_MAGIC = -875286124
DEF FLAG_BORNHOST_V6 = 0x10
DEF FLAG_STOREHOST_V6 = 0x20
DEF TRANSACTION_MASK = 0xC
DEF TRANSACTION_COMMIT = 0x8
DEF MAX_PROPERTIES = 32767
DEF MIN_RECORD_SIZE = 92


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


cdef inline uint32_t jh_str(uint32_t h, str s):
    """Continue Java's String.hashCode over the UTF-16 code units of ``s``."""
    cdef Py_UCS4 c
    cdef uint32_t u
    for c in s:
        u = <uint32_t>c
        if u > 0xFFFF:
            u -= 0x10000
            h = h * 31 + (0xD800 + (u >> 10))
            h = h * 31 + (0xDC00 + (u & 0x3FF))
        else:
            h = h * 31 + u
    return h


cdef inline int64_t index_hash(uint32_t h):
    cdef int32_t v = <int32_t>h
    if v == <int32_t>0x80000000:
        return 0
    return -v if v < 0 else v


cdef void add_key_hashes(list hashes, list owners, Py_ssize_t owner, uint32_t prefix, object uniq, object keys):
    """Index hashes of a record's keys: its UNIQ_KEY, then each word of KEYS (codec.keys_of)."""
    cdef uint32_t h, u
    cdef bint in_word
    cdef Py_UCS4 c
    if uniq:
        hashes.append(index_hash(jh_str(prefix, <str>uniq)))
        owners.append(owner)
    if keys:
        h = prefix
        in_word = False
        for c in <str>keys:
            u = <uint32_t>c
            if u == 32:
                if in_word:
                    hashes.append(index_hash(h))
                    owners.append(owner)
                    in_word = False
                    h = prefix
                continue
            in_word = True
            if u > 0xFFFF:
                u -= 0x10000
                h = h * 31 + (0xD800 + (u >> 10))
                h = h * 31 + (0xDC00 + (u & 0x3FF))
            else:
                h = h * 31 + u
        if in_word:
            hashes.append(index_hash(h))
            owners.append(owner)


def jhash(str s):
    return <int32_t>jh_str(0, s)


def index_hashes(str topic, list keys):
    """abs(jhash(topic + '#' + key)) for every key, without building the joined strings."""
    cdef uint32_t prefix = jh_str(jh_str(0, topic), "#")
    return [index_hash(jh_str(prefix, k)) for k in keys]


cdef class Prepared:
    """A batch encoded with placeholder positions; :meth:`finalize` fixes them in place."""

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

    def __cinit__(self):
        self.c_sizes = NULL
        self.c_flags = NULL

    def __dealloc__(self):
        PyMem_Free(self.c_sizes)
        PyMem_Free(self.c_flags)

    def __len__(self):
        return self.n

    def finalize(self, long long queue_offset, long long phy_offset, long long store_ts):
        """Write queue offsets, phy offsets and the store time (called inside the append lock)."""
        cdef char* buf = PyByteArray_AS_STRING(self.data)
        cdef Py_ssize_t i, pos = 0
        cdef int32_t sf, t
        cdef long long qoff = queue_offset
        for i in range(self.n):
            sf = self.c_flags[i]
            t = sf & TRANSACTION_MASK
            if t == 0 or t == TRANSACTION_COMMIT:
                put64(buf + pos + 20, qoff)
                qoff += 1
            else:
                put64(buf + pos + 20, 0)
            put64(buf + pos + 28, phy_offset + pos)
            put64(buf + pos + 48 + (20 if sf & FLAG_BORNHOST_V6 else 8), store_ts)
            pos += self.c_sizes[i]
        return self.data


cdef inline bint has_separator(const char* p, Py_ssize_t n):
    return memchr(p, 1, n) != NULL or memchr(p, 2, n) != NULL


def prepare(list msgs, str topic, int queue_id, bytes store_host, long long now_ms, long long max_body,
            bint v2, object crc_fn, object host_bytes_fn, object error_cls):
    """Encode a batch for one queue (the work of codec.PreparedBatch + encode, minus positions).

    Raises ``error_cls(status, reason, index)`` for the first message that cannot be stored.
    """
    cdef Py_ssize_t n = len(msgs), i, cap, pos = 0, blen, plen, klen, vlen, tlen, need, start, j
    cdef Prepared out = Prepared.__new__(Prepared)
    cdef bytes tb = topic.encode("utf-8")
    cdef Py_ssize_t topic_len = PyBytes_GET_SIZE(tb)
    cdef Py_ssize_t topic_part = topic_len + (2 if v2 else 1)
    cdef Py_ssize_t store_len = PyBytes_GET_SIZE(store_host)
    cdef int32_t store_flag = FLAG_STOREHOST_V6 if store_len != 8 else 0
    cdef object m, body, props, k, v, born_host, last_born_host = None
    cdef bytes born = None
    cdef Py_ssize_t born_len = 0
    cdef const char* kp
    cdef const char* vp
    cdef char* buf
    cdef char* rec
    cdef int32_t sf, t, size
    cdef long long born_ts
    cdef uint32_t prefix = jh_str(jh_str(0, topic), "#")
    cdef Py_ssize_t dict_pos
    cdef object uniq, keys_value, tags_value
    cdef list sizes = [], tags_codes = [], sys_flags = [], takes = [], key_hashes = [], key_owner = []
    cdef bint wait = True
    cdef Py_ssize_t count = 0
    if n == 0:
        raise error_cls("MESSAGE_ILLEGAL", "a batch needs at least one message", 0)
    out.c_sizes = <int32_t*>PyMem_Malloc(n * sizeof(int32_t))
    out.c_flags = <int32_t*>PyMem_Malloc(n * sizeof(int32_t))
    if out.c_sizes == NULL or out.c_flags == NULL:
        raise MemoryError()
    cap = 0
    for i in range(n):
        body = (<object>msgs[i]).body
        if type(body) is bytes:
            cap += PyBytes_GET_SIZE(body)
    cap += n * (200 + topic_part + store_len)
    data = PyByteArray_FromStringAndSize(NULL, cap)
    for i in range(n):
        m = msgs[i]
        if m.topic != topic or m.queue_id != queue_id:
            raise error_cls("MESSAGE_ILLEGAL", "every message of a batch must have the batch's topic and queue id", i)
        body = m.body
        if type(body) is not bytes:
            if not isinstance(body, (bytearray, memoryview)):
                raise error_cls("MESSAGE_ILLEGAL", "body must be bytes", i)
            body = bytes(body)
        blen = PyBytes_GET_SIZE(body)
        if blen > max_body:
            raise error_cls("MESSAGE_ILLEGAL", f"body of {blen} bytes exceeds maxMessageSize {max_body}", i)
        born_host = m.born_host
        if born_host is not last_born_host:
            born = host_bytes_fn(born_host)
            born_len = PyBytes_GET_SIZE(born)
            last_born_host = born_host
        sf = m.sys_flag
        sf = (sf & ~(FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6)) | (FLAG_BORNHOST_V6 if born_len != 8 else 0) | store_flag
        props = m.properties
        # size of the properties: name \x01 value \x02 per pair
        plen = 0
        tags_value = None
        keys_value = None
        uniq = None
        if props:
            if type(props) is not dict:
                props = dict(props)
            for k, v in (<dict>props).items():
                if type(k) is not str or type(v) is not str:
                    raise error_cls("MESSAGE_ILLEGAL", "property names and values must be strings", i)
                kp = PyUnicode_AsUTF8AndSize(k, &klen)
                vp = PyUnicode_AsUTF8AndSize(v, &vlen)
                if klen == 0:
                    raise error_cls("MESSAGE_ILLEGAL", "property name must not be empty", i)
                if has_separator(kp, klen) or has_separator(vp, vlen):
                    raise error_cls("MESSAGE_ILLEGAL", f"property {k!r} contains a separator character (\\x01 or \\x02)", i)
                plen += klen + vlen + 2
                if klen == 4 and memcmp(kp, b"TAGS", 4) == 0:
                    tags_value = v
                elif klen == 4 and memcmp(kp, b"KEYS", 4) == 0:
                    keys_value = v
                elif klen == 8 and memcmp(kp, b"UNIQ_KEY", 8) == 0:
                    uniq = v
                elif klen == 4 and memcmp(kp, b"WAIT", 4) == 0 and vlen == 5 and memcmp(vp, b"false", 5) == 0:
                    wait = False
            if plen > MAX_PROPERTIES:
                raise error_cls("PROPERTIES_SIZE_EXCEEDED", f"properties of {plen} bytes exceed {MAX_PROPERTIES}", i)
        size = <int32_t>(72 + topic_part + store_len + born_len + blen + 2 + plen)
        need = pos + size
        if need > cap:
            cap = need * 2
            PyByteArray_Resize(data, cap)
        buf = PyByteArray_AS_STRING(data)
        rec = buf + pos
        put32(rec, size)
        put32(rec + 4, MAGIC_V2 if v2 else MAGIC_V1)
        put32(rec + 8, <int32_t>(crc_fn(body) & 0x7FFFFFFF))
        put32(rec + 12, queue_id)
        put32(rec + 16, <int32_t>m.flag)
        put64(rec + 20, 0)  # queue offset: finalize
        put64(rec + 28, 0)  # phy offset: finalize
        put32(rec + 36, sf)
        born_ts = m.born_timestamp
        put64(rec + 40, born_ts if born_ts else now_ms)
        memcpy(rec + 48, PyBytes_AS_STRING(born), born_len)
        start = 48 + born_len
        put64(rec + start, 0)  # store timestamp: finalize
        memcpy(rec + start + 8, PyBytes_AS_STRING(store_host), store_len)
        start += 8 + store_len
        put32(rec + start, <int32_t>m.reconsume_times)
        put64(rec + start + 4, <int64_t>m.prepared_txn_offset)
        put32(rec + start + 12, <int32_t>blen)
        start += 16
        memcpy(rec + start, PyBytes_AS_STRING(body), blen)
        start += blen
        if v2:
            rec[start] = <char>(topic_len >> 8)
            rec[start + 1] = <char>topic_len
            start += 2
        else:
            rec[start] = <char>topic_len
            start += 1
        memcpy(rec + start, PyBytes_AS_STRING(tb), topic_len)
        start += topic_len
        rec[start] = <char>(plen >> 8)
        rec[start + 1] = <char>plen
        start += 2
        if plen:
            for k, v in (<dict>props).items():
                kp = PyUnicode_AsUTF8AndSize(k, &klen)
                vp = PyUnicode_AsUTF8AndSize(v, &vlen)
                memcpy(rec + start, kp, klen)
                start += klen
                rec[start] = 1
                memcpy(rec + start + 1, vp, vlen)
                start += 1 + vlen
                rec[start] = 2
                start += 1
        pos += size
        out.c_sizes[i] = size
        out.c_flags[i] = sf
        sizes.append(size)
        sys_flags.append(sf)
        t = sf & TRANSACTION_MASK
        takes.append(t == 0 or t == TRANSACTION_COMMIT)
        if t == 0 or t == TRANSACTION_COMMIT:
            count += 1
        tags_codes.append(<int32_t>jh_str(0, tags_value) if tags_value else 0)
        if uniq or keys_value:
            add_key_hashes(key_hashes, key_owner, i, prefix, uniq, keys_value)
    PyByteArray_Resize(data, pos)
    out.data = data
    out.n = n
    out.total = pos
    out.sizes = sizes
    out.tags_codes = tags_codes
    out.sys_flags = sys_flags
    out.takes_offset = takes
    out.key_hashes = key_hashes
    out.key_owner = key_owner
    out.count_offsets = count
    out.wait_flush = wait
    out.topic = topic
    out.queue_id = queue_id
    return out


cdef inline int check_record(const uint8_t* p, Py_ssize_t remaining, bint check_crc, object crc_fn,
                             Py_ssize_t* size_out, Py_ssize_t* body_off, Py_ssize_t* body_len,
                             Py_ssize_t* topic_off, Py_ssize_t* topic_len, Py_ssize_t* props_off,
                             Py_ssize_t* props_len) except -2:
    """codec.check: 1 good, 0 BLANK, -1 bad (size_out = -1 or TOTALSIZE as the reference)."""
    cdef int32_t total, magic, sf, bl, tl, pl
    cdef Py_ssize_t born_len, store_len, p_off, tls
    if remaining < 8:
        size_out[0] = -1
        return -1
    total = get32(p)
    magic = get32(p + 4)
    if magic == BLANK_MAGIC:
        size_out[0] = 0
        return 0
    if (magic != MAGIC_V1 and magic != MAGIC_V2) or total > remaining or total < MIN_RECORD_SIZE:
        size_out[0] = -1
        return -1
    sf = get32(p + 36)
    born_len = 20 if sf & FLAG_BORNHOST_V6 else 8
    store_len = 20 if sf & FLAG_STOREHOST_V6 else 8
    tls = 2 if magic == MAGIC_V2 else 1
    p_off = 48 + born_len + 8 + store_len + 12
    size_out[0] = total
    if p_off + 4 > total:  # a damaged SYSFLAG can claim hosts the record has no room for
        return -1
    bl = get32(p + p_off)
    p_off += 4
    if bl < 0 or p_off + bl + tls > total:
        return -1
    if check_crc:
        if (crc_fn(PyMemoryView_FromMemory(<char*>(p + p_off), bl, PyBUF_READ)) & 0x7FFFFFFF) != get32(p + 8):
            size_out[0] = -1
            return -1
    body_off[0] = p_off
    body_len[0] = bl
    p_off += bl
    tl = (p[p_off] << 8 | p[p_off + 1]) if tls == 2 else p[p_off]
    p_off += tls
    topic_off[0] = p_off
    topic_len[0] = tl
    p_off += tl
    if p_off + 2 > total:
        return -1
    pl = p[p_off] << 8 | p[p_off + 1]
    p_off += 2
    props_off[0] = p_off
    props_len[0] = pl
    if p_off + pl != total:
        return -1
    return 1


def scan(const uint8_t[::1] mem, Py_ssize_t start, Py_ssize_t limit, bint check_crc, object crc_fn,
         long long base_phy, int64_t[::1] phys, int32_t[::1] sizes, int32_t[::1] topic_ids, int32_t[::1] qids,
         int64_t[::1] qoffs, int64_t[::1] tags, int64_t[::1] tss, int32_t[::1] flags,
         int64_t[::1] key_hashes, int64_t[::1] key_owner, dict topic_ids_by_name, list topic_names):
    """Walk records from ``start`` into the given column arrays (capacity = their length).

    Returns (count, key_count, next_pos, stop, bad_size) where stop is 'limit' (reached
    ``limit`` or a capacity), 'blank' (BLANK at next_pos) or 'bad' (next_pos is the first bad
    record; bad_size is its TOTALSIZE when only the length disagreed, else -1). Topics are
    numbered through ``topic_ids_by_name`` / ``topic_names`` so no per-record strings are made.
    """
    cdef Py_ssize_t pos = start, size, body_off, body_len, topic_off, topic_len, props_off, props_len
    cdef Py_ssize_t count = 0, nkeys = 0, q, e, vs, cap = phys.shape[0], key_cap = key_hashes.shape[0]
    cdef const uint8_t* base = &mem[0]
    cdef const uint8_t* p
    cdef const uint8_t* pp
    cdef const uint8_t* last_topic = NULL
    cdef Py_ssize_t last_topic_len = -1
    cdef int32_t last_topic_id = -1
    cdef const uint8_t* last_tag = NULL
    cdef Py_ssize_t last_tag_len = -1
    cdef int64_t last_tag_code = 0
    cdef int rc
    cdef int32_t sf, tid
    cdef Py_ssize_t born_len
    cdef str stop = "limit"
    cdef Py_ssize_t bad_size = -1
    cdef object key_bytes, topic, uniq, keys_value, found
    cdef int64_t tag_code
    cdef list kh = [], ko = []
    cdef Py_ssize_t j
    if limit > mem.shape[0]:
        limit = mem.shape[0]
    while pos < limit and count < cap:
        p = base + pos
        rc = check_record(p, limit - pos, check_crc, crc_fn, &size, &body_off, &body_len, &topic_off, &topic_len, &props_off, &props_len)
        if rc == 0:
            stop = "blank"
            break
        if rc < 0:
            stop = "bad"
            bad_size = size
            break
        if topic_len == last_topic_len and memcmp(p + topic_off, last_topic, topic_len) == 0:
            tid = last_topic_id
        else:
            key_bytes = PyBytes_FromStringAndSize(<char*>(p + topic_off), topic_len)
            found = topic_ids_by_name.get(key_bytes)
            if found is None:
                tid = len(topic_names)
                topic_names.append(PyUnicode_DecodeUTF8(<char*>(p + topic_off), topic_len, "replace"))
                topic_ids_by_name[key_bytes] = tid
            else:
                tid = found
            last_topic = p + topic_off
            last_topic_len = topic_len
            last_topic_id = tid
        sf = get32(p + 36)
        born_len = 20 if sf & FLAG_BORNHOST_V6 else 8
        # TAGS, KEYS and UNIQ_KEY from the properties
        tag_code = 0
        uniq = None
        keys_value = None
        q = 0
        pp = p + props_off
        while q < props_len:
            e = q
            while e < props_len and pp[e] != 1 and pp[e] != 2:
                e += 1
            if e >= props_len or pp[e] != 1:  # a pair without a value: skip it
                while e < props_len and pp[e] != 2:
                    e += 1
                q = e + 1
                continue
            vs = e + 1
            while vs < props_len and pp[vs] != 2:
                vs += 1
            if vs > e + 1 and e > q:
                if e - q == 4 and memcmp(pp + q, b"TAGS", 4) == 0:
                    if vs - e - 1 == last_tag_len and memcmp(pp + e + 1, last_tag, last_tag_len) == 0:
                        tag_code = last_tag_code
                    else:
                        tag_code = <int32_t>jh_str(0, PyUnicode_DecodeUTF8(<char*>(pp + e + 1), vs - e - 1, "replace"))
                        last_tag = pp + e + 1
                        last_tag_len = vs - e - 1
                        last_tag_code = tag_code
                elif e - q == 4 and memcmp(pp + q, b"KEYS", 4) == 0:
                    keys_value = PyUnicode_DecodeUTF8(<char*>(pp + e + 1), vs - e - 1, "replace")
                elif e - q == 8 and memcmp(pp + q, b"UNIQ_KEY", 8) == 0:
                    uniq = PyUnicode_DecodeUTF8(<char*>(pp + e + 1), vs - e - 1, "replace")
            q = vs + 1
        if uniq or keys_value:
            del kh[:]
            del ko[:]
            add_key_hashes(kh, ko, count, jh_str(jh_str(0, topic_names[tid]), "#"), uniq, keys_value)
            if nkeys + len(kh) > key_cap:
                break  # out of key room: the caller comes back for this record
            for j in range(len(kh)):
                key_hashes[nkeys] = kh[j]
                key_owner[nkeys] = count
                nkeys += 1
        phys[count] = base_phy + pos
        sizes[count] = <int32_t>size
        topic_ids[count] = tid
        qids[count] = get32(p + 12)
        qoffs[count] = get64(p + 20)
        tss[count] = get64(p + 48 + born_len)
        flags[count] = sf
        tags[count] = tag_code
        count += 1
        pos += size
    return count, nkeys, pos, stop, bad_size


# =================================================================================================
# SendRequest wire bytes → commit-log records (the server's hot path) and back (the client's)
#
# msgstore.v1.SendRequest { repeated SendEntry entries = 1; optional bool wait_flush = 2; }
# SendEntry { string topic = 1; int32 queue_id = 2; bytes body = 3; string tags = 4;
#             repeated string keys = 5; string uniq_key = 6; map<string,string> properties = 7;
#             int32 flag = 8; int64 born_timestamp = 9; }
# Reading the bytes directly avoids a protobuf object per field access (reading one body from
# a parsed message copies it), which made validation cost ~14 µs per message. The protobuf
# path in api/validation.py remains the reference and the fallback.

ctypedef struct Span:
    Py_ssize_t off
    Py_ssize_t len

ctypedef struct Prop:
    Span k
    Span v

ctypedef struct Entry:
    Span topic
    Span body
    Span tags
    Span uniq
    Py_ssize_t keys_first
    Py_ssize_t keys_count
    Py_ssize_t props_first
    Py_ssize_t props_count
    int32_t queue_id
    int32_t flag
    int64_t born_ts
    Py_ssize_t group
    int32_t size
    int32_t props_len
    int32_t tags_code


cdef inline int read_varint(const uint8_t* p, Py_ssize_t end, Py_ssize_t* pos, uint64_t* out) nogil:
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        if pos[0] >= end or shift > 63:
            return -1
        b = p[pos[0]]
        pos[0] += 1
        result |= (<uint64_t>(b & 0x7F)) << shift
        if not (b & 0x80):
            out[0] = result
            return 0
        shift += 7


cdef inline int skip_field(const uint8_t* p, Py_ssize_t end, Py_ssize_t* pos, int wt) nogil:
    cdef uint64_t v
    if wt == 0:
        return read_varint(p, end, pos, &v)
    if wt == 1:
        pos[0] += 8
    elif wt == 5:
        pos[0] += 4
    elif wt == 2:
        if read_varint(p, end, pos, &v) < 0 or v > <uint64_t>(end - pos[0]):
            return -1
        pos[0] += <Py_ssize_t>v
    else:
        return -1
    return 0 if pos[0] <= end else -1


cdef inline int read_span(const uint8_t* p, Py_ssize_t end, Py_ssize_t* pos, Span* out) nogil:
    cdef uint64_t v
    if read_varint(p, end, pos, &v) < 0 or v > <uint64_t>(end - pos[0]):
        return -1
    out.off = pos[0]
    out.len = <Py_ssize_t>v
    pos[0] += <Py_ssize_t>v
    return 0


cdef int utf8_valid(const uint8_t* s, Py_ssize_t n) nogil:
    """Strict UTF-8 (no overlong forms, surrogates or code points above U+10FFFF)."""
    cdef Py_ssize_t i = 0
    cdef uint8_t c
    cdef uint32_t cp
    while i < n:
        c = s[i]
        if c < 0x80:
            i += 1
        elif c < 0xC2:
            return 0
        elif c < 0xE0:
            if i + 1 >= n or (s[i + 1] & 0xC0) != 0x80:
                return 0
            i += 2
        elif c < 0xF0:
            if i + 2 >= n or (s[i + 1] & 0xC0) != 0x80 or (s[i + 2] & 0xC0) != 0x80:
                return 0
            cp = ((c & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F)
            if cp < 0x800 or (0xD800 <= cp <= 0xDFFF):
                return 0
            i += 3
        elif c < 0xF5:
            if i + 3 >= n or (s[i + 1] & 0xC0) != 0x80 or (s[i + 2] & 0xC0) != 0x80 or (s[i + 3] & 0xC0) != 0x80:
                return 0
            cp = ((c & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F)
            if cp < 0x10000 or cp > 0x10FFFF:
                return 0
            i += 4
        else:
            return 0
    return 1


cdef uint32_t jh_utf8(uint32_t h, const uint8_t* s, Py_ssize_t n) nogil:
    """Java's hashCode over the UTF-16 code units of valid UTF-8 bytes."""
    cdef Py_ssize_t i = 0
    cdef uint8_t c
    cdef uint32_t cp
    while i < n:
        c = s[i]
        if c < 0x80:
            cp = c
            i += 1
        elif c < 0xE0:
            cp = ((c & 0x1F) << 6) | (s[i + 1] & 0x3F)
            i += 2
        elif c < 0xF0:
            cp = ((c & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F)
            i += 3
        else:
            cp = ((c & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F)
            i += 4
        if cp > 0xFFFF:
            cp -= 0x10000
            h = h * 31 + (0xD800 + (cp >> 10))
            h = h * 31 + (0xDC00 + (cp & 0x3FF))
        else:
            h = h * 31 + cp
    return h


cdef inline bint sep_free(const uint8_t* s, Py_ssize_t n) nogil:
    return memchr(s, 1, n) == NULL and memchr(s, 2, n) == NULL


cdef inline bint topic_char(uint8_t c) nogil:
    return (48 <= c <= 57) or (65 <= c <= 90) or (97 <= c <= 122) or c == 95 or c == 37 or c == 124 or c == 45


cdef inline bint span_is(const uint8_t* base, Span s, const char* word, Py_ssize_t n) nogil:
    return s.len == n and memcmp(base + s.off, word, n) == 0


cdef str _text(const uint8_t* base, Span s):
    return PyUnicode_DecodeUTF8(<char*>(base + s.off), s.len, "replace")


cdef class _Growable:
    cdef void* data
    cdef Py_ssize_t count
    cdef Py_ssize_t cap
    cdef Py_ssize_t item

    def __cinit__(self, Py_ssize_t item):
        self.item = item
        self.count = 0
        self.cap = 0
        self.data = NULL

    def __dealloc__(self):
        PyMem_Free(self.data)

    cdef void* push(self) except NULL:
        cdef void* grown
        if self.count == self.cap:
            self.cap = max(16, self.cap * 2)
            grown = PyMem_Realloc(self.data, self.cap * self.item)
            if grown == NULL:
                raise MemoryError()
            self.data = grown
        self.count += 1
        return <char*>self.data + (self.count - 1) * self.item


def transcode_send(const uint8_t[::1] data, long long max_body, bytes store_host, long long now_ms, object crc_fn,
                   bytes born_host, object invalid, Py_ssize_t max_entries):
    """Validate a SendRequest and encode its entries as records, one prepared batch per
    (topic, queue). Returns (groups, wait_flush, entry_count) where groups are
    (topic, queue_id, Prepared, [entry indices]) and wait_flush is -1 when absent.
    Raises ``invalid(field, reason)`` naming the field as ``entries[i].<name>``."""
    cdef const uint8_t* base = &data[0] if data.shape[0] else <const uint8_t*>b""
    cdef Py_ssize_t n = data.shape[0], pos = 0, epos, eend, i, j, k, count = 0
    cdef uint64_t key, v
    cdef int wt, field, wait = -1
    cdef _Growable entries = _Growable(sizeof(Entry))
    cdef _Growable keys = _Growable(sizeof(Span))
    cdef _Growable props = _Growable(sizeof(Prop))
    cdef Entry* e
    cdef Span* ks
    cdef Prop* pr
    cdef Prop* other
    cdef Span mk, mv, sp
    cdef Py_ssize_t mpos, mend, dup
    cdef Py_ssize_t born_len = PyBytes_GET_SIZE(born_host), store_len = PyBytes_GET_SIZE(store_host)
    cdef int32_t sf = (FLAG_BORNHOST_V6 if born_len != 8 else 0) | (FLAG_STOREHOST_V6 if store_len != 8 else 0)
    cdef dict group_ids = {}
    cdef list group_keys = []
    cdef Py_ssize_t last_group = -1
    cdef Span last_topic
    cdef int32_t last_qid = -1
    cdef object gkey
    last_topic.off = 0
    last_topic.len = -1
    # ---- pass 1: the request's fields
    while pos < n:
        if read_varint(base, n, &pos, &key) < 0:
            raise invalid("request", "not a valid msgstore.v1.SendRequest")
        field = <int>(key >> 3)
        wt = <int>(key & 7)
        if field == 1 and wt == 2:
            e = <Entry*>entries.push()
            memset(e, 0, sizeof(Entry))
            if read_span(base, n, &pos, &e.topic) < 0:  # the entry's bytes, parsed below
                raise invalid("request", "not a valid msgstore.v1.SendRequest")
        elif field == 2 and wt == 0:
            if read_varint(base, n, &pos, &v) < 0:
                raise invalid("request", "not a valid msgstore.v1.SendRequest")
            wait = 1 if v else 0
        elif skip_field(base, n, &pos, wt) < 0:
            raise invalid("request", "not a valid msgstore.v1.SendRequest")
    count = entries.count
    if count < 1 or count > max_entries:
        raise invalid("entries", f"must hold 1 to {max_entries} entries, got {count}")
    # ---- pass 2: each entry's fields, validated in the reference's order
    for i in range(count):
        e = (<Entry*>entries.data) + i
        epos = e.topic.off
        eend = epos + e.topic.len
        e.topic.len = 0
        e.keys_first = keys.count
        e.props_first = props.count
        while epos < eend:
            if read_varint(base, eend, &epos, &key) < 0:
                raise invalid("request", "not a valid msgstore.v1.SendRequest")
            field = <int>(key >> 3)
            wt = <int>(key & 7)
            if wt == 2 and field in (1, 3, 4, 5, 6, 7):
                if read_span(base, eend, &epos, &sp) < 0:
                    raise invalid("request", "not a valid msgstore.v1.SendRequest")
                if field == 1:
                    e.topic = sp
                elif field == 3:
                    e.body = sp
                elif field == 4:
                    e.tags = sp
                elif field == 6:
                    e.uniq = sp
                elif field == 5:
                    ks = <Span*>keys.push()
                    ks[0] = sp
                    e.keys_count += 1
                else:  # a map entry: key = 1, value = 2
                    mk.off = mv.off = sp.off
                    mk.len = mv.len = 0
                    mpos = sp.off
                    mend = sp.off + sp.len
                    while mpos < mend:
                        if read_varint(base, mend, &mpos, &key) < 0:
                            raise invalid("request", "not a valid msgstore.v1.SendRequest")
                        if (key >> 3) == 1 and (key & 7) == 2:
                            if read_span(base, mend, &mpos, &mk) < 0:
                                raise invalid("request", "not a valid msgstore.v1.SendRequest")
                        elif (key >> 3) == 2 and (key & 7) == 2:
                            if read_span(base, mend, &mpos, &mv) < 0:
                                raise invalid("request", "not a valid msgstore.v1.SendRequest")
                        elif skip_field(base, mend, &mpos, <int>(key & 7)) < 0:
                            raise invalid("request", "not a valid msgstore.v1.SendRequest")
                    if not utf8_valid(base + mk.off, mk.len):
                        raise invalid(f"entries[{i}].properties.key", "not valid UTF-8")
                    if not utf8_valid(base + mv.off, mv.len):
                        raise invalid(f"entries[{i}].properties.value", "not valid UTF-8")
                    dup = -1
                    for k in range(e.props_count):  # a repeated map key: the last value wins
                        other = (<Prop*>props.data) + e.props_first + k
                        if other.k.len == mk.len and memcmp(base + other.k.off, base + mk.off, mk.len) == 0:
                            dup = k
                    if dup >= 0:
                        ((<Prop*>props.data) + e.props_first + dup).v = mv
                    else:
                        pr = <Prop*>props.push()
                        pr.k = mk
                        pr.v = mv
                        e.props_count += 1
            elif wt == 0 and field in (2, 8, 9):
                if read_varint(base, eend, &epos, &v) < 0:
                    raise invalid("request", "not a valid msgstore.v1.SendRequest")
                if field == 2:
                    e.queue_id = <int32_t>v
                elif field == 8:
                    e.flag = <int32_t>v
                else:
                    e.born_ts = <int64_t>v
            elif skip_field(base, eend, &epos, wt) < 0:
                raise invalid("request", "not a valid msgstore.v1.SendRequest")
        # strings must be UTF-8 (as protobuf requires)
        if not utf8_valid(base + e.topic.off, e.topic.len):
            raise invalid(f"entries[{i}].topic", "not valid UTF-8")
        if not utf8_valid(base + e.tags.off, e.tags.len):
            raise invalid(f"entries[{i}].tags", "not valid UTF-8")
        if not utf8_valid(base + e.uniq.off, e.uniq.len):
            raise invalid(f"entries[{i}].uniq_key", "not valid UTF-8")
        for j in range(e.keys_count):
            sp = (<Span*>keys.data)[e.keys_first + j]
            if not utf8_valid(base + sp.off, sp.len):
                raise invalid(f"entries[{i}].keys[{j}]", "not valid UTF-8")
        _check_entry(base, e, i, <Span*>keys.data, <Prop*>props.data, max_body, invalid)
        # group by (topic, queue id); most requests hold a single group
        if last_group >= 0 and e.queue_id == last_qid and e.topic.len == last_topic.len and \
                memcmp(base + e.topic.off, base + last_topic.off, e.topic.len) == 0:
            e.group = last_group
        else:
            gkey = (PyBytes_FromStringAndSize(<char*>(base + e.topic.off), e.topic.len), e.queue_id)
            found = group_ids.get(gkey)
            if found is None:
                found = len(group_keys)
                group_ids[gkey] = found
                group_keys.append(gkey)
            e.group = found
            last_group = found
            last_topic = e.topic
            last_qid = e.queue_id
        e.size = <int32_t>(72 + 1 + e.topic.len + store_len + born_len + e.body.len + 2 + e.props_len)
    # ---- pass 3: encode each group's records
    cdef list groups = []
    cdef Py_ssize_t g
    for g in range(len(group_keys)):
        groups.append(_encode_group(base, <Entry*>entries.data, count, g, group_keys[g], <Span*>keys.data,
                                    <Prop*>props.data, store_host, born_host, sf, now_ms, crc_fn, wait))
    return groups, wait, count


cdef int _check_entry(const uint8_t* base, Entry* e, Py_ssize_t i, Span* keys, Prop* props, long long max_body,
                      object invalid) except -1:
    cdef Py_ssize_t j, plen = 0, kl
    cdef Span sp
    cdef Prop* pr
    cdef str name
    if e.topic.len == 0:
        raise invalid(f"entries[{i}].topic", "topic must be a non-empty string (got '')")
    if e.topic.len > 127:
        raise invalid(f"entries[{i}].topic", f"topic is longer than 127 bytes (got {_text(base, e.topic)[:140]!r})")
    for j in range(e.topic.len):
        if not topic_char(base[e.topic.off + j]):
            raise invalid(f"entries[{i}].topic", f"topic may contain only A-Z a-z 0-9 _ % | - (got {_text(base, e.topic)[:140]!r})")
    if e.queue_id < 0:
        raise invalid(f"entries[{i}].queue_id", f"must be >= 0, got {e.queue_id}")
    if e.body.len > max_body:
        raise invalid(f"entries[{i}].body", f"{e.body.len} bytes exceeds maxMessageSize {max_body}")
    for j in range(e.props_count):
        pr = props + e.props_first + j
        if pr.k.len == 0:
            raise invalid(f"entries[{i}].properties", "property names must not be empty")
        if not sep_free(base + pr.k.off, pr.k.len) or not sep_free(base + pr.v.off, pr.v.len):
            raise invalid(f"entries[{i}].properties[{_text(base, pr.k)!r}]", "must not contain the characters \\x01 or \\x02")
        if span_is(base, pr.k, b"TAGS", 4) or span_is(base, pr.k, b"KEYS", 4) or span_is(base, pr.k, b"UNIQ_KEY", 8):
            name = _text(base, pr.k)
            raise invalid(f"entries[{i}].properties[{name!r}]", f"use the {name.lower()} field instead")
        plen += pr.k.len + pr.v.len + 2
    if e.tags.len:
        if not sep_free(base + e.tags.off, e.tags.len):
            raise invalid(f"entries[{i}].tags", "must not contain the characters \\x01 or \\x02")
        plen += 4 + e.tags.len + 2
        e.tags_code = <int32_t>jh_utf8(0, base + e.tags.off, e.tags.len)
    if e.keys_count:
        kl = 0
        for j in range(e.keys_count):
            sp = keys[e.keys_first + j]
            if sp.len == 0:
                raise invalid(f"entries[{i}].keys[{j}]", "must not be empty")
            if memchr(base + sp.off, 32, sp.len) != NULL:
                raise invalid(f"entries[{i}].keys[{j}]", "must not contain spaces")
            if not sep_free(base + sp.off, sp.len):
                raise invalid(f"entries[{i}].keys[{j}]", "must not contain the characters \\x01 or \\x02")
            kl += sp.len + (1 if j else 0)
        plen += 4 + kl + 2
    if e.uniq.len:
        if not sep_free(base + e.uniq.off, e.uniq.len):
            raise invalid(f"entries[{i}].uniq_key", "must not contain the characters \\x01 or \\x02")
        plen += 8 + e.uniq.len + 2
    if plen > MAX_PROPERTIES:
        raise invalid(f"entries[{i}].properties", f"{plen} bytes encoded exceed {MAX_PROPERTIES}")
    if e.born_ts < 0:
        raise invalid(f"entries[{i}].born_timestamp", f"must be >= 0, got {e.born_ts}")
    e.props_len = <int32_t>plen
    return 0


cdef inline char* _put_prop(char* w, const uint8_t* base, const char* name, Py_ssize_t name_len, Span v):
    memcpy(w, name, name_len)
    w += name_len
    w[0] = 1
    memcpy(w + 1, base + v.off, v.len)
    w += 1 + v.len
    w[0] = 2
    return w + 1


cdef tuple _encode_group(const uint8_t* base, Entry* entries, Py_ssize_t count, Py_ssize_t g, tuple gkey, Span* keys,
                         Prop* props, bytes store_host, bytes born_host, int32_t sf, long long now_ms, object crc_fn,
                         int wait):
    cdef Prepared out = Prepared.__new__(Prepared)
    cdef Py_ssize_t i, j, n = 0, total = 0, idx = 0
    cdef Entry* e
    cdef Span sp
    cdef Prop* pr
    cdef char* rec
    cdef char* w
    cdef list members = []
    cdef list sizes = [], tags_codes = [], sys_flags = [], takes = [], key_hashes = [], key_owner = []
    cdef Py_ssize_t store_len = PyBytes_GET_SIZE(store_host), born_len = PyBytes_GET_SIZE(born_host)
    cdef bytes topic_b = gkey[0]
    cdef Py_ssize_t tlen = PyBytes_GET_SIZE(topic_b)
    cdef uint32_t prefix = jh_utf8(0, <const uint8_t*>PyBytes_AS_STRING(topic_b), tlen) * 31 + 35  # topic + "#"
    cdef uint32_t h
    cdef Py_ssize_t p, word_start
    cdef bint wait_flush = wait != 0
    for i in range(count):
        if entries[i].group == g:
            members.append(i)
            total += entries[i].size
    n = len(members)
    out.c_sizes = <int32_t*>PyMem_Malloc(n * sizeof(int32_t))
    out.c_flags = <int32_t*>PyMem_Malloc(n * sizeof(int32_t))
    if out.c_sizes == NULL or out.c_flags == NULL:
        raise MemoryError()
    data = PyByteArray_FromStringAndSize(NULL, total)
    rec = PyByteArray_AS_STRING(data)
    for idx in range(n):
        e = entries + <Py_ssize_t>members[idx]
        put32(rec, e.size)
        put32(rec + 4, MAGIC_V1)
        put32(rec + 8, <int32_t>(crc_fn(PyMemoryView_FromMemory(<char*>(base + e.body.off), e.body.len, PyBUF_READ)) & 0x7FFFFFFF))
        put32(rec + 12, e.queue_id)
        put32(rec + 16, e.flag)
        put64(rec + 20, 0)
        put64(rec + 28, 0)
        put32(rec + 36, sf)
        put64(rec + 40, e.born_ts if e.born_ts else now_ms)
        memcpy(rec + 48, PyBytes_AS_STRING(born_host), born_len)
        w = rec + 48 + born_len
        put64(w, 0)
        memcpy(w + 8, PyBytes_AS_STRING(store_host), store_len)
        w += 8 + store_len
        put32(w, 0)
        put64(w + 4, 0)
        put32(w + 12, <int32_t>e.body.len)
        memcpy(w + 16, base + e.body.off, e.body.len)
        w += 16 + e.body.len
        w[0] = <char>tlen
        memcpy(w + 1, PyBytes_AS_STRING(topic_b), tlen)
        w += 1 + tlen
        w[0] = <char>(e.props_len >> 8)
        w[1] = <char>e.props_len
        w += 2
        for j in range(e.props_count):
            pr = props + e.props_first + j
            memcpy(w, base + pr.k.off, pr.k.len)
            w += pr.k.len
            w[0] = 1
            memcpy(w + 1, base + pr.v.off, pr.v.len)
            w += 1 + pr.v.len
            w[0] = 2
            w += 1
        if e.tags.len:
            w = _put_prop(w, base, b"TAGS", 4, e.tags)
        if e.keys_count:
            memcpy(w, b"KEYS\x01", 5)
            w += 5
            for j in range(e.keys_count):
                sp = keys[e.keys_first + j]
                if j:
                    w[0] = 32
                    w += 1
                memcpy(w, base + sp.off, sp.len)
                w += sp.len
            w[0] = 2
            w += 1
        if e.uniq.len:
            w = _put_prop(w, base, b"UNIQ_KEY", 8, e.uniq)
        # dispatch fields
        out.c_sizes[idx] = e.size
        out.c_flags[idx] = sf
        sizes.append(e.size)
        sys_flags.append(sf)
        takes.append(True)
        tags_codes.append(e.tags_code)
        if e.uniq.len:
            key_hashes.append(index_hash(jh_utf8(prefix, base + e.uniq.off, e.uniq.len)))
            key_owner.append(idx)
        for j in range(e.keys_count):
            sp = keys[e.keys_first + j]
            key_hashes.append(index_hash(jh_utf8(prefix, base + sp.off, sp.len)))
            key_owner.append(idx)
        rec += e.size
    out.data = data
    out.n = n
    out.total = total
    out.sizes = sizes
    out.tags_codes = tags_codes
    out.sys_flags = sys_flags
    out.takes_offset = takes
    out.key_hashes = key_hashes
    out.key_owner = key_owner
    out.count_offsets = n
    out.wait_flush = wait_flush
    out.topic = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(topic_b), tlen, "strict")
    out.queue_id = gkey[1]
    return (out.topic, out.queue_id, out, members)


# ---- the client's side: OutMessage objects → SendRequest bytes

cdef inline Py_ssize_t varint_len(uint64_t v) nogil:
    cdef Py_ssize_t n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


cdef inline char* put_varint(char* w, uint64_t v) nogil:
    while v >= 0x80:
        w[0] = <char>((v & 0x7F) | 0x80)
        v >>= 7
        w += 1
    w[0] = <char>v
    return w + 1


cdef inline Py_ssize_t str_field_len(Py_ssize_t n) nogil:
    return 0 if n == 0 else 1 + varint_len(n) + n


cdef inline char* put_bytes_field(char* w, uint8_t tag, const char* s, Py_ssize_t n) nogil:
    if n == 0:
        return w
    w[0] = <char>tag
    w = put_varint(w + 1, n)
    memcpy(w, s, n)
    return w + n


def encode_send_request(str topic, int queue_id, list messages, int wait_flush):
    """SendRequest wire bytes for OutMessage-like objects (body, key, keys, tags,
    properties, uniq_key, flag) sent to one (topic, queue)."""
    cdef Py_ssize_t tlen, blen, n, total = 0, elen, klen, vlen, mlen, i
    cdef const char* tp = PyUnicode_AsUTF8AndSize(topic, &tlen)
    cdef const char* s
    cdef const char* vs
    cdef object m, body, key, kk, props, k, v, tags, uniq
    cdef list lens = []
    cdef list keylists = []
    cdef char* w
    cdef uint64_t qv = <uint64_t><int64_t>queue_id
    cdef uint64_t fv
    # pass 1: sizes
    for m in messages:
        body = m.body
        if type(body) is not bytes:
            body = bytes(body)
        elen = str_field_len(tlen) + (1 + varint_len(qv) if queue_id else 0) + str_field_len(PyBytes_GET_SIZE(body))
        tags = m.tags
        if tags:
            PyUnicode_AsUTF8AndSize(tags, &n)
            elen += str_field_len(n)
        kl = list(m.keys) if m.keys else []
        key = m.key
        if key:
            kl.append(key)
        keylists.append(kl)
        for kk in kl:
            PyUnicode_AsUTF8AndSize(kk, &n)
            elen += 1 + varint_len(n) + n
        uniq = m.uniq_key
        if uniq:
            PyUnicode_AsUTF8AndSize(uniq, &n)
            elen += str_field_len(n)
        props = m.properties
        if props:
            for k, v in props.items():
                PyUnicode_AsUTF8AndSize(k, &klen)
                PyUnicode_AsUTF8AndSize(v, &vlen)
                mlen = str_field_len(klen) + str_field_len(vlen)
                elen += 1 + varint_len(mlen) + mlen
        if m.flag:
            elen += 1 + varint_len(<uint64_t><int64_t>m.flag)
        lens.append(elen)
        total += 1 + varint_len(elen) + elen
    if wait_flush >= 0:
        total += 2
    out = PyBytes_FromStringAndSize(NULL, total)
    w = PyBytes_AS_STRING(out)
    for i in range(len(messages)):
        m = messages[i]
        body = m.body
        if type(body) is not bytes:
            body = bytes(body)
        w[0] = 0x0A
        w = put_varint(w + 1, <uint64_t><Py_ssize_t>lens[i])
        w = put_bytes_field(w, 0x0A, tp, tlen)
        if queue_id:
            w[0] = 0x10
            w = put_varint(w + 1, qv)
        w = put_bytes_field(w, 0x1A, PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body))
        tags = m.tags
        if tags:
            s = PyUnicode_AsUTF8AndSize(tags, &n)
            w = put_bytes_field(w, 0x22, s, n)
        for kk in <list>keylists[i]:
            s = PyUnicode_AsUTF8AndSize(kk, &n)
            w[0] = 0x2A
            w = put_varint(w + 1, n)
            memcpy(w, s, n)
            w += n
        uniq = m.uniq_key
        if uniq:
            s = PyUnicode_AsUTF8AndSize(uniq, &n)
            w = put_bytes_field(w, 0x32, s, n)
        props = m.properties
        if props:
            for k, v in props.items():
                s = PyUnicode_AsUTF8AndSize(k, &klen)
                vs = PyUnicode_AsUTF8AndSize(v, &vlen)
                mlen = str_field_len(klen) + str_field_len(vlen)
                w[0] = 0x3A
                w = put_varint(w + 1, mlen)
                w = put_bytes_field(w, 0x0A, s, klen)
                w = put_bytes_field(w, 0x12, vs, vlen)
        if m.flag:
            fv = <uint64_t><int64_t>m.flag
            w[0] = 0x40
            w = put_varint(w + 1, fv)
    if wait_flush >= 0:
        w[0] = 0x10
        w[1] = 1 if wait_flush else 0
    return out


# ---- the client's side: raw pulled records → StoredMessage objects

cdef object tuple_new = tuple.__new__


def decode_records(const uint8_t[::1] data, object cls, dict host_cache, object host_fn):
    """Every record of a raw pull as ``cls(...)`` (codec.StoredMessage), fields as codec.decode."""
    cdef Py_ssize_t n = data.shape[0], pos = 0, size, blen, tls, tlen, plen, born_len, store_len, off, q, e, vs, i
    cdef const uint8_t* base = &data[0] if n else <const uint8_t*>b""
    cdef const uint8_t* p
    cdef int32_t magic, sf
    cdef list out = []
    cdef dict props
    cdef object born, store, born_key, store_key, topic
    cdef char hexbuf[56]
    cdef Py_ssize_t idlen
    cdef int64_t phy
    cdef dict topics = {}
    while pos + 8 <= n:
        p = base + pos
        size = get32(p)
        magic = get32(p + 4)
        if size < MIN_RECORD_SIZE or pos + size > n or (magic != MAGIC_V1 and magic != MAGIC_V2):
            raise ValueError(f"not a record at {pos}")
        sf = get32(p + 36)
        born_len = 20 if sf & FLAG_BORNHOST_V6 else 8
        store_len = 20 if sf & FLAG_STOREHOST_V6 else 8
        off = 48 + born_len + 8 + store_len + 12
        if off + 4 > size:
            raise ValueError(f"not a record at {pos}")
        born_key = PyBytes_FromStringAndSize(<char*>(p + 48), born_len)
        born = host_cache.get(born_key)
        if born is None:
            born = host_cache[born_key] = host_fn(born_key)
        store_key = PyBytes_FromStringAndSize(<char*>(p + 48 + born_len + 8), store_len)
        store = host_cache.get(store_key)
        if store is None:
            store = host_cache[store_key] = host_fn(store_key)
        blen = get32(p + off)
        off += 4
        tls = 2 if magic == MAGIC_V2 else 1
        if blen < 0 or off + blen + tls > size:
            raise ValueError(f"not a record at {pos}")
        body = PyBytes_FromStringAndSize(<char*>(p + off), blen)
        off += blen
        tlen = (p[off] << 8 | p[off + 1]) if tls == 2 else p[off]
        off += tls
        if off + tlen + 2 > size:
            raise ValueError(f"not a record at {pos}")
        tkey = PyBytes_FromStringAndSize(<char*>(p + off), tlen)
        topic = topics.get(tkey)
        if topic is None:
            topic = topics[tkey] = PyUnicode_DecodeUTF8(<char*>(p + off), tlen, "replace")
        off += tlen
        plen = p[off] << 8 | p[off + 1]
        off += 2
        props = {}
        q = 0
        while q < plen and off + plen <= size:
            e = q
            while e < plen and p[off + e] != 1 and p[off + e] != 2:
                e += 1
            if e >= plen or p[off + e] != 1:
                while e < plen and p[off + e] != 2:
                    e += 1
                q = e + 1
                continue
            vs = e + 1
            while vs < plen and p[off + vs] != 2:
                vs += 1
            if e > q and vs > e + 1:
                props[PyUnicode_DecodeUTF8(<char*>(p + off + q), e - q, "replace")] = \
                    PyUnicode_DecodeUTF8(<char*>(p + off + e + 1), vs - e - 1, "replace")
            q = vs + 1
        # offset message id: hex of store host | port | phy offset
        phy = get64(p + 28)
        idlen = hex_message_id(hexbuf, p + 48 + born_len + 8, store_len, phy)
        fields = (size, magic, get32(p + 8), get32(p + 12), get32(p + 16), get64(p + 20), phy, sf, get64(p + 40),
                  born, get64(p + 48 + born_len), store, get32(p + 48 + born_len + 8 + store_len),
                  get64(p + 48 + born_len + 8 + store_len + 4), body, topic, props,
                  PyUnicode_DecodeUTF8(hexbuf, idlen, "strict"))
        out.append(tuple_new(cls, fields))  # a named tuple, without its Python __new__
        pos += size
    return out


def encode_send_response(Py_ssize_t n, str node, list groups):
    """SendResponse wire bytes. ``groups``: (entry indices, status, queue_id, first queue
    offset or -1, first phy offset, sizes, store host bytes, error) — a stored group gets
    consecutive offsets and ids, a failed one its status and error for each entry."""
    cdef list parts = [None] * n
    cdef Py_ssize_t i, j, m, idlen, elen, hl, errlen, nodelen
    cdef int status
    cdef int32_t qid
    cdef int64_t qoff, phy
    cdef bytes host, err_b
    cdef char buf[200]
    cdef char hexbuf[56]
    cdef char* w
    cdef const char* ep
    cdef list idx, sizes
    for g in groups:
        idx, status, qid, qoff, phy, sizes, host, error = g
        hl = PyBytes_GET_SIZE(host)
        err_b = (<str>error).encode("utf-8") if error else b""
        errlen = PyBytes_GET_SIZE(err_b)
        for j in range(len(idx)):
            elen = 0
            w = buf
            if status:
                w[0] = 0x08
                w = put_varint(w + 1, <uint64_t>status)
            if qoff >= 0:
                idlen = hex_message_id(hexbuf, <const uint8_t*>PyBytes_AS_STRING(host), hl, phy)
                w = put_bytes_field(w, 0x12, hexbuf, idlen)
            if qid:
                w[0] = 0x18
                w = put_varint(w + 1, <uint64_t><int64_t>qid)
            if qoff > 0:
                w[0] = 0x20
                w = put_varint(w + 1, <uint64_t>qoff)
            if qoff >= 0 and phy:
                w[0] = 0x28
                w = put_varint(w + 1, <uint64_t>phy)
            elen = w - buf
            if errlen:
                part = bytes(buf[:elen]) + b"\x32" + _varint_bytes(errlen) + err_b
            else:
                part = bytes(buf[:elen])
            parts[<Py_ssize_t>idx[j]] = b"\x0a" + _varint_bytes(len(part)) + part
            if qoff >= 0:
                phy += <int32_t>sizes[j]
                qoff += 1
    node_b = node.encode("utf-8")
    tail = (b"\x12" + _varint_bytes(len(node_b)) + node_b) if node_b else b""
    return b"".join(parts) + tail


cdef bytes _varint_bytes(uint64_t v):
    cdef char tmp[10]
    cdef char* end = put_varint(tmp, v)
    return tmp[:end - tmp]


# =================================================================================================
# records → columns (the Spark source builds Arrow arrays from these buffers without a Python
# object per row)

cdef class Buf:
    """A growable byte buffer."""
    cdef char* data
    cdef Py_ssize_t len
    cdef Py_ssize_t cap

    def __cinit__(self, Py_ssize_t cap=4096):
        self.cap = max(cap, 64)
        self.len = 0
        self.data = <char*>PyMem_Malloc(self.cap)
        if self.data == NULL:
            raise MemoryError()

    def __dealloc__(self):
        PyMem_Free(self.data)

    cdef int reserve(self, Py_ssize_t extra) except -1:
        cdef char* grown
        cdef Py_ssize_t cap = self.cap
        if self.len + extra <= cap:
            return 0
        while self.len + extra > cap:
            cap *= 2
        grown = <char*>PyMem_Realloc(self.data, cap)
        if grown == NULL:
            raise MemoryError()
        self.data = grown
        self.cap = cap
        return 0

    cdef int add(self, const void* src, Py_ssize_t n) except -1:
        self.reserve(n)
        memcpy(self.data + self.len, src, n)
        self.len += n
        return 0

    cdef int add_i32(self, int32_t v) except -1:
        self.reserve(4)
        memcpy(self.data + self.len, &v, 4)
        self.len += 4
        return 0

    def bytes(self):
        return PyBytes_FromStringAndSize(self.data, self.len)

    def __getbuffer__(self, Py_buffer* view, int flags):
        """Arrow wraps the decoded column data as it is (no copy into a bytes object)."""
        PyBuffer_FillInfo(view, self, self.data, self.len, 1, flags)

    def __releasebuffer__(self, Py_buffer* view):
        pass


cdef inline int32_t _intern(object key, dict ids, list values, object make) except -2:
    found = ids.get(key)
    if found is None:
        found = len(values)
        ids[key] = found
        values.append(make(key))
    return found


def decode_columns(const uint8_t[::1] mem, Py_ssize_t start, Py_ssize_t limit, Py_ssize_t max_records, bint queued_only,
                   int32_t[::1] queue_id, int64_t[::1] queue_offset, int64_t[::1] phy, int64_t[::1] born_ts,
                   int64_t[::1] store_ts, int32_t[::1] flag, int32_t[::1] sys_flag, int32_t[::1] reconsume,
                   int32_t[::1] store_size, int32_t[::1] topic_id, int32_t[::1] born_host, int32_t[::1] store_host,
                   uint8_t[::1] has_tags, dict topic_ids, list topics, dict host_ids, list hosts, object host_fn):
    """Decode records from ``start`` into the given arrays (capacity = their length).

    Returns (count, next_pos, stop, strings) where stop is as for :func:`scan` and strings holds
    Arrow-ready buffers: body/tags/msg_id (offsets, data), keys (list offsets, value offsets,
    data) and properties (map offsets, key offsets, key data, value offsets, value data).
    Prepared/rollback records are skipped when ``queued_only`` (they have no queue offset).
    """
    cdef Py_ssize_t pos = start, size, body_off, body_len, t_off, t_len, p_off, p_len, count = 0
    cdef Py_ssize_t cap = queue_id.shape[0], q, e, vs, i, born_len, store_len, nkeys = 0, nprops = 0, w0
    cdef const uint8_t* base = &mem[0]
    cdef const uint8_t* p
    cdef const uint8_t* pp
    cdef int rc
    cdef int32_t sf, t
    cdef str stop = "limit"
    cdef Py_ssize_t bad_size = -1
    cdef char hexbuf[56]
    cdef int64_t ph
    cdef Buf body = Buf(min(limit - start, max_records * 1200) if limit > start else 4096), body_off_b = Buf(), tags_off = Buf(), tags = Buf(), ids_off = Buf(), ids = Buf()
    cdef Buf keys_list = Buf(), keys_off = Buf(), keys = Buf(), map_off = Buf(), pk_off = Buf(), pk = Buf(), pv_off = Buf(), pv = Buf()
    cdef const uint8_t* last_topic = NULL
    cdef Py_ssize_t last_topic_len = -1
    cdef int32_t last_tid = -1
    cdef Py_ssize_t uniq_s, uniq_e, keys_s, keys_e
    if limit > mem.shape[0]:
        limit = mem.shape[0]
    body_off_b.add_i32(0)
    tags_off.add_i32(0)
    ids_off.add_i32(0)
    keys_list.add_i32(0)
    keys_off.add_i32(0)
    map_off.add_i32(0)
    pk_off.add_i32(0)
    pv_off.add_i32(0)
    while pos < limit and count < cap and count < max_records:
        p = base + pos
        rc = check_record(p, limit - pos, False, None, &size, &body_off, &body_len, &t_off, &t_len, &p_off, &p_len)
        if rc == 0:
            stop = "blank"
            break
        if rc < 0:
            stop = "bad"
            bad_size = size
            break
        sf = get32(p + 36)
        t = sf & TRANSACTION_MASK
        if queued_only and not (t == 0 or t == TRANSACTION_COMMIT):
            pos += size
            continue
        born_len = 20 if sf & FLAG_BORNHOST_V6 else 8
        store_len = 20 if sf & FLAG_STOREHOST_V6 else 8
        queue_id[count] = get32(p + 12)
        queue_offset[count] = get64(p + 20)
        ph = get64(p + 28)
        phy[count] = ph
        born_ts[count] = get64(p + 40)
        store_ts[count] = get64(p + 48 + born_len)
        flag[count] = get32(p + 16)
        sys_flag[count] = sf
        reconsume[count] = get32(p + 48 + born_len + 8 + store_len)
        store_size[count] = <int32_t>size
        if t_len == last_topic_len and memcmp(p + t_off, last_topic, t_len) == 0:
            topic_id[count] = last_tid
        else:
            last_tid = _intern(PyBytes_FromStringAndSize(<char*>(p + t_off), t_len), topic_ids, topics,
                               lambda b: b.decode("utf-8", "replace"))
            topic_id[count] = last_tid
            last_topic = p + t_off
            last_topic_len = t_len
        born_host[count] = _intern(PyBytes_FromStringAndSize(<char*>(p + 48), born_len), host_ids, hosts, host_fn)
        store_host[count] = _intern(PyBytes_FromStringAndSize(<char*>(p + 48 + born_len + 8), store_len), host_ids, hosts, host_fn)
        body.add(p + body_off, body_len)
        body_off_b.add_i32(<int32_t>body.len)
        # message id: hex of store host | port | phy offset
        w0 = hex_message_id(hexbuf, p + 48 + born_len + 8, store_len, ph)
        ids.add(hexbuf, w0)
        ids_off.add_i32(<int32_t>ids.len)
        # properties: every pair into the map; TAGS and the keys (UNIQ_KEY, then KEYS words) too
        has_tags[count] = 0
        q = 0
        pp = p + p_off
        uniq_s = -1
        uniq_e = -1
        keys_s = -1
        keys_e = -1
        while q < p_len:
            e = q
            while e < p_len and pp[e] != 1 and pp[e] != 2:
                e += 1
            if e >= p_len or pp[e] != 1:
                while e < p_len and pp[e] != 2:
                    e += 1
                q = e + 1
                continue
            vs = e + 1
            while vs < p_len and pp[vs] != 2:
                vs += 1
            if e > q and vs > e + 1:
                pk.add(pp + q, e - q)
                pk_off.add_i32(<int32_t>pk.len)
                pv.add(pp + e + 1, vs - e - 1)
                pv_off.add_i32(<int32_t>pv.len)
                nprops += 1
                if e - q == 4 and memcmp(pp + q, b"TAGS", 4) == 0:
                    tags.add(pp + e + 1, vs - e - 1)
                    has_tags[count] = 1
                elif e - q == 4 and memcmp(pp + q, b"KEYS", 4) == 0:
                    keys_s = e + 1
                    keys_e = vs
                elif e - q == 8 and memcmp(pp + q, b"UNIQ_KEY", 8) == 0:
                    uniq_s = e + 1
                    uniq_e = vs
            q = vs + 1
        tags_off.add_i32(<int32_t>tags.len)
        map_off.add_i32(<int32_t>nprops)
        if keys_s >= 0:  # the keys column holds the KEYS words (as the message's user keys)
            i = keys_s
            while i < keys_e:
                while i < keys_e and pp[i] == 32:
                    i += 1
                w0 = i
                while i < keys_e and pp[i] != 32:
                    i += 1
                if i > w0:
                    keys.add(pp + w0, i - w0)
                    keys_off.add_i32(<int32_t>keys.len)
                    nkeys += 1
        keys_list.add_i32(<int32_t>nkeys)
        count += 1
        pos += size
    strings = {
        "body": (body_off_b.bytes(), body), "tags": (tags_off.bytes(), tags.bytes()),
        "msg_id": (ids_off.bytes(), ids.bytes()), "keys": (keys_list.bytes(), keys_off.bytes(), keys.bytes()),
        "properties": (map_off.bytes(), pk_off.bytes(), pk.bytes(), pv_off.bytes(), pv.bytes()),
        "bad_size": bad_size,
    }
    return count, pos, stop, strings
