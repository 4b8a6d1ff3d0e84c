# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Compiled transcoders of msgstore.v1's Send messages: SendRequest bytes → prepared record
batches and the SendResponse bytes (the server's hot path), OutMessage objects → SendRequest
bytes (the client's). The protobuf paths (``api/servicer.py``, ``client/client.py``) remain the
reference and the fallback; the record layout itself is the record codec's (``record/``).
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsUnsignedLongMask
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memchr, memcmp, memcpy, memset

from msgstore.record._native cimport (crc32_c, crc_pointer, FLAG_BORNHOST_V6, FLAG_STOREHOST_V6, MAGIC_V1, MAX_PROPERTIES, Prepared,
                                      hex_message_id, index_hash, put32, put64)

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL
    object PyUnicode_DecodeUTF8(const char* s, Py_ssize_t size, const char* errors)
    object PyMemoryView_FromMemory(char* mem, Py_ssize_t size, int flags)
    int PyBUF_READ


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


cdef bint _named(const uint8_t* base, Span s, tuple words, bint prefix):
    """The span is one of ``words`` (bytes), or starts with one when ``prefix``."""
    cdef bytes w
    cdef Py_ssize_t wl
    for w in words:
        wl = PyBytes_GET_SIZE(w)
        if (s.len == wl or (prefix and s.len > wl)) and memcmp(base + s.off, PyBytes_AS_STRING(w), wl) == 0:
            return True
    return False


def transcode_send(const uint8_t[::1] data, long long max_body, bytes store_host, long long now_ms, object crc_fn,
                   bytes born_host, object invalid, Py_ssize_t max_entries, tuple divert=None):
    """Validate a SendRequest and encode its entries as records, one prepared batch per
    (topic, queue). Returns (groups, wait_flush, wait_visible, request_id, entry_count) where
    groups are (topic, queue_id, Prepared, [entry indices]) and wait_flush is -1 when absent.
    Raises ``invalid(field, reason)`` naming the field as ``entries[i].<name>``.

    ``divert`` = (property names, topics, topic prefixes), each a tuple of bytes: an entry
    with such a property or topic (a delay, a transaction, a system topic) is the broker's
    to handle, and the call returns None before encoding anything (the caller takes the
    protobuf path). Names are matched where the properties are parsed: a body's content never
    changes the path."""
    cdef const uint8_t* base = &data[0] if data.shape[0] else <const uint8_t*>b""
    cdef Py_ssize_t n = data.shape[0], pos = 0, epos, eend, i, j, k, count = 0
    cdef uint64_t key, v
    cdef int wt, field, wait = -1
    cdef bint visible = False
    cdef uint64_t request_id = 0
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
        elif field == 3 and wt == 0:
            if read_varint(base, n, &pos, &v) < 0:
                raise invalid("request", "not a valid msgstore.v1.SendRequest")
            visible = v != 0
        elif field == 4 and wt == 0:
            if read_varint(base, n, &pos, &request_id) < 0:
                raise invalid("request", "not a valid msgstore.v1.SendRequest")
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
        if divert is not None:
            if _named(base, e.topic, divert[1], False) or _named(base, e.topic, divert[2], True):
                return None
            for k in range(e.props_count):
                if _named(base, ((<Prop*>props.data) + e.props_first + k).k, divert[0], False):
                    return None
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
    return groups, wait, visible, request_id, count


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
        if memchr(base + e.tags.off, 124, e.tags.len) != NULL:
            raise invalid(f"entries[{i}].tags", "must not contain '|' (a tag filter separates tags with '||'; RocketMQ refuses it too)")
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
    cdef object crc
    cdef list sizes = [], tags_codes = [], sys_flags = [], takes = [], key_hashes = [], key_owner = []
    cdef Py_ssize_t store_len = PyBytes_GET_SIZE(store_host), born_len = PyBytes_GET_SIZE(born_host)
    cdef bytes topic_b = gkey[0]
    cdef Py_ssize_t tlen = PyBytes_GET_SIZE(topic_b)
    cdef uint32_t prefix = jh_utf8(0, <const uint8_t*>PyBytes_AS_STRING(topic_b), tlen) * 31 + 35  # topic + "#"
    cdef uint32_t h
    cdef Py_ssize_t p, word_start
    cdef bint wait_flush = wait != 0
    cdef crc32_c crc_c = crc_pointer(crc_fn)
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
        if crc_c != NULL:  # zlib-ng's own function: no Python call, view or int per record
            put32(rec + 8, <int32_t>(crc_c(0, base + e.body.off, <uint32_t>e.body.len) & 0x7FFFFFFF))
        else:
            crc = crc_fn(PyMemoryView_FromMemory(<char*>(base + e.body.off), e.body.len, PyBUF_READ))
            put32(rec + 8, <int32_t>(PyLong_AsUnsignedLongMask(crc) & 0x7FFFFFFF))  # masked in C: no Python int per record
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
        tags_codes.append(e.tags_code)
        if e.uniq.len:
            key_hashes.append(index_hash(jh_utf8(prefix, base + e.uniq.off, e.uniq.len)))
            key_owner.append(idx)
        for j in range(e.keys_count):
            sp = keys[e.keys_first + j]
            key_hashes.append(index_hash(jh_utf8(prefix, base + sp.off, sp.len)))
            key_owner.append(idx)
        rec += e.size
    sys_flags = [sf] * n  # the same for every record of the request
    takes = [True] * n
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


ctypedef struct OutFields:  # what pass 1 read of one message, so pass 2 reads no attribute again
    const char* tags
    Py_ssize_t tags_len
    const char* uniq
    Py_ssize_t uniq_len
    int64_t flag
    Py_ssize_t elen


def encode_send_request(str topic, int queue_id, list messages, int wait_flush, bint wait_visible=False,
                        uint64_t request_id=0):
    """SendRequest wire bytes for OutMessage-like objects (body, key, keys, tags,
    properties, uniq_key, flag) sent to one (topic, queue).

    Pass 1 sizes every message and keeps what it read (the str objects, held here, cache their
    UTF-8); pass 2 writes. Reading every attribute twice, and a
    list of keys per message even without keys, cost half the client's time (issue 30)."""
    cdef Py_ssize_t tlen, n, total = 0, elen, klen, vlen, mlen, i, count = len(messages)
    cdef const char* tp = PyUnicode_AsUTF8AndSize(topic, &tlen)
    cdef const char* s
    cdef const char* vs
    cdef object m, body, key, keys, kk, props, k, v, tags, uniq, flag
    cdef list bodies = [None] * count
    cdef list keylists = [None] * count
    cdef list propdicts = [None] * count  # each message's properties as a list of (key, value)
    cdef list items
    cdef list held = [None] * (2 * count)  # the tags and uniq_key strs whose UTF-8 pass 2 copies
    cdef list kl
    cdef char* w
    cdef uint64_t qv = <uint64_t><int64_t>queue_id
    cdef OutFields* f
    cdef OutFields* fields = <OutFields*>PyMem_Malloc((count + 1) * sizeof(OutFields))
    if fields == NULL:
        raise MemoryError()
    try:
        # pass 1: sizes
        for i in range(count):
            m = messages[i]
            f = fields + i
            body = m.body
            if type(body) is not bytes:
                body = bytes(body)
            bodies[i] = body
            elen = str_field_len(tlen) + (1 + varint_len(qv) if queue_id else 0) + str_field_len(PyBytes_GET_SIZE(body))
            tags = m.tags
            f.tags_len = 0
            if tags:
                held[2 * i] = tags  # alive until written, even if an attribute made it afresh
                f.tags = PyUnicode_AsUTF8AndSize(tags, &f.tags_len)
                elen += str_field_len(f.tags_len)
            keys = m.keys
            key = m.key
            if keys or key:
                kl = list(keys) if keys else []
                if key:
                    kl.append(key)
                keylists[i] = kl
                for kk in kl:
                    PyUnicode_AsUTF8AndSize(kk, &n)
                    elen += 1 + varint_len(n) + n
            uniq = m.uniq_key
            f.uniq_len = 0
            if uniq:
                held[2 * i + 1] = uniq
                f.uniq = PyUnicode_AsUTF8AndSize(uniq, &f.uniq_len)
                elen += str_field_len(f.uniq_len)
            props = m.properties
            if props:
                items = list(props.items())  # a snapshot: pass 2 writes exactly what was sized
                propdicts[i] = items
                for k, v in items:
                    PyUnicode_AsUTF8AndSize(k, &klen)
                    PyUnicode_AsUTF8AndSize(v, &vlen)
                    mlen = str_field_len(klen) + str_field_len(vlen)
                    elen += 1 + varint_len(mlen) + mlen
            flag = m.flag
            f.flag = <int64_t>flag if flag else 0
            if f.flag:
                elen += 1 + varint_len(<uint64_t>f.flag)
            f.elen = elen
            total += 1 + varint_len(elen) + elen
        if wait_flush >= 0:
            total += 2
        if wait_visible:
            total += 2
        if request_id:
            total += 1 + varint_len(request_id)
        out = PyBytes_FromStringAndSize(NULL, total)
        w = PyBytes_AS_STRING(out)
        # pass 2: the bytes
        for i in range(count):
            f = fields + i
            body = bodies[i]
            w[0] = 0x0A
            w = put_varint(w + 1, <uint64_t>f.elen)
            w = put_bytes_field(w, 0x0A, tp, tlen)
            if queue_id:
                w[0] = 0x10
                w = put_varint(w + 1, qv)
            w = put_bytes_field(w, 0x1A, PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body))
            if f.tags_len:
                w = put_bytes_field(w, 0x22, f.tags, f.tags_len)
            if keylists[i] is not None:
                for kk in <list>keylists[i]:
                    s = PyUnicode_AsUTF8AndSize(kk, &n)
                    w[0] = 0x2A
                    w = put_varint(w + 1, n)
                    memcpy(w, s, n)
                    w += n
            if f.uniq_len:
                w = put_bytes_field(w, 0x32, f.uniq, f.uniq_len)
            items = propdicts[i]
            if items is not None:
                for k, v in items:
                    s = PyUnicode_AsUTF8AndSize(k, &klen)
                    vs = PyUnicode_AsUTF8AndSize(v, &vlen)
                    mlen = str_field_len(klen) + str_field_len(vlen)
                    w[0] = 0x3A
                    w = put_varint(w + 1, mlen)
                    w = put_bytes_field(w, 0x0A, s, klen)
                    w = put_bytes_field(w, 0x12, vs, vlen)
            if f.flag:
                w[0] = 0x40
                w = put_varint(w + 1, <uint64_t>f.flag)
        if wait_flush >= 0:
            w[0] = 0x10
            w[1] = 1 if wait_flush else 0
            w += 2
        if wait_visible:
            w[0] = 0x18
            w[1] = 1
            w += 2
        if request_id:
            w[0] = 0x20
            w = put_varint(w + 1, request_id)
        if w != PyBytes_AS_STRING(out) + total:  # cannot happen with the snapshots above; a guard, not a path
            raise RuntimeError(f"encode_send_request: wrote {w - PyBytes_AS_STRING(out)} bytes of {total}")
        return out
    finally:
        PyMem_Free(fields)


def encode_send_response(Py_ssize_t n, str node, list groups, uint64_t request_id=0):
    """SendResponse wire bytes. ``groups``: (entry indices, status, queue_id, first queue
    offset or -1, first phy offset, sizes, store host bytes, error) — a stored group gets
    consecutive offsets and ids, a failed one its status and error for each entry.

    Results are written into one scratch buffer in group order and copied out in request
    order: a bytes object per result made a 500-message answer cost ~250 µs (issue 30)."""
    cdef Py_ssize_t i, j, k, m, idlen, body, elen, hl, errlen, cap = 0, used = 0, total = 0
    cdef int status
    cdef int32_t qid
    cdef int64_t qoff, phy
    cdef bytes host, err_b
    cdef char buf[200]
    cdef char hexbuf[56]
    cdef char* w
    cdef char* scratch = NULL
    cdef char* out
    cdef Py_ssize_t* spans = NULL  # (start, length) of each result's field in scratch, by request index
    cdef list idx, sizes
    for g in groups:
        err = g[7]
        cap += len(g[0]) * (16 + sizeof(buf) + (len((<str>err).encode("utf-8")) if err else 0))
    spans = <Py_ssize_t*>PyMem_Malloc((2 * n + 1) * sizeof(Py_ssize_t))
    scratch = <char*>PyMem_Malloc(cap + 1)
    if spans == NULL or scratch == NULL:
        PyMem_Free(spans)
        PyMem_Free(scratch)
        raise MemoryError()
    try:
        for i in range(2 * n):
            spans[i] = -1
        for g in groups:
            idx, status, qid, qoff, phy, sizes, host, error = g
            hl = PyBytes_GET_SIZE(host)
            err_b = (<str>error).encode("utf-8") if error else b""
            errlen = PyBytes_GET_SIZE(err_b)
            m = len(idx)
            if qoff >= 0 and len(sizes) < m:
                raise ValueError("encode_send_response: fewer sizes than entries")
            for j in range(m):
                k = <Py_ssize_t>idx[j]
                if k < 0 or k >= n:
                    raise IndexError(f"encode_send_response: entry index {k} outside 0..{n - 1}")
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
                body = w - buf
                elen = body + (1 + varint_len(<uint64_t>errlen) + errlen if errlen else 0)
                spans[2 * k] = used
                w = scratch + used
                w[0] = 0x0a
                w = put_varint(w + 1, <uint64_t>elen)
                memcpy(w, buf, body)
                w += body
                if errlen:
                    w[0] = 0x32
                    w = put_varint(w + 1, <uint64_t>errlen)
                    memcpy(w, PyBytes_AS_STRING(err_b), errlen)
                    w += errlen
                spans[2 * k + 1] = (w - scratch) - used
                used = w - scratch
                if qoff >= 0:
                    phy += <int32_t>sizes[j]
                    qoff += 1
        for i in range(n):
            if spans[2 * i] < 0:
                raise ValueError(f"encode_send_response: no result for entry {i}")
            total += spans[2 * i + 1]
        node_b = node.encode("utf-8")
        tail = (b"\x12" + _varint_bytes(len(node_b)) + node_b) if node_b else b""
        if request_id:
            tail += b"\x18" + _varint_bytes(request_id)
        result = PyBytes_FromStringAndSize(NULL, total + len(tail))
        out = PyBytes_AS_STRING(result)
        for i in range(n):
            memcpy(out, scratch + spans[2 * i], spans[2 * i + 1])
            out += spans[2 * i + 1]
        memcpy(out, PyBytes_AS_STRING(tail), len(tail))
        return result
    finally:
        PyMem_Free(spans)
        PyMem_Free(scratch)


cdef bytes _varint_bytes(uint64_t v):
    cdef char tmp[10]
    cdef char* end = put_varint(tmp, v)
    return tmp[:end - tmp]
