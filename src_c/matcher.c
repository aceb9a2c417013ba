/* The public API of rtroute.h: bindings in and out, ids, memory, and the query entry points. */
#include "matcher.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "ids.h"

#define QUEUE_KEEP (64u * 1024) /* breadth-first scratch kept between queries */

/* A binding key split into words: start offsets and lengths. */
typedef struct {
    uint32_t n;
    uint16_t start[RT_MAX_WORDS];
    uint16_t len[RT_MAX_WORDS];
} key_words;

/* Keys are at most RT_MAX_BINDING_BYTES long here, so at most RT_MAX_WORDS words. */
static void split_key(const char *key, size_t len, key_words *kw)
{
    size_t i, start = 0;
    kw->n = 0;
    if (len == 0)
        return;
    for (i = 0; i <= len; i++) {
        if (i == len || key[i] == '.') {
            kw->start[kw->n] = (uint16_t)start;
            kw->len[kw->n] = (uint16_t)(i - start);
            kw->n++;
            start = i + 1;
        }
    }
}

static int check_key(const rt_matcher *m, const char *key, size_t len)
{
    if (!m || (!key && len))
        return RT_EINVAL;
    if (len > RT_MAX_BINDING_BYTES)
        return RT_ETOOLONG;
    return RT_OK;
}

/* Word ids of an existing key: 1, or 0 if some word is unknown (so the key is absent). */
static int known_words(const rt_matcher *m, const char *key, const key_words *kw, uint32_t *ids)
{
    uint32_t i;
    for (i = 0; i < kw->n; i++) {
        ids[i] = rt_intern_find(&m->in, key + kw->start[i], kw->len[i]);
        if (ids[i] == RT_WORD_NONE)
            return 0;
    }
    return 1;
}

static void reverse_words(const uint32_t *ids, uint32_t n, uint32_t *rev)
{
    uint32_t i;
    for (i = 0; i < n; i++)
        rev[i] = ids[n - 1 - i];
}

rt_matcher *rt_matcher_new(rt_kind kind)
{
    rt_matcher *m;
    if (kind != RT_REVERSE && kind != RT_FORWARD)
        return NULL;
    m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->kind = kind;
    m->rroot = RT_NONE;
    rt_store_init(&m->store);
    if (rt_intern_init(&m->in) != RT_OK) {
        free(m);
        return NULL;
    }
    m->root = rt_store_new_root(&m->store);
    if (m->root != RT_NONE && kind == RT_REVERSE)
        m->rroot = rt_store_new_root(&m->store);
    if (m->root == RT_NONE || (kind == RT_REVERSE && m->rroot == RT_NONE)) {
        rt_matcher_free(m);
        return NULL;
    }
    return m;
}

void rt_matcher_free(rt_matcher *m)
{
    if (!m)
        return;
    rt_store_free(&m->store);
    rt_intern_free(&m->in);
    free(m->free_ids);
    free(m->seen);
    free(m->queue.buf);
    rt_ids_free(&m->levels[0]);
    rt_ids_free(&m->levels[1]);
    free(m->qwords);
    free(m->work);
    free(m->hmap_keys);
    free(m->hmap_vals);
    free(m->hmap_used);
    free(m);
}

rt_kind rt_matcher_kind(const rt_matcher *m)
{
    return m ? m->kind : RT_REVERSE;
}

size_t rt_count(const rt_matcher *m)
{
    return m ? m->count : 0;
}

size_t rt_id_limit(const rt_matcher *m)
{
    return m ? m->id_limit : 0;
}

size_t rt_memory(const rt_matcher *m)
{
    if (!m)
        return 0;
    return sizeof *m + rt_intern_memory(&m->in) + rt_store_memory(&m->store) +
           (size_t)m->free_ids_cap * sizeof *m->free_ids + m->seen_words * sizeof *m->seen +
           (m->queue.cap + m->levels[0].cap + m->levels[1].cap) * sizeof(uint32_t) +
           m->qwords_cap * sizeof *m->qwords + m->work_cap * sizeof *m->work +
           m->hmap_cap * (sizeof *m->hmap_keys + sizeof *m->hmap_vals + sizeof *m->hmap_used);
}

static void release_created(rt_matcher *m, const uint32_t *ids, const unsigned char *created,
                            uint32_t n)
{
    uint32_t i;
    for (i = 0; i < n; i++)
        if (created[i])
            rt_intern_release_unused(&m->in, ids[i]);
}

