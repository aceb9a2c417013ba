# cython: language_level=3, boundscheck=False, wraparound=False
"""Cython wrapper over src_c/: conversion and memory ownership only, no algorithm.

Each matcher keeps a Python list indexed by binding id (the C core hands out small dense ids
and reuses them after removal) so that results come back as the original ``str`` objects.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeASCII
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy

import gc

from rtroute.core.keys import MAX_BINDING_BYTES, MAX_QUERY_BYTES, encode_key

GC_PAUSE_MIN_QUERIES = 256  # batches at least this large build their results with gc paused
cdef enum:
    PREFETCH_QUERIES = 8  # how far ahead _collect_batch touches key objects

cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define rt_prefetch(p) __builtin_prefetch(p)
    #else
    #define rt_prefetch(p) ((void)(p))
    #endif
    #define rt_list_item(list, i) ((void *)PyList_GET_ITEM((list), (i)))
    """
    void rt_prefetch(void *p)
    void *rt_list_item(list items, Py_ssize_t i)


cdef extern from "rtroute.h":
    ctypedef struct rt_matcher:
        pass
    ctypedef struct rt_ids:
        uint32_t *ids
        size_t len
        size_t cap
    ctypedef enum rt_kind:
        RT_REVERSE
        RT_FORWARD
    ctypedef enum rt_direction:
        RT_AUTO
        RT_DIR_FORWARD
        RT_DIR_REVERSED
    int RT_OK, RT_ENOMEM, RT_ETOOLONG, RT_EINVAL

    void rt_ids_init(rt_ids *out)
    void rt_ids_free(rt_ids *out)
    int rt_ids_sort(rt_ids *out, size_t start, size_t end)
    rt_matcher *rt_matcher_new(rt_kind kind)
    void rt_matcher_free(rt_matcher *m)
    int rt_add(rt_matcher *m, const char *key, size_t len, uint32_t *id)
    int rt_remove(rt_matcher *m, const char *key, size_t len, uint32_t *id)
    int rt_find(const rt_matcher *m, const char *key, size_t len, uint32_t *id)
    size_t rt_count(const rt_matcher *m)
    size_t rt_memory(const rt_matcher *m)
    int rt_compact(rt_matcher *m)
    long rt_match(rt_matcher *m, const char *q, size_t len, rt_ids *out)
    long rt_match_dir(rt_matcher *m, const char *q, size_t len, rt_direction d, rt_ids *out)
    int rt_match_batch(rt_matcher *m, const char *buf, const size_t *offs, size_t n,
                       rt_ids *out, size_t *res_offs)
    long rt_match_union(rt_matcher *m, const char *buf, const size_t *offs, size_t n,
                        rt_ids *out)


cdef extern from "reach.h":
    ctypedef struct rt_reach:
        pass
    ctypedef struct rt_plan_stats:
        size_t matched
        size_t destinations
        size_t skipped
    rt_reach *rt_reach_new()
    void rt_reach_free(rt_reach *r)
    int rt_reach_add(rt_reach *r, uint32_t key, uint32_t dest)
    int rt_reach_remove(rt_reach *r, uint32_t key, uint32_t dest)
    size_t rt_reach_count(const rt_reach *r, uint32_t key)
    size_t rt_reach_memory(const rt_reach *r)
    long rt_reach_dests(const rt_reach *r, uint32_t key, rt_ids *out)
    long rt_plan(rt_matcher *m, rt_reach *r, const char *buf, const size_t *offs, size_t n,
                 size_t n_literal, rt_ids *out, rt_ids *matched, rt_plan_stats *stats)


cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object text, Py_ssize_t *size) except NULL


DIRECTIONS = {"auto": RT_AUTO, "forward": RT_DIR_FORWARD, "reversed": RT_DIR_REVERSED}


cdef const char *_utf8(object key, Py_ssize_t *size, size_t limit, str what) except NULL:
    """Borrows the UTF-8 bytes of a str (cached by CPython; valid while ``key`` lives)."""
    cdef const char *data
    try:
        data = PyUnicode_AsUTF8AndSize(key, size)
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} is not valid UTF-8: {exc.reason} at {exc.start}") from None
    if <size_t>size[0] > limit:
        raise ValueError(f"{what} is {size[0]} bytes long; the limit is {limit}")
    return data


cdef int _check(long rc) except -1:
    if rc >= 0:
        return 0
    if rc == RT_ENOMEM:
        raise MemoryError("rtroute core: out of memory")
    if rc == RT_ETOOLONG:
        raise ValueError("key too long")
    raise ValueError(f"rtroute core: invalid argument ({rc})")


