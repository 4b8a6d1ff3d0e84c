# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Compiled hot paths of the record codec (constants and shared helpers in ``_native.pxd``).

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
    cdef crc32_c crc_c = crc_pointer(crc_fn)
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
        if crc_c != NULL:
            put32(rec + 8, <int32_t>(crc_c(0, <const uint8_t*>PyBytes_AS_STRING(body), <uint32_t>blen) & 0x7FFFFFFF))
        else:
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


cdef inline int check_record(const uint8_t* p, Py_ssize_t remaining, bint check_crc, object crc_fn, crc32_c crc_c,
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
        if crc_c != NULL:
            if <int32_t>(crc_c(0, p + p_off, <uint32_t>bl) & 0x7FFFFFFF) != get32(p + 8):
                size_out[0] = -1
                return -1
        elif (crc_fn(PyMemoryView_FromMemory(<char*>(p + p_off), bl, PyBUF_READ)) & 0x7FFFFFFF) != get32(p + 8):
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
    cdef crc32_c crc_c = crc_pointer(crc_fn)
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
        rc = check_record(p, limit - pos, check_crc, crc_fn, crc_c, &size, &body_off, &body_len, &topic_off, &topic_len, &props_off, &props_len)
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
        rc = check_record(p, limit - pos, False, None, NULL, &size, &body_off, &body_len, &t_off, &t_len, &p_off, &p_len)
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