int rt_add(rt_matcher *m, const char *key, size_t len, uint32_t *id)
{
    key_words kw;
    uint32_t ids[RT_MAX_WORDS] = {0}, rev[RT_MAX_WORDS], i, new_id;
    unsigned char created[RT_MAX_WORDS];
    rt_plan fwd, bwd;
    int rc = check_key(m, key, len);
    if (rc != RT_OK)
        return rc;
    split_key(key, len, &kw);
    memset(created, 0, kw.n);
    for (i = 0; i < kw.n; i++) {
        int c;
        if (rt_intern_add(&m->in, key + kw.start[i], kw.len[i], &ids[i], &c) != RT_OK) {
            release_created(m, ids, created, i);
            return RT_ENOMEM;
        }
        created[i] = (unsigned char)c;
    }
    if (rt_trie_plan(&m->store, &m->root, ids, kw.n, &fwd) != RT_OK)
        goto nomem;
    if (fwd.existing != RT_NONE) {
        rt_trie_cancel(&m->store, &fwd);
        if (id)
            *id = fwd.existing;
        return 0; /* every word of a present key was already interned */
    }
    if (m->n_free_ids == 0 && m->id_limit >= RT_MAX_IDS - 1)
        goto nomem_fwd;
    if (m->kind == RT_REVERSE) {
        reverse_words(ids, kw.n, rev);
        if (rt_trie_plan(&m->store, &m->rroot, rev, kw.n, &bwd) != RT_OK)
            goto nomem_fwd;
    }
    /* Nothing below can fail. */
    new_id = m->n_free_ids ? m->free_ids[--m->n_free_ids] : m->id_limit++;
    rt_trie_commit(&m->store, &m->in, &fwd, ids, kw.n, new_id);
    if (m->kind == RT_REVERSE) {
        rt_trie_commit(&m->store, &m->in, &bwd, rev, kw.n, new_id);
        m->len_count[kw.n]++;
        if (kw.n > m->max_words)
            m->max_words = kw.n;
    }
    m->count++;
    if (id)
        *id = new_id;
    return 1;

nomem_fwd:
    rt_trie_cancel(&m->store, &fwd);
nomem:
    release_created(m, ids, created, kw.n);
    return RT_ENOMEM;
}

int rt_compact(rt_matcher *m)
{
    rt_store fresh;
    uint32_t root, rroot = RT_NONE;
    if (!m)
        return RT_EINVAL;
    rt_store_init(&fresh);
    root = rt_trie_copy(&fresh, &m->store, m->root);
    if (root != RT_NONE && m->kind == RT_REVERSE)
        rroot = rt_trie_copy(&fresh, &m->store, m->rroot);
    if (root == RT_NONE || (m->kind == RT_REVERSE && rroot == RT_NONE)) {
        rt_store_free(&fresh);
        return RT_ENOMEM;
    }
    rt_store_free(&m->store);
    m->store = fresh;
    m->root = root;
    m->rroot = rroot;
    return RT_OK;
}

static void recycle_id(rt_matcher *m, uint32_t id)
{
    if (m->count == 0) {
        /* No binding left: start the ids afresh, and give the id tables back. */
        m->id_limit = 0;
        m->n_free_ids = 0;
        free(m->free_ids);
        m->free_ids = NULL;
        m->free_ids_cap = 0;
        free(m->seen);
        m->seen = NULL;
        m->seen_words = 0;
        return;
    }
    if (m->n_free_ids == m->free_ids_cap) {
        uint32_t cap = m->free_ids_cap ? m->free_ids_cap * 2 : 16;
        uint32_t *t = realloc(m->free_ids, (size_t)cap * sizeof *t);
        if (!t)
            return; /* out of memory: this id is simply not reused */
        m->free_ids = t;
        m->free_ids_cap = cap;
    }
    m->free_ids[m->n_free_ids++] = id;
}

int rt_remove(rt_matcher *m, const char *key, size_t len, uint32_t *id)
{
    key_words kw;
    uint32_t ids[RT_MAX_WORDS], rev[RT_MAX_WORDS], found;
    int rc = check_key(m, key, len);
    if (rc != RT_OK)
        return rc;
    split_key(key, len, &kw);
    if (!known_words(m, key, &kw, ids))
        return 0;
    found = rt_trie_remove(&m->store, &m->in, &m->root, ids, kw.n);
    if (found == RT_NONE)
        return 0;
    if (m->kind == RT_REVERSE) {
        reverse_words(ids, kw.n, rev);
        (void)rt_trie_remove(&m->store, &m->in, &m->rroot, rev, kw.n);
        if (--m->len_count[kw.n] == 0 && kw.n == m->max_words)
            while (m->max_words > 0 && m->len_count[m->max_words] == 0)
                m->max_words--;
    }
    m->count--;
    recycle_id(m, found);
    if (m->count == 0 || rt_store_sparse(&m->store))
        (void)rt_compact(m); /* on failure the store just stays larger */
    if (id)
        *id = found;
    return 1;
}

