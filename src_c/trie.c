#include "trie.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "ids.h"

enum { PLAN_EXISTS, PLAN_SET, PLAN_EXTEND, PLAN_MATERIALIZE };

#define MAX_CLASS 26u /* 2^26 kids in one node at most */

/* ---------------------------------------------------------------- store: records */

static uint32_t rec_size(unsigned cls)
{
    return 2 + 2 * (1u << cls);
}

static unsigned class_for(uint32_t nkids)
{
    unsigned c = 0;
    while ((1u << c) < nkids)
        c++;
    return c;
}

static uint32_t *rec_at(const rt_store *s, uint32_t ref)
{
    return s->chunks[ref >> RT_CHUNK_BITS] + (ref & (RT_CHUNK - 1));
}

void rt_store_init(rt_store *s)
{
    unsigned c;
    memset(s, 0, sizeof *s);
    s->cur = RT_NONE;
    for (c = 0; c < RT_SMALL_CLASSES; c++)
        s->class_free[c] = RT_NONE;
}

void rt_store_free(rt_store *s)
{
    uint32_t i;
    for (i = 0; i < s->n_chunks; i++)
        free(s->chunks[i]); /* NULL in free slots */
    free(s->chunks);
    free(s->chunk_len);
    free(s->slot_free);
    rt_store_init(s);
}

size_t rt_store_memory(const rt_store *s)
{
    return s->arena_chunks * RT_CHUNK * sizeof(uint32_t) + s->big_bytes +
           (size_t)s->chunks_cap * (sizeof(uint32_t *) + sizeof(uint32_t)) +
           (size_t)s->slot_free_cap * sizeof(uint32_t);
}

int rt_store_sparse(const rt_store *s)
{
    return s->arena_chunks > 4 && s->arena_live * 3 < s->arena_chunks * RT_CHUNK;
}

/* A free chunk-table slot for mem (of len uint32), or RT_NONE. */
static uint32_t table_slot(rt_store *s, uint32_t *mem, uint32_t len)
{
    uint32_t i;
    if (s->n_slot_free) {
        i = s->slot_free[--s->n_slot_free];
    } else {
        if (s->n_chunks >= RT_MAX_CHUNKS)
            return RT_NONE;
        if (s->n_chunks == s->chunks_cap) {
            uint32_t cap = s->chunks_cap ? s->chunks_cap * 2 : 8;
            uint32_t **t = realloc(s->chunks, (size_t)cap * sizeof *t);
            uint32_t *l;
            if (!t)
                return RT_NONE;
            s->chunks = t;
            l = realloc(s->chunk_len, (size_t)cap * sizeof *l);
            if (!l)
                return RT_NONE;
            s->chunk_len = l;
            s->chunks_cap = cap;
        }
        i = s->n_chunks++;
    }
    s->chunks[i] = mem;
    s->chunk_len[i] = len;
    return i;
}

static void release_slot(rt_store *s, uint32_t i)
{
    free(s->chunks[i]);
    s->chunks[i] = NULL;
    s->chunk_len[i] = 0;
    if (s->n_slot_free == s->slot_free_cap) {
        uint32_t cap = s->slot_free_cap ? s->slot_free_cap * 2 : 8;
        uint32_t *t = realloc(s->slot_free, (size_t)cap * sizeof *t);
        if (!t)
            return; /* the slot is not reused: harmless */
        s->slot_free = t;
        s->slot_free_cap = cap;
    }
    s->slot_free[s->n_slot_free++] = i;
}

static void push_free(rt_store *s, uint32_t ref, unsigned cls)
{
    *rec_at(s, ref) = s->class_free[cls];
    s->class_free[cls] = ref;
}