cdef class _Matcher:
    cdef rt_matcher *_m
    cdef list _keys
    cdef rt_ids _out

    def __cinit__(self, *args, **kwargs):
        self._m = NULL
        self._keys = []
        rt_ids_init(&self._out)

    def __dealloc__(self):
        rt_matcher_free(self._m)
        rt_ids_free(&self._out)

    cdef _new(self, rt_kind kind):
        self._m = rt_matcher_new(kind)
        if self._m == NULL:
            raise MemoryError("rtroute core: out of memory")

    def add(self, key):
        """Adds a binding key; returns False if it was already present."""
        cdef bytes raw = encode_key(key, MAX_BINDING_BYTES, "binding key")
        cdef uint32_t ident = 0
        cdef int rc = rt_add(self._m, raw, len(raw), &ident)
        _check(rc)
        if rc == 1:
            self._remember(ident, key, raw)
        return rc == 1

    cdef int _remember(self, uint32_t ident, object key, bytes raw) except -1:
        """``key`` is the binding key of id ``ident`` now (results come back as this str)."""
        if ident >= len(self._keys):
            self._keys.extend([None] * (ident + 1 - len(self._keys)))
        self._keys[ident] = key if isinstance(key, str) else raw.decode("utf-8")
        return 0

    def remove(self, key):
        """Removes a binding key; returns False if it was absent."""
        cdef bytes raw = encode_key(key, MAX_BINDING_BYTES, "binding key")
        cdef uint32_t ident = 0
        cdef int rc = rt_remove(self._m, raw, len(raw), &ident)
        _check(rc)
        if rc == 1:
            self._keys[ident] = None
        return rc == 1

    def __contains__(self, key):
        if not isinstance(key, str):
            return False
        try:
            raw = encode_key(key, MAX_BINDING_BYTES, "binding key")
        except ValueError:
            return False
        cdef uint32_t ident = 0
        return rt_find(self._m, raw, len(raw), &ident) == 1

    def __len__(self):
        return rt_count(self._m)

    def __iter__(self):
        return iter([k for k in self._keys if k is not None])

    def compact(self):
        """Rewrites the tries in walk order after a bulk load (ids unchanged): broad matches
        get faster and memory freed by removals returns to the system."""
        _check(rt_compact(self._m))

    def memory(self):
        """Bytes held by the C tries, interner and tables (not the Python key list)."""
        return rt_memory(self._m)

    cdef list _collect(self, size_t start, size_t end):
        cdef list keys = self._keys
        cdef uint32_t *ids
        if end - start > 256:
            # ids follow the allocation order of the key objects: sorted, the reads below are
            # sequential instead of one cache miss per result (~290 -> ~35 ns at 1M keys).
            # Out of memory here only costs speed, so its result is not checked.
            rt_ids_sort(&self._out, start, end)
        ids = self._out.ids
        return [keys[ids[i]] for i in range(start, end)]

    cdef list _collect_batch(self, size_t *res, size_t n):
        """One result list per query of a batch (query ``i`` owns ``res[i]..res[i+1]``)."""
        cdef list keys = self._keys
        cdef list out = [None] * n
        cdef size_t i, start, end, ahead, total = res[n]
        for i in range(n):
            # Each key object sits in its own cache line somewhere in memory: touch the one a
            # few queries ahead now, so that its reference count is in cache when needed.
            ahead = res[i + PREFETCH_QUERIES if i + PREFETCH_QUERIES < n else n]
            if ahead < total:
                rt_prefetch(rt_list_item(keys, self._out.ids[ahead]))
            start = res[i]
            end = res[i + 1]
            if end - start == 1:
                out[i] = [keys[self._out.ids[start]]]
            else:
                out[i] = self._collect(start, end)
        return out

    def match(self, query):
        """Returns every binding key matching ``query``, each once."""
        return self.match_dir(query, "auto")

    def match_dir(self, query, direction="auto"):
        """As match(), forcing the trie walked: "auto", "forward" or "reversed"."""
        cdef Py_ssize_t size
        cdef const char *data
        if type(query) is not str:
            query = encode_key(query, MAX_QUERY_BYTES, "routing key").decode("utf-8")
        data = _utf8(query, &size, MAX_QUERY_BYTES, "routing key")
        self._out.len = 0
        _check(rt_match_dir(self._m, data, size, DIRECTIONS[direction], &self._out))
        return self._collect(0, self._out.len)

    cdef char *_pack(self, list queries, size_t *offs) except NULL:
        """Concatenates the UTF-8 of ``queries`` into a malloc'd buffer (the caller frees it);
        ``offs`` receives the n+1 boundaries."""
        cdef size_t n = len(queries)
        cdef size_t i, pos = 0
        cdef Py_ssize_t size
        cdef const char **data = <const char **>malloc((n + 1) * sizeof(char *))
        cdef char *buf
        cdef list keep = []
        if data == NULL:
            raise MemoryError("rtroute core: out of memory")
        try:
            offs[0] = 0
            for i in range(n):
                q = queries[i]
                if type(q) is not str:
                    q = encode_key(q, MAX_QUERY_BYTES, "routing key").decode("utf-8")
                    keep.append(q)
                data[i] = _utf8(q, &size, MAX_QUERY_BYTES, "routing key")
                pos += size
                offs[i + 1] = pos
            buf = <char *>malloc(pos + 1)
            if buf == NULL:
                raise MemoryError("rtroute core: out of memory")
            for i in range(n):
                memcpy(buf + offs[i], data[i], offs[i + 1] - offs[i])
            return buf
        finally:
            free(data)

    def match_many(self, queries):
        """Returns, for each query, the binding keys matching it (one C call for all)."""
        cdef list qs = list(queries)
        cdef size_t n = len(qs)
        cdef size_t *offs = <size_t *>malloc((n + 1) * sizeof(size_t))
        cdef size_t *res = <size_t *>malloc((n + 1) * sizeof(size_t))
        cdef char *buf = NULL
        cdef size_t i
        if offs == NULL or res == NULL:
            free(offs)
            free(res)
            raise MemoryError("rtroute core: out of memory")
        try:
            buf = self._pack(qs, offs)
            self._out.len = 0
            _check(rt_match_batch(self._m, buf, offs, n, &self._out, res))
            if n < GC_PAUSE_MIN_QUERIES or not gc.isenabled():
                return self._collect_batch(res, n)
            # One new list per query would run the cyclic collector every 700 of them, and its
            # older generations walk every object the process holds (the 1M binding keys
            # included): that was half the cost of a batch of exact queries. The lists hold
            # only str, so they can form no cycle; no Python code runs in between.
            gc.disable()
            try:
                return self._collect_batch(res, n)
            finally:
                gc.enable()
        finally:
            free(buf)
            free(offs)
            free(res)

    def match_union(self, queries):
        """Returns the binding keys matching any of ``queries``, each once."""
        cdef list qs = list(queries)
        cdef size_t n = len(qs)
        cdef size_t *offs = <size_t *>malloc((n + 1) * sizeof(size_t))
        cdef char *buf = NULL
        if offs == NULL:
            raise MemoryError("rtroute core: out of memory")
        try:
            buf = self._pack(qs, offs)
            self._out.len = 0
            _check(rt_match_union(self._m, buf, offs, n, &self._out))
            return self._collect(0, self._out.len)
        finally:
            free(buf)
            free(offs)


cdef class ReverseMatcher(_Matcher):
    """x-rtopic: concrete binding keys; ``*`` and ``#`` in the query."""

    def __cinit__(self, *args, **kwargs):
        self._new(RT_REVERSE)


cdef class ForwardMatcher(_Matcher):
    """RabbitMQ's topic exchange: ``*`` and ``#`` in the binding key; a concrete query."""

    def __cinit__(self, *args, **kwargs):
        self._new(RT_FORWARD)


