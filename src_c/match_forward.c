/*
 * RT_FORWARD queries: RabbitMQ's topic exchange. The bindings hold the wildcards ('*' is word
 * id RT_WORD_STAR, '#' is RT_WORD_HASH, so they sort first among a node's kids); the query is
 * concrete, and a "*" or "#" in it is just a word (it only meets the bindings' wildcards).
 *
 * The walk is a worklist of states (kid ref, query position). A state entering a '#' kid
 * stands for every position from there to the end; a small map remembers, per '#' kid, the
 * lowest position it was entered with, so each (kid, position) pair is processed once: several
 * '#' in a binding cannot make the work explode, and every binding is reported once.
 */
#include <stdlib.h>
#include <string.h>

#include "ids.h"
#include "matcher.h"
#include "alloc.h"

#define HASH_STATE 0x80000000u /* flag on a state's position: the ref is a '#' kid */
#define SCRATCH_KEEP 4096u     /* scratch larger than this is freed after the query */

static int grow(uint32_t **buf, size_t *cap, size_t need)
{
    size_t c = *cap ? *cap : 64;
    uint32_t *b;
    if (need <= *cap)
        return RT_OK;
    while (c < need)
        c *= 2;
    b = realloc(*buf, c * sizeof *b);
    if (!b)
        return RT_ENOMEM;
    *buf = b;
    *cap = c;
    return RT_OK;
}

void rt_forward_trim_scratch(rt_matcher *m)
{
    if (m->qwords_cap > SCRATCH_KEEP) {
        free(m->qwords);
        m->qwords = NULL;
        m->qwords_cap = 0;
    }
    if (m->work_cap > 2 * SCRATCH_KEEP) {
        free(m->work);
        m->work = NULL;
        m->work_cap = 0;
    }
    if (m->hmap_cap > SCRATCH_KEEP) {
        free(m->hmap_keys);
        free(m->hmap_vals);
        free(m->hmap_used);
        m->hmap_keys = m->hmap_vals = m->hmap_used = NULL;
        m->hmap_cap = 0;
    }
}

/* ------------------------------------------------------------- '#' kid -> lowest position */

static uint32_t hmap_slot(const rt_matcher *m, uint32_t key)
{
    size_t mask = m->hmap_cap - 1, i = (key * 0x9e3779b1u) & mask;
    while (m->hmap_keys[i] != RT_NONE && m->hmap_keys[i] != key)
        i = (i + 1) & mask;
    return (uint32_t)i;
}

static int hmap_grow(rt_matcher *m)
{
    size_t cap = m->hmap_cap ? m->hmap_cap * 2 : 64, i, n = m->hmap_n;
    uint32_t *keys = malloc(cap * sizeof *keys), *vals = malloc(cap * sizeof *vals);
    uint32_t *used = malloc(cap * sizeof *used);
    uint32_t *ok = m->hmap_keys, *ov = m->hmap_vals, *ou = m->hmap_used;
    if (!keys || !vals || !used) {
        free(keys);
        free(vals);
        free(used);
        return RT_ENOMEM;
    }
    memset(keys, 0xff, cap * sizeof *keys);
    m->hmap_keys = keys;
    m->hmap_vals = vals;
    m->hmap_used = used;
    m->hmap_cap = cap;
    for (i = 0; i < n; i++) {
        uint32_t s = hmap_slot(m, ok[ou[i]]);
        keys[s] = ok[ou[i]];
        vals[s] = ov[ou[i]];
        used[i] = s;
    }
    free(ok);
    free(ov);
    free(ou);
    return RT_OK;
}

static void hmap_clear(rt_matcher *m)
{
    size_t i;
    for (i = 0; i < m->hmap_n; i++)
        m->hmap_keys[m->hmap_used[i]] = RT_NONE;
    m->hmap_n = 0;
}

/* ------------------------------------------------------------------------------- the walk */

typedef struct {
    rt_matcher *m;
    const uint32_t *q; /* word ids of the query; RT_WORD_NONE for words no binding holds */
    uint32_t n;
    size_t top; /* states on m->work, two uint32 each */
    rt_ids *out;
} fwalk;

static int push(fwalk *w, uint32_t ref, uint32_t pos)
{
    if (w->top + 2 > w->m->work_cap && grow(&w->m->work, &w->m->work_cap, w->top + 2) != RT_OK)
        return RT_ENOMEM;
    w->m->work[w->top++] = ref;
    w->m->work[w->top++] = pos;
    return RT_OK;
}

/* Slot of the '#' kid among the sorted kid words, or RT_NONE. */
static uint32_t hash_slot(const uint32_t *words, uint32_t nkids)
{
    if (nkids && words[0] == RT_WORD_HASH)
        return 0;
    if (nkids > 1 && words[1] == RT_WORD_HASH)
        return 1;
    return RT_NONE;
}

static uint32_t literal_slot(const uint32_t *words, uint32_t nkids, uint32_t word)
{
    if (word <= RT_WORD_HASH || word == RT_WORD_NONE) /* only the wildcards take those */
        return RT_NONE;
    return rt_kid_find(words, nkids, word);
}