static int new_arena_chunk(rt_store *s)
{
    uint32_t *mem = malloc(RT_CHUNK * sizeof *mem), i;
    unsigned c;
    if (!mem)
        return RT_ENOMEM;
    if (s->cur != RT_NONE) {
        /* Hand the tail of the full chunk to the free lists of the classes that fit. */
        for (c = RT_SMALL_CLASSES; c-- > 0;)
            while (RT_CHUNK - s->cur_top >= rec_size(c)) {
                push_free(s, (s->cur << RT_CHUNK_BITS) | s->cur_top, c);
                s->cur_top += rec_size(c);
            }
    }
    i = table_slot(s, mem, RT_CHUNK);
    if (i == RT_NONE) {
        free(mem);
        return RT_ENOMEM;
    }
    s->cur = i;
    s->cur_top = 0;
    s->arena_chunks++;
    return RT_OK;
}

/* A record of capacity class cls with no binding and no kid; RT_NONE if out of memory. */
static uint32_t rec_alloc(rt_store *s, unsigned cls)
{
    uint32_t ref, size = rec_size(cls), *r;
    if (cls >= RT_SMALL_CLASSES) {
        uint32_t *mem = malloc((size_t)size * sizeof *mem), i;
        if (!mem)
            return RT_NONE;
        i = table_slot(s, mem, size);
        if (i == RT_NONE) {
            free(mem);
            return RT_NONE;
        }
        s->big_bytes += (size_t)size * sizeof *mem;
        ref = i << RT_CHUNK_BITS;
    } else if (s->class_free[cls] != RT_NONE) {
        ref = s->class_free[cls];
        s->class_free[cls] = *rec_at(s, ref);
        s->arena_live += size;
    } else {
        if ((s->cur == RT_NONE || s->cur_top + size > RT_CHUNK) && new_arena_chunk(s) != RT_OK)
            return RT_NONE;
        ref = (s->cur << RT_CHUNK_BITS) | s->cur_top;
        s->cur_top += size;
        s->arena_live += size;
    }
    r = rec_at(s, ref);
    r[0] = RT_NONE;
    r[1] = (uint32_t)cls << RT_CLASS_SHIFT;
    s->records++;
    return ref;
}

static void rec_free(rt_store *s, uint32_t ref)
{
    unsigned cls = rec_at(s, ref)[1] >> RT_CLASS_SHIFT;
    s->records--;
    if (cls >= RT_SMALL_CLASSES) {
        s->big_bytes -= (size_t)rec_size(cls) * sizeof(uint32_t);
        release_slot(s, ref >> RT_CHUNK_BITS);
        return;
    }
    s->arena_live -= rec_size(cls);
    push_free(s, ref, cls);
}

uint32_t rt_store_new_root(rt_store *s)
{
    return rec_alloc(s, 0);
}

/* ---------------------------------------------------------------- kids */

static uint32_t lower_bound(const uint32_t *words, uint32_t n, uint32_t w)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (words[mid] < w)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Inserts kid (word, ref) into the node *loc; if grown is a record, the node moves there. */
static void kids_insert(rt_store *s, uint32_t *loc, uint32_t grown, uint32_t word, uint32_t ref)
{
    uint32_t *n = rec_at(s, *loc), k = rt_nkids(n), cap = rt_node_cap(n);
    uint32_t pos = lower_bound(n + 2, k, word);
    if (grown != RT_NONE) {
        uint32_t *g = rec_at(s, grown), gcap = rt_node_cap(g);
        g[0] = n[0];
        memcpy(g + 2, n + 2, pos * sizeof *g);
        memcpy(g + 3 + pos, n + 2 + pos, (k - pos) * sizeof *g);
        memcpy(g + 2 + gcap, n + 2 + cap, pos * sizeof *g);
        memcpy(g + 3 + gcap + pos, n + 2 + cap + pos, (k - pos) * sizeof *g);
        g[2 + pos] = word;
        g[2 + gcap + pos] = ref;
        g[1] = (g[1] & ~RT_NKIDS_MASK) | (k + 1);
        rec_free(s, *loc);
        *loc = grown;
        return;
    }
    memmove(n + 3 + pos, n + 2 + pos, (k - pos) * sizeof *n);
    memmove(n + 3 + cap + pos, n + 2 + cap + pos, (k - pos) * sizeof *n);
    n[2 + pos] = word;
    n[2 + cap + pos] = ref;
    n[1]++;
}

/* Removes kid slot from the node *loc; the node moves to a smaller record when mostly empty
 * (if that allocation fails it just stays where it is). */