cdef class RTopicTable(_Matcher):
    """An x-rtopic exchange's bindings (binding key -> destinations) and the delivery planner
    of src_c/reach.h: :meth:`plan` matches a publish's keys and picks at most one binding key
    per destination reached, in one C call. Destinations are any hashable objects."""
    cdef rt_reach *_r
    cdef dict _dest_ids
    cdef list _dests
    cdef list _dest_refs
    cdef list _free_dests
    cdef rt_ids _chosen
    cdef rt_ids _matched
    cdef rt_ids _listed
    cdef size_t _bindings

    def __cinit__(self, *args, **kwargs):
        self._new(RT_REVERSE)
        self._r = rt_reach_new()
        if self._r == NULL:
            raise MemoryError("rtroute core: out of memory")
        self._dest_ids = {}
        self._dests = []
        self._dest_refs = []
        self._free_dests = []
        self._bindings = 0
        rt_ids_init(&self._chosen)
        rt_ids_init(&self._matched)
        rt_ids_init(&self._listed)

    def __dealloc__(self):
        rt_reach_free(self._r)
        rt_ids_free(&self._chosen)
        rt_ids_free(&self._matched)
        rt_ids_free(&self._listed)

    def bind(self, destination, key):
        """Binds ``destination`` with ``key``; returns False if it was bound so already."""
        cdef bytes raw = encode_key(key, MAX_BINDING_BYTES, "binding key")
        cdef uint32_t ident = 0, dest
        cdef int rc = rt_add(self._m, raw, len(raw), &ident)
        _check(rc)
        if rc == 1:
            self._remember(ident, key, raw)
        dest = self._dest_id(destination)
        rc = rt_reach_add(self._r, ident, dest)
        if rc <= 0:
            self._dest_release(dest)
            if rc < 0:
                self._drop_if_unbound(raw, ident)
                _check(rc)
            return False
        self._bindings += 1
        return True

    def unbind(self, destination, key):
        """Removes one binding; returns False if it was not known."""
        cdef bytes raw
        cdef uint32_t ident = 0, dest
        dest_obj = self._dest_ids.get(destination)
        if dest_obj is None or not isinstance(key, str):
            return False
        try:
            raw = encode_key(key, MAX_BINDING_BYTES, "binding key")
        except ValueError:
            return False
        if rt_find(self._m, raw, len(raw), &ident) != 1:
            return False
        dest = dest_obj
        if rt_reach_remove(self._r, ident, dest) != 1:
            return False
        self._bindings -= 1
        self._dest_release(dest)
        self._drop_if_unbound(raw, ident)
        return True

    cdef void _drop_if_unbound(self, bytes raw, uint32_t ident):
        if rt_reach_count(self._r, ident) == 0 and rt_remove(self._m, raw, len(raw), &ident) == 1:
            self._keys[ident] = None

    cdef uint32_t _dest_id(self, destination) except? 0xffffffff:
        dest = self._dest_ids.get(destination)
        if dest is None:
            if self._free_dests:
                dest = self._free_dests.pop()
                self._dests[dest] = destination
                self._dest_refs[dest] = 0
            else:
                dest = len(self._dests)
                self._dests.append(destination)
                self._dest_refs.append(0)
            self._dest_ids[destination] = dest
        self._dest_refs[dest] += 1
        return dest

    cdef void _dest_release(self, uint32_t dest):
        self._dest_refs[dest] -= 1
        if self._dest_refs[dest] == 0:
            del self._dest_ids[self._dests[dest]]
            self._dests[dest] = None
            self._free_dests.append(dest)

    def binding_count(self):
        """How many (destination, key) bindings are known."""
        return self._bindings

    def destinations(self, key):
        """The destinations bound with exactly ``key`` (a list; empty if none)."""
        cdef bytes raw
        cdef uint32_t ident = 0
        if not isinstance(key, str):
            return []
        try:
            raw = encode_key(key, MAX_BINDING_BYTES, "binding key")
        except ValueError:
            return []
        if rt_find(self._m, raw, len(raw), &ident) != 1:
            return []
        return self._dests_of(ident)

    cdef list _dests_of(self, uint32_t ident):
        cdef size_t i
        cdef list dests = self._dests
        self._listed.len = 0
        _check(rt_reach_dests(self._r, ident, &self._listed))
        return [dests[self._listed.ids[i]] for i in range(self._listed.len)]

    def items(self):
        """Every ``(destination, key)`` binding (a list, in no order)."""
        cdef list found = []
        cdef uint32_t ident
        for ident, key in enumerate(self._keys):
            if key is not None:
                for dest in self._dests_of(ident):
                    found.append((dest, key))
        return found

    def reach_memory(self):
        """Bytes held by the planner's index (beside :meth:`memory`, the tries')."""
        return rt_reach_memory(self._r)

    def plan(self, queries, Py_ssize_t n_literal, bint want_matched=False):
        """Plans one publish whose keys are ``queries`` (the routing key, the CC entries, then
        the BCC entries; the first ``n_literal`` are routed by RabbitMQ on every republish).

        Returns ``(keys, matched, destinations, skipped)``: at most one binding key per
        destination reached that the literal keys do not reach, which together reach exactly
        those (sorted); the distinct keys matched (a list when ``want_matched``, else their
        number); the destinations reached; how many of them the literal keys reach.
        """
        cdef list qs = list(queries)
        cdef size_t n = len(qs)
        cdef size_t *offs
        cdef char *buf = NULL
        cdef rt_plan_stats stats
        cdef list keys = self._keys
        cdef size_t i
        if n_literal < 0 or <size_t>n_literal > n:
            raise ValueError("n_literal must be between 0 and the number of queries")
        offs = <size_t *>malloc((n + 1) * sizeof(size_t))
        if offs == NULL:
            raise MemoryError("rtroute core: out of memory")
        try:
            buf = self._pack(qs, offs)
            self._chosen.len = 0
            self._matched.len = 0
            _check(rt_plan(self._m, self._r, buf, offs, n, n_literal, &self._chosen,
                           &self._matched if want_matched else NULL, &stats))
        finally:
            free(buf)
            free(offs)
        chosen = sorted([keys[self._chosen.ids[i]] for i in range(self._chosen.len)])
        if want_matched:
            matched = [keys[self._matched.ids[i]] for i in range(self._matched.len)]
        else:
            matched = stats.matched
        return chosen, matched, stats.destinations, stats.skipped


cdef extern from "amqp_frames.h":
    ctypedef struct rt_scan_rules:
        const uint32_t *methods
        size_t n_methods
        const uint16_t *channels
        size_t n_channels
        uint64_t limit
        int check_end
    ctypedef struct rt_frame:
        size_t start, end
        uint32_t method
        uint16_t channel
        uint8_t type
        size_t name_start, name_end, header_end, content_end
    int rt_frame_scan(const uint8_t *buf, size_t len, size_t pos, const rt_scan_rules *rules,
                      rt_frame *out)
    size_t rt_frame_repeats(const uint8_t *buf, size_t len, size_t pos, const uint8_t *head,
                            size_t head_len, const uint8_t *rep, size_t rep_len,
                            const rt_scan_rules *rules, uint8_t *out, size_t *count,
                            size_t *out_len)
    size_t rt_frame_renames(const uint8_t *buf, size_t len, size_t pos, uint16_t channel,
                            const uint8_t *name, size_t name_len, const uint8_t *rep,
                            size_t rep_len, size_t max, const rt_scan_rules *rules,
                            uint8_t *out, size_t *count, size_t *out_len)
    size_t rt_frame_deliveries(const uint8_t *buf, size_t len, size_t pos, uint16_t channel,
                               const rt_scan_rules *rules, size_t *at, size_t max,
                               size_t *count)

cdef enum:
    MAX_STOP_METHODS = 32
    STACK_CHANNELS = 16
    DELIVERIES_PER_CALL = 256


