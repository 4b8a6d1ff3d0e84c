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
from libc.string cimport memchr, memcpy, memcmp

cdef extern from "Python.h":
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