static void kids_remove(rt_store *s, uint32_t *loc, uint32_t slot)
{
    uint32_t *n = rec_at(s, *loc), k = rt_nkids(n) - 1, cap = rt_node_cap(n);
    unsigned cls = n[1] >> RT_CLASS_SHIFT;
    memmove(n + 2 + slot, n + 3 + slot, (k - slot) * sizeof *n);
    memmove(n + 2 + cap + slot, n + 3 + cap + slot, (k - slot) * sizeof *n);
    n[1]--;
    if (k > 0 && cls > 0 && k * 4 <= cap) {
        uint32_t r = rec_alloc(s, cls - 1);
        if (r != RT_NONE) {
            uint32_t *g = rec_at(s, r);
            n = rec_at(s, *loc); /* a big record never moves, but stay obviously right */
            g[0] = n[0];
            g[1] |= k;
            memcpy(g + 2, n + 2, k * sizeof *g);
            memcpy(g + 2 + cap / 2, n + 2 + cap, k * sizeof *g);
            rec_free(s, *loc);
            *loc = r;
        }
    }
}

/* ---------------------------------------------------------------- trie operations */

uint32_t rt_trie_find(const rt_store *s, uint32_t root, const uint32_t *words, uint32_t nw)
{
    uint32_t ref = root, d;
    for (d = 0; d < nw; d++) {
        const rt_node *n;
        uint32_t slot;
        if (ref & RT_LEAF)
            return RT_NONE;
        n = rt_node_at(s, ref);
        slot = rt_kid_find(rt_kid_words(n), rt_nkids(n), words[d]);
        if (slot == RT_NONE)
            return RT_NONE;
        ref = rt_kid_refs(n)[slot];
    }
    if (ref & RT_LEAF)
        return ref & ~RT_LEAF;
    return rt_node_at(s, ref)[0];
}

void rt_trie_cancel(rt_store *s, rt_plan *plan)
{
    if (plan->grown != RT_NONE)
        rec_free(s, plan->grown);
    while (plan->nchain)
        rec_free(s, plan->chain[--plan->nchain]);
    plan->grown = RT_NONE;
}

static int alloc_chain(rt_store *s, rt_plan *plan, uint32_t n)
{
    while (plan->nchain < n) {
        uint32_t r = rec_alloc(s, 0);
        if (r == RT_NONE) {
            rt_trie_cancel(s, plan);
            return RT_ENOMEM;
        }
        plan->chain[plan->nchain++] = r;
    }
    return RT_OK;
}

int rt_trie_plan(rt_store *s, uint32_t *root, const uint32_t *words, uint32_t nw, rt_plan *plan)
{
    uint32_t *loc = root, d = 0;
    plan->grown = RT_NONE;
    plan->nchain = 0;
    plan->existing = RT_NONE;
    for (;;) {
        uint32_t *n = rec_at(s, *loc), k = rt_nkids(n), slot, ref;
        plan->loc = loc;
        plan->depth = d;
        if (d == nw) {
            plan->existing = n[0];
            plan->state = n[0] != RT_NONE ? PLAN_EXISTS : PLAN_SET;
            return RT_OK;
        }
        slot = rt_kid_find(n + 2, k, words[d]);
        if (slot == RT_NONE) {
            plan->state = PLAN_EXTEND;
            if (k == rt_node_cap(n)) {
                unsigned cls = (n[1] >> RT_CLASS_SHIFT) + 1;
                if (cls > MAX_CLASS)
                    return RT_ENOMEM;
                plan->grown = rec_alloc(s, cls);
                if (plan->grown == RT_NONE)
                    return RT_ENOMEM;
            }
            return alloc_chain(s, plan, nw - d - 1);
        }
        ref = n[2 + rt_node_cap(n) + slot];
        if (ref & RT_LEAF) {
            if (d + 1 == nw) {
                plan->state = PLAN_EXISTS;
                plan->existing = ref & ~RT_LEAF;
                return RT_OK;
            }
            plan->state = PLAN_MATERIALIZE;
            plan->slot = slot;
            return alloc_chain(s, plan, nw - d - 1);
        }
        loc = &n[2 + rt_node_cap(n) + slot];
        d++;
    }
}