cdef class FrameScanner:
    """Finds the next AMQP frame a proxy must look at (see :mod:`rtroute.core.frames`).

    Args:
        methods: the method ids (``class << 16 | method``) whose frames stop a scan.
        check_end: every frame must end with 0xCE (a client's), else the scan says so.
    """
    cdef uint32_t _methods[MAX_STOP_METHODS]
    cdef size_t _n_methods
    cdef int _check_end

    def __init__(self, methods, bint check_end=False):
        cdef list ids = list(methods)
        if len(ids) > MAX_STOP_METHODS:
            raise ValueError(f"at most {MAX_STOP_METHODS} stop methods")
        for i, method in enumerate(ids):
            self._methods[i] = method
        self._n_methods = len(ids)
        self._check_end = check_end

    cdef rt_scan_rules _any_frame(self, Py_ssize_t limit):
        """The rules of a call that stops at no method and on no channel of its own: ``limit``
        and the check of each frame's end only."""
        cdef rt_scan_rules rules
        rules.methods = NULL
        rules.n_methods = 0
        rules.channels = NULL
        rules.n_channels = 0
        rules.limit = limit
        rules.check_end = self._check_end
        return rules

    def scan(self, buf, Py_ssize_t pos, Py_ssize_t limit, tuple channels):
        """Scans the frames of ``buf`` (bytes-like) from ``pos``; ``limit``: the largest frame
        (0: any); a frame on one of ``channels`` stops the scan too.

        Returns ``(result, start, end, type, channel, method, name, header_end, content_end,
        head)``: ``result`` 1 (stop at the frame ``buf[start:end]``), 0 (none: ``start`` is
        where the incomplete rest begins), -1 (the frame at ``start`` announces more than
        ``limit``; it would end at ``end``) or -2 (the frame ``buf[start:end]`` does not end
        with 0xCE); ``type``, ``channel``, ``method``, ``header_end`` and ``content_end`` as
        ``rt_frame`` says; for a ``basic.publish``, ``name`` is its exchange name (None when
        its fields do not lie within it) and ``head`` (when its content follows, complete)
        ``buf[start:header_end]``, the publish frame and the content header frame, both as
        ``bytes``, else None.
        """
        cdef Py_buffer view
        cdef rt_scan_rules rules
        cdef rt_frame frame
        cdef uint16_t stack[STACK_CHANNELS]
        cdef uint16_t *watched = stack
        cdef Py_ssize_t n = len(channels), i
        cdef int result
        cdef const char *data
        cdef object name = None, head = None
        if pos < 0 or limit < 0:
            raise ValueError("pos and limit must not be negative")
        if n > STACK_CHANNELS:
            watched = <uint16_t *>malloc(n * sizeof(uint16_t))
            if watched == NULL:
                raise MemoryError("rtroute core: out of memory")
        try:
            for i in range(n):
                watched[i] = channels[i]
            rules.methods = self._methods
            rules.n_methods = self._n_methods
            rules.channels = watched
            rules.n_channels = n
            rules.limit = limit
            rules.check_end = self._check_end
            PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
            try:
                data = <const char *>view.buf
                result = rt_frame_scan(<const uint8_t *>data, view.len, pos, &rules, &frame)
                if frame.name_end:
                    name = PyBytes_FromStringAndSize(data + frame.name_start,
                                                     frame.name_end - frame.name_start)
                if frame.content_end:
                    head = PyBytes_FromStringAndSize(data + frame.start,
                                                     frame.header_end - frame.start)
            finally:
                PyBuffer_Release(&view)
        finally:
            if watched != stack:
                free(watched)
        return (result, frame.start, frame.end, frame.type, frame.channel, frame.method, name,
                frame.header_end, frame.content_end, head)

    def repeats(self, buf, Py_ssize_t pos, Py_ssize_t limit, bytes head not None,
                bytes replacement not None):
        """The messages of ``buf`` from ``pos`` that repeat the one whose publish and content
        header frames are ``head`` (see ``rt_frame_repeats``), each with ``head`` replaced
        by ``replacement``: ``(end, count, data)``, ``data`` the bytes of the run rewritten
        (``b""`` and ``end == pos`` when there is none); ``limit`` as :meth:`scan`'s."""
        cdef Py_buffer view
        cdef rt_scan_rules rules
        cdef size_t count = 0, size = 0, end
        cdef object data = b""
        if pos < 0 or limit < 0:
            raise ValueError("pos and limit must not be negative")
        rules = self._any_frame(limit)
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            end = rt_frame_repeats(<const uint8_t *>view.buf, view.len, pos,
                                   <const uint8_t *><const char *>head, len(head),
                                   <const uint8_t *><const char *>replacement, len(replacement),
                                   &rules, NULL, &count, &size)
            if count:
                data = PyBytes_FromStringAndSize(NULL, size)
                rt_frame_repeats(<const uint8_t *>view.buf, view.len, pos,
                                 <const uint8_t *><const char *>head, len(head),
                                 <const uint8_t *><const char *>replacement, len(replacement),
                                 &rules, <uint8_t *>PyBytes_AS_STRING(data), &count, &size)
        finally:
            PyBuffer_Release(&view)
        return end, count, data

    def renames(self, buf, Py_ssize_t pos, Py_ssize_t limit, uint16_t channel,
                bytes name not None, bytes replacement not None, Py_ssize_t most):
        """The publishes of ``buf`` from ``pos`` on ``channel`` to exchange ``name`` with a
        routing key free of ``*`` and ``#`` and content without headers (see
        ``rt_frame_renames``), at most ``most``, each renamed to the exchange
        ``replacement`` (a short string, length octet included): ``(end, count, data)``
        (``b""`` and ``end == pos`` when there is none); ``limit`` as :meth:`scan`'s."""
        cdef Py_buffer view
        cdef rt_scan_rules rules
        cdef size_t count = 0, size = 0, end
        cdef object data = b""
        if pos < 0 or limit < 0 or most < 0:
            raise ValueError("pos, limit and most must not be negative")
        rules = self._any_frame(limit)
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            if pos > view.len:
                return pos, 0, data
            end = rt_frame_renames(<const uint8_t *>view.buf, view.len, pos, channel,
                                   <const uint8_t *><const char *>name, len(name),
                                   <const uint8_t *><const char *>replacement,
                                   len(replacement), most, &rules, NULL, &count, &size)
            if count:
                data = PyBytes_FromStringAndSize(NULL, size)
                rt_frame_renames(<const uint8_t *>view.buf, view.len, pos, channel,
                                 <const uint8_t *><const char *>name, len(name),
                                 <const uint8_t *><const char *>replacement,
                                 len(replacement), count, &rules,
                                 <uint8_t *>PyBytes_AS_STRING(data), &count, &size)
        finally:
            PyBuffer_Release(&view)
        return end, count, data

    def deliveries(self, buf, Py_ssize_t pos, Py_ssize_t limit, uint16_t channel):
        """The run of whole deliveries of ``buf`` from ``pos`` on ``channel`` (see
        ``rt_frame_deliveries``; at most 256 a call): ``(end, deliveries)``, each delivery
        ``(delivery tag, exchange, routing key, consumer tag, redelivered, parts, end)``:
        the exchange and routing key as short strings (length octet included), the consumer
        tag decoded as UTF-8 (errors replaced), ``parts`` the content header frame and the
        body frames as received, ``end`` where its last frame ends; ``limit`` as
        :meth:`scan`'s."""
        cdef Py_buffer view
        cdef rt_scan_rules rules
        cdef size_t at[2 * DELIVERIES_PER_CALL]
        cdef size_t count = 0, end, i, start, stop, field, tag_at, exchange_at, key_at, key_end
        cdef size_t frame_end
        cdef const uint8_t *d
        cdef uint64_t tag
        cdef list out = [], parts
        cdef int k
        if pos < 0 or limit < 0:
            raise ValueError("pos and limit must not be negative")
        rules = self._any_frame(limit)
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            if pos > view.len:
                return pos, out
            d = <const uint8_t *>view.buf
            end = rt_frame_deliveries(d, view.len, pos, channel, &rules, at,
                                      DELIVERIES_PER_CALL, &count)
            for i in range(count):
                start = at[2 * i]
                stop = at[2 * i + 1]
                field = start + 11  # the consumer tag (the frame's fields were checked)
                tag_at = field + 1 + d[field]
                tag = 0
                for k in range(8):
                    tag = tag << 8 | d[tag_at + k]
                exchange_at = tag_at + 9
                key_at = exchange_at + 1 + d[exchange_at]
                key_end = key_at + 1 + d[key_at]
                frame_end = start + 8 + (<size_t>d[start + 3] << 24 | <size_t>d[start + 4] << 16
                                         | <size_t>d[start + 5] << 8 | d[start + 6])
                parts = []
                while frame_end < stop:  # the header frame, then the body frames
                    field = frame_end + 8 + (<size_t>d[frame_end + 3] << 24
                                             | <size_t>d[frame_end + 4] << 16
                                             | <size_t>d[frame_end + 5] << 8 | d[frame_end + 6])
                    parts.append(PyBytes_FromStringAndSize(<const char *>d + frame_end,
                                                           field - frame_end))
                    frame_end = field
                out.append((tag,
                            PyBytes_FromStringAndSize(<const char *>d + exchange_at,
                                                      key_at - exchange_at),
                            PyBytes_FromStringAndSize(<const char *>d + key_at, key_end - key_at),
                            (<const char *>d)[start + 12:tag_at].decode("utf-8", "replace"),
                            bool(d[tag_at + 8] & 1), parts, stop))
        finally:
            PyBuffer_Release(&view)
        return end, out