int rt_find(const rt_matcher *m, const char *key, size_t len, uint32_t *id)
{
    key_words kw;
    uint32_t ids[RT_MAX_WORDS], found;
    int rc = check_key(m, key, len);
    if (rc != RT_OK)
        return rc;
    split_key(key, len, &kw);
    if (!known_words(m, key, &kw, ids))
        return 0;
    found = rt_trie_find(&m->store, m->root, ids, kw.n);
    if (found == RT_NONE)
        return 0;
    if (id)
        *id = found;
    return 1;
}

/* Scratch a huge query left huge is given back. */
static void trim_scratch(rt_matcher *m)
{
    int i;
    rt_queue_trim(&m->queue, QUEUE_KEEP);
    for (i = 0; i < 2; i++)
        if (m->levels[i].cap > QUEUE_KEEP)
            rt_ids_free(&m->levels[i]);
}

long rt_match_dir(rt_matcher *m, const char *q, size_t len, rt_direction dir, rt_ids *out)
{
    size_t before;
    int rc;
    if (!m || !out || (!q && len) ||
        (dir != RT_AUTO && dir != RT_DIR_FORWARD && dir != RT_DIR_REVERSED))
        return RT_EINVAL;
    if (len > RT_MAX_QUERY_BYTES)
        return RT_ETOOLONG;
    before = out->len;
    if (m->kind == RT_REVERSE) {
        rc = rt_match_reverse(m, q, len, dir, out);
        trim_scratch(m);
    } else {
        rc = rt_match_forward(m, q, len, out);
        rt_forward_trim_scratch(m);
    }
    if (rc != RT_OK) {
        out->len = before;
        return rc;
    }
    return (long)(out->len - before);
}

long rt_match(rt_matcher *m, const char *q, size_t len, rt_ids *out)
{
    return rt_match_dir(m, q, len, RT_AUTO, out);
}

int rt_match_batch(rt_matcher *m, const char *buf, const size_t *offs, size_t n, rt_ids *out,
                   size_t *res_offs)
{
    size_t before, i;
    if (!m || !out || !offs || !res_offs || (!buf && n && offs[n] != offs[0]))
        return RT_EINVAL;
    for (i = 0; i < n; i++)
        if (offs[i + 1] < offs[i])
            return RT_EINVAL;
    before = out->len;
    if (m->kind == RT_REVERSE) {
        int rc = rt_match_reverse_batch(m, buf, offs, n, out, res_offs);
        trim_scratch(m);
        if (rc != RT_OK)
            out->len = before;
        return rc;
    }
    for (i = 0; i < n; i++) {
        long r;
        res_offs[i] = out->len;
        r = rt_match(m, buf + offs[i], offs[i + 1] - offs[i], out);
        if (r < 0) {
            out->len = before;
            return (int)r;
        }
    }
    res_offs[n] = out->len;
    return RT_OK;
}

long rt_match_union(rt_matcher *m, const char *buf, const size_t *offs, size_t n, rt_ids *out)
{
    size_t before, i, j, need;
    if (!m || !out || !offs || (!buf && n && offs[n] != offs[0]))
        return RT_EINVAL;
    before = out->len;
    for (i = 0; i < n; i++) {
        long r;
        if (offs[i + 1] < offs[i]) {
            out->len = before;
            return RT_EINVAL;
        }
        r = rt_match(m, buf + offs[i], offs[i + 1] - offs[i], out);
        if (r < 0) {
            out->len = before;
            return r;
        }
    }
    if (n <= 1)
        return (long)(out->len - before); /* one query never repeats an id */
    need = ((size_t)m->id_limit + 63) / 64;
    if (need > m->seen_words) {
        uint64_t *seen = realloc(m->seen, need * sizeof *seen);
        if (!seen) {
            out->len = before;
            return RT_ENOMEM;
        }
        memset(seen + m->seen_words, 0, (need - m->seen_words) * sizeof *seen);
        m->seen = seen;
        m->seen_words = need;
    }
    for (i = j = before; i < out->len; i++) {
        uint32_t id = out->ids[i];
        uint64_t bit = (uint64_t)1 << (id & 63);
        if (m->seen[id >> 6] & bit)
            continue;
        m->seen[id >> 6] |= bit;
        out->ids[j++] = id;
    }
    out->len = j;
    for (i = before; i < j; i++)
        m->seen[out->ids[i] >> 6] = 0;
    return (long)(j - before);
}