/* Gives each chain record its one kid: words[base + j], then the binding as a leaf. */
static void link_chain(rt_store *s, rt_interner *in, const rt_plan *plan, const uint32_t *words,
                       uint32_t base, uint32_t id)
{
    uint32_t j;
    for (j = 0; j < plan->nchain; j++) {
        uint32_t *c = rec_at(s, plan->chain[j]);
        c[1] = (c[1] & ~RT_NKIDS_MASK) | 1;
        c[2] = words[base + j];
        c[3] = j + 1 < plan->nchain ? plan->chain[j + 1] : (RT_LEAF | id);
        rt_intern_ref(in, words[base + j]);
    }
}

void rt_trie_commit(rt_store *s, rt_interner *in, const rt_plan *plan, const uint32_t *words,
                    uint32_t nw, uint32_t id)
{
    (void)nw;
    switch (plan->state) {
    case PLAN_SET:
        rec_at(s, *plan->loc)[0] = id;
        break;
    case PLAN_EXTEND:
        kids_insert(s, plan->loc, plan->grown, words[plan->depth],
                    plan->nchain ? plan->chain[0] : (RT_LEAF | id));
        rt_intern_ref(in, words[plan->depth]);
        link_chain(s, in, plan, words, plan->depth + 1, id);
        break;
    case PLAN_MATERIALIZE: {
        uint32_t *n = rec_at(s, *plan->loc);
        uint32_t *ref = &n[2 + rt_node_cap(n) + plan->slot];
        rec_at(s, plan->chain[0])[0] = *ref & ~RT_LEAF;
        *ref = plan->chain[0];
        link_chain(s, in, plan, words, plan->depth + 1, id);
        break;
    }
    default:
        break;
    }
}

uint32_t rt_trie_remove(rt_store *s, rt_interner *in, uint32_t *root, const uint32_t *words,
                        uint32_t nw)
{
    uint32_t *locs[RT_MAX_WORDS + 1], slots[RT_MAX_WORDS];
    uint32_t d, id, *n;
    locs[0] = root;
    for (d = 0; d < nw; d++) {
        uint32_t slot, *ref;
        n = rec_at(s, *locs[d]);
        slot = rt_kid_find(n + 2, rt_nkids(n), words[d]);
        if (slot == RT_NONE)
            return RT_NONE;
        slots[d] = slot;
        ref = &n[2 + rt_node_cap(n) + slot];
        if (*ref & RT_LEAF) {
            if (d + 1 != nw)
                return RT_NONE;
            id = *ref & ~RT_LEAF;
            kids_remove(s, locs[d], slot);
            rt_intern_unref(in, words[d]);
            goto prune;
        }
        locs[d + 1] = ref;
    }
    n = rec_at(s, *locs[nw]);
    id = n[0];
    n[0] = RT_NONE; /* a non-root node keeps its kids, so it stays */
    return id;

prune:
    /* Walk up from the node that lost the leaf: a childless node goes, or turns back into a
     * leaf of its parent if a binding ends there. */
    while (d > 0) {
        uint32_t r = *locs[d];
        n = rec_at(s, r);
        if (rt_nkids(n) > 0)
            break;
        if (n[0] != RT_NONE) {
            *locs[d] = RT_LEAF | n[0];
            rec_free(s, r);
            break;
        }
        kids_remove(s, locs[d - 1], slots[d - 1]);
        rt_intern_unref(in, words[d - 1]);
        rec_free(s, r);
        d--;
    }
    return id;
}

/* ---------------------------------------------------------------- walks */

void rt_queue_trim(rt_queue *q, size_t keep)
{
    if (q->cap > keep) {
        free(q->buf);
        q->buf = NULL;
        q->cap = 0;
    }
}