cdef extern from "amqp_headers.h":
    ctypedef struct rt_span:
        size_t at
        size_t len
    ctypedef struct rt_header_info:
        size_t table_at
        size_t table_end
        int has_table
        int present[3]
        rt_span entry[3]
        size_t first[3]
        size_t count[3]
    long RT_HDR_GENERAL
    long rt_header_keys(const uint8_t *f, size_t len, const uint8_t *alias, size_t alias_len,
                        size_t max_entry, rt_header_info *info, rt_span *spans, size_t cap)
    size_t rt_header_rewrite(const uint8_t *f, size_t len, const rt_header_info *info,
                             const uint8_t *entry, size_t entry_len, uint8_t *out, size_t cap)

cdef enum:
    STACK_SPANS = 64


cdef class HeaderKeys:
    """A content header frame's ``CC``, ``BCC`` and BCC-alias arrays, read without decoding
    the rest of its headers table (see :mod:`rtroute.core.headers`); made by :meth:`read`."""
    cdef bytes _frame
    cdef rt_header_info _info
    cdef readonly object cc, bcc, alias
    cdef readonly bint has_table
    cdef readonly Py_ssize_t table_size

    @staticmethod
    def read(bytes frame not None, bytes alias not None, Py_ssize_t max_entry):
        """The arrays of the whole content header ``frame`` (``alias``: the alias header's
        name), or None when the frame is not the simple case (see ``amqp_headers.h``)."""
        cdef HeaderKeys self = HeaderKeys.__new__(HeaderKeys)
        cdef rt_span stack[STACK_SPANS]
        cdef rt_span *spans = stack
        cdef long found
        cdef const uint8_t *f = <const uint8_t *><const char *>frame
        found = rt_header_keys(f, len(frame), <const uint8_t *><const char *>alias, len(alias),
                               max_entry, &self._info, spans, STACK_SPANS)
        if found == RT_HDR_GENERAL:
            return None
        if found > STACK_SPANS:
            spans = <rt_span *>malloc(found * sizeof(rt_span))
            if spans == NULL:
                raise MemoryError("rtroute core: out of memory")
            rt_header_keys(f, len(frame), <const uint8_t *><const char *>alias, len(alias),
                           max_entry, &self._info, spans, found)
        try:
            self.cc = self._strings(f, spans, 0)
            self.bcc = self._strings(f, spans, 1)
            self.alias = self._strings(f, spans, 2)
        finally:
            if spans != stack:
                free(spans)
        self._frame = frame
        self.has_table = self._info.has_table
        self.table_size = (self._info.table_end - self._info.table_at) if self.has_table else 0
        return self

    cdef object _strings(self, const uint8_t *f, rt_span *spans, int which):
        cdef size_t i, first = self._info.first[which]
        if not self._info.present[which]:
            return None
        return tuple([PyUnicode_DecodeASCII(<const char *>f + spans[first + i].at,
                                            spans[first + i].len, NULL)
                      for i in range(self._info.count[which])])

    @property
    def drops(self):
        """The frame holds ``BCC`` or the alias (to be left out of what is sent)."""
        return bool(self._info.present[1] or self._info.present[2])

    def rewrite(self, bytes entry not None):
        """The frame without its ``BCC`` and alias entries, with ``entry`` (one encoded table
        entry, or ``b""``) added at the end of its headers table."""
        cdef const uint8_t *f = <const uint8_t *><const char *>self._frame
        cdef size_t size = rt_header_rewrite(f, len(self._frame), &self._info,
                                             <const uint8_t *><const char *>entry, len(entry),
                                             NULL, 0)
        if size == 0:
            raise ValueError("the rewritten header frame would be over 4 GiB")
        out = PyBytes_FromStringAndSize(NULL, size)
        rt_header_rewrite(f, len(self._frame), &self._info,
                          <const uint8_t *><const char *>entry, len(entry),
                          <uint8_t *>PyBytes_AS_STRING(out), size)
        return out


cdef extern from "amqp10.h":
    ctypedef struct rt_bytes:
        size_t at
        size_t len
    ctypedef struct rt_amqp10_common:
        int has_routing_key
        int has_exchange
        rt_bytes routing_key
        rt_bytes exchange
        rt_bytes body
        int durable
        int priority
        long long ttl
    ctypedef struct rt_chunk_iter:
        size_t at
        size_t end
        size_t sub_end
    int RT_AMQP10_COMMON
    int RT_CHUNK_ENTRY
    int RT_CHUNK_END
    int rt_amqp10_scan(const uint8_t *data, size_t len, rt_amqp10_common *out)
    int rt_chunk_next(const uint8_t *data, rt_chunk_iter *it, rt_bytes *entry)