/* A state reached through a literal or '*' edge (or the root) at query position i. */
static int visit(fwalk *w, uint32_t ref, uint32_t i)
{
    const rt_store *s = &w->m->store;
    const rt_node *nd;
    const uint32_t *words, *refs;
    uint32_t slot;
    if (ref & RT_LEAF)
        return i == w->n ? rt_ids_push(w->out, ref & ~RT_LEAF) : RT_OK;
    nd = rt_node_at(s, ref);
    words = rt_kid_words(nd);
    refs = rt_kid_refs(nd);
    if (i == w->n && nd[0] != RT_NONE && rt_ids_push(w->out, nd[0]) != RT_OK)
        return RT_ENOMEM;
    slot = hash_slot(words, rt_nkids(nd));
    if (slot != RT_NONE && push(w, refs[slot], i | HASH_STATE) != RT_OK)
        return RT_ENOMEM;
    if (i == w->n)
        return RT_OK;
    if (rt_nkids(nd) && words[0] == RT_WORD_STAR && push(w, refs[0], i + 1) != RT_OK)
        return RT_ENOMEM;
    slot = literal_slot(words, rt_nkids(nd), w->q[i]);
    if (slot != RT_NONE && push(w, refs[slot], i + 1) != RT_OK)
        return RT_ENOMEM;
    return RT_OK;
}

/* A '#' kid entered at position i: it may swallow the query words i, i+1, ... */
static int visit_hash(fwalk *w, uint32_t ref, uint32_t i)
{
    rt_matcher *m = w->m;
    const rt_store *s = &m->store;
    const rt_node *nd;
    const uint32_t *words, *refs;
    uint32_t slot, old, hi, p;
    if ((m->hmap_n + 1) * 2 > m->hmap_cap && hmap_grow(m) != RT_OK)
        return RT_ENOMEM;
    slot = hmap_slot(m, ref);
    if (m->hmap_keys[slot] == RT_NONE) {
        old = w->n + 1;
        m->hmap_keys[slot] = ref;
        m->hmap_used[m->hmap_n++] = slot;
    } else {
        old = m->hmap_vals[slot];
        if (i >= old)
            return RT_OK; /* positions i.. were all handled already */
    }
    m->hmap_vals[slot] = i;
    /* Positions [i, hi) are new; the '#' itself ends at the query's end on the first visit. */
    hi = old <= w->n ? old : w->n;
    if (ref & RT_LEAF)
        return old == w->n + 1 ? rt_ids_push(w->out, ref & ~RT_LEAF) : RT_OK;
    nd = rt_node_at(s, ref);
    if (old == w->n + 1 && nd[0] != RT_NONE && rt_ids_push(w->out, nd[0]) != RT_OK)
        return RT_ENOMEM;
    words = rt_kid_words(nd);
    refs = rt_kid_refs(nd);
    slot = hash_slot(words, rt_nkids(nd));
    if (slot != RT_NONE && push(w, refs[slot], i | HASH_STATE) != RT_OK)
        return RT_ENOMEM;
    if (rt_nkids(nd) && words[0] == RT_WORD_STAR)
        for (p = i; p < hi; p++)
            if (push(w, refs[0], p + 1) != RT_OK)
                return RT_ENOMEM;
    for (p = i; p < hi; p++) {
        uint32_t ls = literal_slot(words, rt_nkids(nd), w->q[p]);
        if (ls != RT_NONE && push(w, refs[ls], p + 1) != RT_OK)
            return RT_ENOMEM;
    }
    return RT_OK;
}

static int split_query(rt_matcher *m, const char *q, size_t len, uint32_t *n)
{
    const char *s = q, *end = q + len;
    uint32_t k = 0;
    *n = 0;
    if (len == 0)
        return RT_OK;
    for (;;) {
        const char *dot = memchr(s, '.', (size_t)(end - s));
        const char *e = dot ? dot : end;
        if (k == m->qwords_cap && grow(&m->qwords, &m->qwords_cap, (size_t)k + 1) != RT_OK)
            return RT_ENOMEM;
        m->qwords[k++] = rt_intern_find(&m->in, s, (size_t)(e - s));
        if (!dot)
            break;
        s = dot + 1;
    }
    *n = k;
    return RT_OK;
}

int rt_match_forward(rt_matcher *m, const char *q, size_t len, rt_ids *out)
{
    fwalk w;
    int rc = RT_OK;
    if (m->count == 0)
        return RT_OK;
    if (split_query(m, q, len, &w.n) != RT_OK)
        return RT_ENOMEM;
    w.m = m;
    w.q = m->qwords;
    w.top = 0;
    w.out = out;
    rc = visit(&w, m->root, 0);
    while (rc == RT_OK && w.top) {
        uint32_t pos = m->work[--w.top], ref = m->work[--w.top];
        if (pos & HASH_STATE)
            rc = visit_hash(&w, ref, pos & ~HASH_STATE);
        else
            rc = visit(&w, ref, pos);
    }
    hmap_clear(m);
    return rc;
}