/* Doubles the ring, moving its n items (from head) to the start. */
static int queue_grow(rt_queue *q, size_t head, size_t n)
{
    size_t cap = q->cap ? q->cap * 2 : 1024, i;
    uint32_t *buf = malloc(cap * sizeof *buf);
    if (!buf)
        return RT_ENOMEM;
    for (i = 0; i < n; i++)
        buf[i] = q->buf[(head + i) & (q->cap - 1)];
    free(q->buf);
    q->buf = buf;
    q->cap = cap;
    return RT_OK;
}

int rt_trie_emit_subtree(const rt_store *s, uint32_t ref, rt_ids *out, rt_queue *q)
{
    size_t head = 0, tail = 0, mask;
    if (ref & RT_LEAF)
        return rt_ids_push(out, ref & ~RT_LEAF);
    if (q->cap & (q->cap - 1)) /* the ring needs a power of two */
        rt_queue_trim(q, 0);
    if (q->cap == 0 && queue_grow(q, 0, 0) != RT_OK)
        return RT_ENOMEM;
    mask = q->cap - 1;
    q->buf[tail++] = ref;
    while (head != tail) {
        const rt_node *n = rt_node_at(s, q->buf[head & mask]);
        const uint32_t *refs = rt_kid_refs(n);
        uint32_t k = rt_nkids(n), i;
        head++;
        if (tail - head > RT_PREFETCH_AHEAD) {
            /* Two lines: the header and, for all but the small records, the refs. */
            const rt_node *next = rt_node_at(s, q->buf[(head + RT_PREFETCH_AHEAD) & mask]);
            RT_PREFETCH(next);
            RT_PREFETCH(next + 16);
        }
        if (rt_ids_reserve(out, (size_t)k + 1) != RT_OK)
            return RT_ENOMEM;
        if (n[0] != RT_NONE)
            out->ids[out->len++] = n[0];
        for (i = 0; i < k; i++) {
            uint32_t r = refs[i];
            if (r & RT_LEAF) {
                out->ids[out->len++] = r & ~RT_LEAF;
                continue;
            }
            if (tail - head == q->cap) {
                if (queue_grow(q, head, tail - head) != RT_OK)
                    return RT_ENOMEM;
                tail -= head;
                head = 0;
                mask = q->cap - 1;
            }
            q->buf[tail++ & mask] = r;
        }
    }
    return RT_OK;
}

/* A tight copy of node n in dst, its kid refs still those of src; RT_NONE if out of memory. */
static uint32_t copy_record(rt_store *dst, const rt_node *n)
{
    uint32_t k = rt_nkids(n), r, *c;
    unsigned cls = class_for(k);
    r = rec_alloc(dst, cls);
    if (r == RT_NONE)
        return RT_NONE;
    c = rec_at(dst, r);
    c[0] = n[0];
    c[1] |= k;
    memcpy(c + 2, rt_kid_words(n), k * sizeof *c);
    memcpy(c + 2 + (1u << cls), rt_kid_refs(n), k * sizeof *c);
    return r;
}

typedef struct {
    const rt_node *src;
    uint32_t *refs; /* the copy's kid refs */
    uint32_t cur;
} copy_frame;

uint32_t rt_trie_copy(rt_store *dst, const rt_store *src, uint32_t root)
{
    copy_frame st[RT_MAX_WORDS + 1];
    uint32_t new_root = copy_record(dst, rt_node_at(src, root));
    int d = 0;
    if (new_root == RT_NONE)
        return RT_NONE;
    st[0].src = rt_node_at(src, root);
    st[0].refs = (uint32_t *)rt_kid_refs(rt_node_at(dst, new_root));
    st[0].cur = 0;
    while (d >= 0) {
        copy_frame *f = &st[d];
        uint32_t r, c;
        if (f->cur == rt_nkids(f->src)) {
            d--;
            continue;
        }
        r = rt_kid_refs(f->src)[f->cur];
        if (r & RT_LEAF) {
            f->cur++;
            continue;
        }
        c = copy_record(dst, rt_node_at(src, r));
        if (c == RT_NONE)
            return RT_NONE;
        f->refs[f->cur++] = c;
        d++;
        st[d].src = rt_node_at(src, r);
        st[d].refs = (uint32_t *)rt_kid_refs(rt_node_at(dst, c));
        st[d].cur = 0;
    }
    return new_root;
}