cdef extern from "Python.h":
    object PyUnicode_DecodeUTF8(const char *s, Py_ssize_t size, const char *errors)


def scan_chunk(data not None, Py_ssize_t skip, Py_ssize_t limit, list keys not None,
               list exchanges not None, list bodies not None, list durables not None,
               list priorities not None, list ttls not None, list general not None):
    """Reads a stream chunk's entries (see ``amqp10.h`` and :mod:`rtroute.core.amqp10`):
    skips ``skip`` of them, then takes at most ``limit``; for each taken, appends its
    routing key, exchange (str or None), body (bytes), durable, priority and ttl (ints, -1
    where absent) to the lists, or None to each and ``(index, view)`` to ``general`` when the
    message is not the common shape. Returns ``(taken, status)``: status 0 (the entries or
    the limit ended), -1 (a compressed sub-batch) or -2 (a truncated entry)."""
    cdef const uint8_t[::1] view = data
    cdef const uint8_t *d = &view[0] if view.shape[0] else NULL
    cdef rt_chunk_iter it
    cdef rt_bytes e
    cdef rt_amqp10_common m
    cdef Py_ssize_t taken = 0, seen = 0
    cdef int status
    it.at = 0
    it.end = view.shape[0]
    it.sub_end = 0
    while taken < limit:
        status = rt_chunk_next(d, &it, &e)
        if status != RT_CHUNK_ENTRY:
            return taken, (0 if status == RT_CHUNK_END else status)
        seen += 1
        if seen <= skip:
            continue
        if rt_amqp10_scan(d + e.at, e.len, &m) == RT_AMQP10_COMMON:
            keys.append(PyUnicode_DecodeUTF8(<const char *>d + e.at + m.routing_key.at,
                                             m.routing_key.len, "replace")
                        if m.has_routing_key else None)
            exchanges.append(PyUnicode_DecodeUTF8(<const char *>d + e.at + m.exchange.at,
                                                  m.exchange.len, "replace")
                             if m.has_exchange else None)
            bodies.append(PyBytes_FromStringAndSize(<const char *>d + e.at + m.body.at,
                                                    m.body.len))
            durables.append(m.durable)
            priorities.append(m.priority)
            ttls.append(m.ttl)
        else:
            keys.append(None)
            exchanges.append(None)
            bodies.append(None)
            durables.append(None)
            priorities.append(None)
            ttls.append(None)
            general.append((taken, data[e.at:e.at + e.len]))
        taken += 1
    return taken, 0


# -- field tables: the common Python values encoded in one pass --------------------------------
cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object value, int *overflow) except? -1
    double PyFloat_AS_DOUBLE(object value)

cdef extern from "math.h":
    bint isfinite(double x)

cdef enum:
    TABLE_DEPTH = 64  # deeper tables go to the Python encoder (which has no limit)
    PLAIN = 0
    GENERAL = 1


cdef struct _Out:
    char *data
    size_t len
    size_t cap


cdef int _room(_Out *out, size_t extra) except -1:
    cdef size_t cap = out.cap if out.cap else 256
    cdef char *grown
    if out.len + extra <= out.cap:
        return 0
    while cap < out.len + extra:
        cap *= 2
    grown = <char *>realloc(out.data, cap)
    if grown == NULL:
        raise MemoryError("rtroute core: out of memory")
    out.data = grown
    out.cap = cap
    return 0


cdef inline void _be(char *at, uint64_t value, int size):
    cdef int i
    for i in range(size):
        at[i] = <char>((value >> (8 * (size - 1 - i))) & 0xff)


cdef int _put(_Out *out, const char *data, size_t size) except -1:
    _room(out, size)
    memcpy(out.data + out.len, data, size)
    out.len += size
    return 0


cdef int _put_tagged(_Out *out, char tag, uint64_t value, int size) except -1:
    _room(out, 1 + size)
    out.data[out.len] = tag
    _be(out.data + out.len + 1, value, size)
    out.len += 1 + size
    return 0


cdef int _put_string(_Out *out, char tag, const char *data, Py_ssize_t size) except -1:
    if <uint64_t>size > 0xffffffff:
        return GENERAL
    _put_tagged(out, tag, <uint64_t>size, 4)
    _put(out, data, size)
    return PLAIN


cdef int _put_value(_Out *out, object value, bint finite, int depth) except -1:
    cdef type cls = type(value)
    cdef Py_ssize_t size
    cdef const char *data
    cdef long long number
    cdef int overflow = 0
    cdef double real
    cdef uint64_t bits
    cdef size_t start
    cdef int status
    if cls is str:
        try:
            data = PyUnicode_AsUTF8AndSize(value, &size)
        except UnicodeEncodeError:
            return GENERAL
        return _put_string(out, b'S', data, size)
    if cls is bool:
        return _put_tagged(out, b't', 1 if value else 0, 1)
    if cls is int:
        number = PyLong_AsLongLongAndOverflow(value, &overflow)
        if overflow:
            return GENERAL
        if -2147483648 <= number <= 2147483647:
            return _put_tagged(out, b'I', <uint64_t><uint32_t>(<int>number), 4)
        return _put_tagged(out, b'l', <uint64_t>number, 8)
    if cls is float:
        real = PyFloat_AS_DOUBLE(value)
        if finite and not isfinite(real):
            return GENERAL
        memcpy(&bits, &real, 8)
        return _put_tagged(out, b'd', bits, 8)
    if value is None:
        return _put(out, b"V", 1)
    if cls is bytes:
        return _put_string(out, b'x', PyBytes_AS_STRING(value), len(<bytes>value))
    if cls is dict or cls is list or cls is tuple:
        if depth >= TABLE_DEPTH:
            return GENERAL
        _put_tagged(out, b'F' if cls is dict else b'A', 0, 4)
        start = out.len
        if cls is dict:
            status = _put_entries(out, <dict>value, finite, depth + 1)
        else:
            status = PLAIN
            for item in value:
                status = _put_value(out, item, finite, depth + 1)
                if status != PLAIN:
                    break
        if status != PLAIN or out.len - start > 0xffffffff:
            return GENERAL
        _be(out.data + start - 4, out.len - start, 4)
        return PLAIN
    return GENERAL  # a subclass, a typed value, Decimal, datetime...: the Python encoder


cdef int _put_shortstr(_Out *out, const char *data, Py_ssize_t size) except -1:
    """``data`` as a short string (length octet, bytes); GENERAL if over 255 bytes."""
    if size > 255:
        return GENERAL
    _room(out, 1 + size)
    out.data[out.len] = <char>size
    memcpy(out.data + out.len + 1, data, size)
    out.len += 1 + size
    return PLAIN


cdef int _put_str(_Out *out, object text) except -1:
    """``text`` (a str) as a short string; GENERAL if it is none or has no encoding."""
    cdef Py_ssize_t size
    cdef const char *data
    if type(text) is not str:
        return GENERAL
    try:
        data = PyUnicode_AsUTF8AndSize(text, &size)
    except UnicodeEncodeError:
        return GENERAL
    return _put_shortstr(out, data, size)


cdef int _put_entries(_Out *out, dict table, bint finite, int depth) except -1:
    cdef int status
    for name, value in table.items():
        if _put_str(out, name) != PLAIN:
            return GENERAL
        status = _put_value(out, value, finite, depth)
        if status != PLAIN:
            return status
    return PLAIN


def encode_plain_entries(table, bint finite_floats=False):
    """The AMQP 0-9-1 encoded entries of ``table`` (without the table's size), as
    ``rtroute.amqp.field_table.encode_entries`` encodes them, when ``table`` is a ``dict``
    holding ``str`` names and only values of the exact types str, bool, int (64 bits), float,
    None, bytes, dict, list and tuple, at most 64 deep; else None (the Python encoder then
    encodes it, or says why it cannot): a subclass, a typed value, a name or value with no
    encoding, a NaN or infinity with ``finite_floats``."""
    cdef _Out out
    cdef int status
    if type(table) is not dict:
        return None
    out.data = NULL
    out.len = 0
    out.cap = 0
    try:
        status = _put_entries(&out, <dict>table, finite_floats, 0)
        if status != PLAIN:
            return None
        return PyBytes_FromStringAndSize(out.data, out.len)
    finally:
        free(out.data)


# the basic properties in flag order (bit 15 first) and how each is encoded
_PROPERTY_KINDS = (
    ("content_type", 0), ("content_encoding", 0), ("headers", 3), ("delivery_mode", 1),
    ("priority", 1), ("correlation_id", 0), ("reply_to", 0), ("expiration", 0),
    ("message_id", 0), ("timestamp", 2), ("type", 0), ("user_id", 0), ("app_id", 0),
    ("cluster_id", 0))


cdef int _put_property(_Out *out, object value, int kind) except -1:
    cdef Py_ssize_t size
    cdef const char *data
    cdef type cls = type(value)
    cdef unsigned long long number
    cdef size_t start
    if kind == 0:  # short string
        if cls is str:
            try:
                data = PyUnicode_AsUTF8AndSize(value, &size)
            except UnicodeEncodeError:
                return GENERAL
        elif cls is bytes:
            data = PyBytes_AS_STRING(value)
            size = len(<bytes>value)
        else:
            return GENERAL
        return _put_shortstr(out, data, size)
    if kind == 3:  # the headers table, floats finite (RabbitMQ's parser has no others)
        if cls is not dict:
            return GENERAL
        _room(out, 4)
        out.len += 4
        start = out.len
        if _put_entries(out, <dict>value, True, 0) != PLAIN or out.len - start > 0xffffffff:
            return GENERAL
        _be(out.data + start - 4, out.len - start, 4)
        return PLAIN
    if cls is not int or value < 0 or value > (255 if kind == 1 else 0xffffffffffffffff):
        return GENERAL
    number = value
    _room(out, 8)
    _be(out.data + out.len, number, 1 if kind == 1 else 8)
    out.len += 1 if kind == 1 else 8
    return PLAIN


cdef int _put_header_frame(_Out *out, uint16_t channel, uint64_t body_size, object properties,
                           object headers, object extra_name, object extra_value) except -1:
    """The content header frame (see :func:`plain_header_frame`) at the end of ``out``, its
    headers table ``headers`` (a dict or None) followed by the entry ``extra_name``:
    ``extra_value`` when ``extra_name`` is not None; GENERAL (``out`` then holds a partial
    frame) when a property is not plain."""
    cdef uint16_t flags = 0
    cdef int bit = 15
    cdef size_t start = out.len
    cdef size_t table
    cdef size_t payload
    _room(out, 22)
    out.len += 21  # frame head (7), class and weight (4), body size (8), flags (2)
    for name, kind in _PROPERTY_KINDS:
        if kind == 3:
            if extra_name is None:
                if headers is None:
                    bit -= 1
                    continue
                if _put_property(out, headers, 3) != PLAIN:
                    return GENERAL
            else:  # the table with one entry more, after the others
                if headers is not None and type(headers) is not dict:
                    return GENERAL
                _room(out, 4)
                out.len += 4
                table = out.len
                if headers is not None and _put_entries(out, <dict>headers, True, 0) != PLAIN:
                    return GENERAL
                if _put_str(out, extra_name) != PLAIN or \
                        _put_value(out, extra_value, True, 1) != PLAIN or \
                        out.len - table > 0xffffffff:
                    return GENERAL
                _be(out.data + table - 4, out.len - table, 4)
            flags |= 1 << bit
        else:
            value = None if properties is None else getattr(properties, name, None)
            if value is not None:
                if _put_property(out, value, kind) != PLAIN:
                    return GENERAL
                flags |= 1 << bit
        bit -= 1
    _room(out, 1)
    out.data[out.len] = <char>0xce
    out.len += 1
    payload = out.len - start - 8
    if payload > 0xffffffff:
        return GENERAL
    out.data[start] = 2
    _be(out.data + start + 1, channel, 2)
    _be(out.data + start + 3, payload, 4)
    _be(out.data + start + 7, 60 << 16, 4)  # class 60, weight 0
    _be(out.data + start + 11, body_size, 8)
    _be(out.data + start + 19, flags, 2)
    return PLAIN


def plain_header_frame(uint16_t channel, uint64_t body_size, properties, headers):
    """The content header frame of a ``body_size``-byte body on ``channel`` with the
    properties of ``properties`` (an object with pika's attribute names, or None) and
    ``headers`` instead of its own (None: no table), as
    ``rtroute.amqp.content_header.content_header_frame_with`` builds it, when every property
    set is of the plain kind (a short string as str or bytes, an octet or timestamp as an
    int in range, the headers a plain table: see :func:`encode_plain_entries`); else None."""
    cdef _Out out
    out.data = NULL
    out.len = 0
    out.cap = 0
    try:
        if _put_header_frame(&out, channel, body_size, properties, headers, None, None) \
                != PLAIN:
            return None
        return PyBytes_FromStringAndSize(out.data, out.len)
    finally:
        free(out.data)


cdef int _put_publish(_Out *out, uint16_t channel, object part, object headers,
                      object properties, object body, uint64_t frame_max,
                      object key_header, Py_ssize_t *frame_count) except -1:
    """One publish's frames (method, content header, body) at the end of ``out``: see
    :func:`publish_frames`. GENERAL leaves ``out`` partly written (the caller cuts it)."""
    cdef size_t start = out.len
    cdef size_t header_start
    cdef const char *data
    cdef Py_ssize_t size
    cdef Py_ssize_t chunk
    cdef Py_ssize_t at
    cdef Py_ssize_t piece
    if type(body) is not bytes or (headers is not None and type(headers) is not dict):
        return GENERAL
    # the method frame: basic.publish, ticket 0, exchange, routing key, no flags
    _room(out, 13)
    out.len += 7
    _be(out.data + out.len, (60 << 16) | 40, 4)
    out.data[out.len + 4] = 0
    out.data[out.len + 5] = 0
    out.len += 6
    if _put_str(out, part.exchange) != PLAIN or _put_str(out, part.routing_key) != PLAIN:
        return GENERAL
    _room(out, 2)
    out.data[out.len] = 0
    out.data[out.len + 1] = <char>0xce
    out.len += 2
    out.data[start] = 1
    _be(out.data + start + 1, channel, 2)
    _be(out.data + start + 3, out.len - start - 8, 4)
    # the content header frame: the headers, plus BCC or the key as published
    bcc = part.bcc
    extra_name = extra_value = None
    if bcc:
        extra_name, extra_value = "BCC", bcc
    elif key_header is not None:
        extra_value = part.published_key
        if extra_value is not None:
            extra_name = key_header
    if extra_name is not None and headers is not None and extra_name in headers:
        return GENERAL  # the entry replaces one in place: the general path
    if headers is not None and not headers:
        headers = None  # an empty table is no table
    header_start = out.len
    if _put_header_frame(out, channel, len(<bytes>body), properties, headers, extra_name,
                         extra_value) != PLAIN:
        return GENERAL
    if out.len - header_start - 8 > frame_max:
        return GENERAL  # over frame_max: the general path says so
    # the body frames, at most frame_max - 8 bytes of it each
    size = len(<bytes>body)
    data = PyBytes_AS_STRING(body)
    chunk = frame_max - 8
    frame_count[0] += 2
    at = 0
    while at < size:
        piece = min(chunk, size - at)
        _room(out, 8 + piece)
        out.data[out.len] = 3
        _be(out.data + out.len + 1, channel, 2)
        _be(out.data + out.len + 3, piece, 4)
        memcpy(out.data + out.len + 7, data + at, piece)
        out.data[out.len + 7 + piece] = <char>0xce
        out.len += 8 + piece
        at += piece
        frame_count[0] += 1
    return PLAIN


def publish_frames(uint16_t channel, list publishes not None, Py_ssize_t start,
                   uint64_t frame_max, key_header):
    """The frames of ``publishes[start:]`` (each ``(part, headers, properties, body)``: a
    ``rtroute.routing.delivery_plan.Publish``, the message's headers (a dict or None), its
    ``pika.BasicProperties`` or None, its body as bytes) as the publisher writes them, one
    after the other in one ``bytes``: a non-mandatory ``basic.publish`` of ``part.exchange``
    with ``part.routing_key``; the content header frame of the properties with ``headers``
    for a table (none when empty) plus ``BCC`` (``part.bcc``) or ``key_header`` (the key as
    published, ``part.published_key``; None: no such header) after its entries; the body in
    frames of at most ``frame_max - 8`` bytes (``frame_max`` at least 4,096).

    Stops before the first publish it cannot write (a property or header that is not plain,
    see :func:`plain_header_frame`; a name over 255 bytes; a header frame over
    ``frame_max``; ``key_header`` already in the headers): the general encoder takes that
    one. Returns ``(frames, frame_count, end)``: ``publishes[start:end]`` were written."""
    cdef _Out out
    cdef Py_ssize_t count = 0
    cdef Py_ssize_t index = start
    cdef Py_ssize_t end = len(publishes)
    cdef size_t mark
    cdef tuple publish
    if frame_max < 4096:
        return b"", 0, start
    if key_header is not None and type(key_header) is not str:
        raise TypeError("key_header must be a str or None")
    out.data = NULL
    out.len = 0
    out.cap = 0
    try:
        while index < end:
            publish = publishes[index]
            if len(publish) != 4:
                raise TypeError("each publish is (part, headers, properties, body)")
            mark = out.len
            if _put_publish(&out, channel, publish[0], publish[1], publish[2], publish[3],
                            frame_max, key_header, &count) != PLAIN:
                out.len = mark
                break
            index += 1
        return PyBytes_FromStringAndSize(out.data, out.len), count, index
    finally:
        free(out.data)


def publish_message(uint16_t channel, bytes exchange not None, bytes routing_key not None,
                    uint8_t bits, list parts not None):
    """One publish's frames on ``channel``, as one ``bytes``: the ``basic.publish`` method
    frame to ``exchange`` with ``routing_key`` (short strings, length octet included) and
    ``bits`` (mandatory 1, immediate 2), then ``parts`` (whole frames: a content header
    frame and body frames, of any channel) moved to ``channel``.

    Raises:
        ValueError: a short string whose length octet is not its length, or a part shorter
            than a frame.
    """
    cdef Py_ssize_t ex_len = len(exchange), key_len = len(routing_key), size, payload, at
    cdef Py_ssize_t n = len(parts), i, part_len
    cdef bytes part
    cdef char *o
    cdef const char *ex = exchange
    cdef const char *key = routing_key
    if ex_len < 1 or <uint8_t>ex[0] != ex_len - 1 or key_len < 1 or \
            <uint8_t>key[0] != key_len - 1:
        raise ValueError("exchange and routing_key must be short strings")
    payload = 6 + ex_len + key_len + 1
    size = 8 + payload
    for i in range(n):
        part = parts[i]
        if len(part) < 8:
            raise ValueError("a part shorter than a frame")
        size += len(part)
    out = PyBytes_FromStringAndSize(NULL, size)
    o = PyBytes_AS_STRING(out)
    o[0] = 1
    o[1] = <char>(channel >> 8)
    o[2] = <char>(channel & 0xFF)
    o[3] = <char>((payload >> 24) & 0xFF)
    o[4] = <char>((payload >> 16) & 0xFF)
    o[5] = <char>((payload >> 8) & 0xFF)
    o[6] = <char>(payload & 0xFF)
    memcpy(o + 7, b"\x00\x3c\x00\x28\x00\x00", 6)  # basic.publish, ticket 0
    memcpy(o + 13, ex, ex_len)
    memcpy(o + 13 + ex_len, key, key_len)
    o[13 + ex_len + key_len] = <char>bits
    o[14 + ex_len + key_len] = <char>0xCE
    at = 8 + payload
    for i in range(n):
        part = parts[i]
        part_len = len(part)
        memcpy(o + at, <const char *>part, part_len)
        o[at + 1] = <char>(channel >> 8)
        o[at + 2] = <char>(channel & 0xFF)
        at += part_len
    return out
